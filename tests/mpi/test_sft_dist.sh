#!/usr/bin/env bash
# Data-parallel SFT does not depend on the world size. configs/tiny-sft.ini
# for 4 steps on the CPU backend:
#   - world 1 sharded (DK_ZERO=1) against world 1 unsharded: bit-identical
#     losses, grad norms and checkpointed fp32 masters and AdamW moments;
#   - worlds 2 and 3 (also with recompute = layer, and with one sequence per
#     micro-batch, so some ranks get empty slices) against world 1: per-step
#     losses and grad norms within 1e-5 relative, final parameters within
#     2e-5 absolute (the order of float sums differs, nothing else);
#   - world 2 twice: bit-identical metrics and checkpoint files;
#   - one metrics.jsonl with one line per step, written by rank 0 alone.
set -eu
. "$(dirname "$0")/mpirun.sh"
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { dk_train "$1" "$2" configs/tiny-sft.ini run.steps=4 ckpt.resume=none "${@:3}"; } # NAME NP [key=value...]
"$train" configs/tiny-sft.ini run.dir="$dir/plain" run.steps=4 ckpt.resume=none > "$dir/plain.log"
DK_ZERO=1 "$train" configs/tiny-sft.ini run.dir="$dir/z1" run.steps=4 ckpt.resume=none > "$dir/z1.log"
run w2 2
run w2b 2
run w3 3
run w2rc 2 train.recompute=layer
run w3mb 3 train.grad_accum=8
for f in model.safetensors optim/rank_00000.bin optim/rank_00001.bin; do
    cmp "$dir/w2/ckpt/step_00000004/$f" "$dir/w2b/ckpt/step_00000004/$f"
done
PYTHONPATH="$(dirname "$0")" "$py" - "$dir" <<'PY'
import json, os, sys
import optim_state
d = sys.argv[1]
def rows(n): return [json.loads(l) for l in open(f"{d}/{n}/metrics.jsonl")]
def state(n): return optim_state.load(f"{d}/{n}/ckpt/step_00000004")
base, z1 = rows("plain"), rows("z1")
assert len(base) == 4 and [r["step"] for r in base] == [1, 2, 3, 4]
for a, b in zip(base, z1):
    assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], (a, b)
ref = state("z1")
assert optim_state.equal(state("plain"), ref), "the sharded masters and moments are not the unsharded ones"
print("world 1 sharded == unsharded: losses, grad norms, masters and moments bit-identical")
for n in ("w2", "w3", "w2rc", "w3mb"):
    r = rows(n)
    assert [x["step"] for x in r] == [1, 2, 3, 4], f"{n}: metrics.jsonl has steps {[x['step'] for x in r]}"
    dl = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(base, r))
    dn = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"]) for a, b in zip(base, r))
    dw = optim_state.max_diff(state(n), ref, "master")
    print(f"{n}: max relative loss diff {dl:.2e}, grad norm {dn:.2e}; max parameter diff {dw:.2e}")
    assert dl < 1e-5 and dn < 1e-5 and dw < 2e-5, n
    files = sorted(os.listdir(f"{d}/{n}"))
    assert files == ["ckpt", "config.ini", "logs_offsets.json", "metrics.jsonl", "run.lock", "tb"], f"{n}: run dir holds {files}"
a, b = rows("w2"), rows("w2b")
for x, y in zip(a, b):
    assert x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"], (x, y)
print("world 2 twice: bit-identical")
PY
