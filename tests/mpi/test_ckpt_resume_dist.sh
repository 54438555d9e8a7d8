#!/usr/bin/env bash
# Checkpoints of multi-rank runs resume at any world size, on the CPU backend.
# SFT (configs/tiny-sft.ini, ZeRO-3 at world > 1) saved at world 2 every step,
# resumed from step 2 to step 4:
#   - at world 2: steps 3-4 bit-identical to the uninterrupted world-2 run
#     (metrics and the step-4 fp32 masters, AdamW moments and step count), so
#     the load restored every rank's state exactly;
#   - at world 1 unsharded and with DK_ZERO=1 (sharded at world 1): the two
#     bit-identical to each other;
#   - at worlds 1 and 3: steps 3-4 like an uninterrupted run of that size,
#     losses and grad norms within 1e-5 relative and the final masters within
#     2e-5 absolute (the first two steps ran at world 2: only the order of
#     float sums differs);
#   - a sharded run writes ckpt/ and no weights/ directory;
#   - a fresh start from model.path (the step-4 checkpoint's HF files, each
#     rank reading only its slices): DK_ZERO=1 at world 1 bit-identical to
#     the unsharded run (metrics and state), world 3 within the same bounds.
# RL (configs/toy.ini; ZeRO-3 at world > 1, every rank writing its slices)
# saved at world 2 at step 2:
#   - resumed at world 2: steps 3-4 bit-identical to the uninterrupted run
#     (metrics, timings aside, and the step-4 fp32 state);
#   - resumed at world 1 (a replica) and with DK_ZERO=1: the two
#     bit-identical to each other;
#   - resumed at worlds 1 and 3: rewards equal, losses within 1e-5 relative
#     (absolute below 1e-3) of an uninterrupted run of that size, the final
#     masters within 2e-4 absolute (2% of one AdamW step at lr 1e-2). Only
#     the order of float sums differs, and AdamW magnifies it where a
#     gradient is ~0; how much depends on the CPU's BLAS kernels
#     (OPENBLAS_CORETYPE): 2.5e-7 to 1.3e-5 with Nehalem and Sandybridge,
#     2.5e-5 with Haswell, the kernels an AVX2 CPU picks.
set -eu
. "$(dirname "$0")/mpirun.sh"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sft() { dk_train "$1" "$2" configs/tiny-sft.ini run.steps=4 "${@:3}"; } # NAME NP [key=value...]
rl() { dk_train "$1" "$2" configs/toy.ini run.steps=4 "${@:3}"; }
sft w2 2 ckpt.every=1 ckpt.keep=0 ckpt.resume=none
c=$dir/w2/ckpt/step_00000002
sft r2 2 ckpt.resume="$c"
sft w1 1 ckpt.resume=none
sft r1 1 ckpt.resume="$c"
DK_ZERO=1 sft r1z 1 ckpt.resume="$c"
sft w3 3 ckpt.resume=none
sft r3 3 ckpt.resume="$c"
hf=$dir/w2/ckpt/step_00000004
sft h1 1 model.path="$hf" ckpt.resume=none
DK_ZERO=1 sft h1z 1 model.path="$hf" ckpt.resume=none
sft h3 3 model.path="$hf" ckpt.resume=none
grep -q "resharded $c from 2 ranks to 3" "$dir/r3.log" || { cat "$dir/r3.log"; echo "FAIL: r3 did not reshard"; exit 1; }
rl t2 2 ckpt.every=2 ckpt.keep=0 ckpt.resume=none
c=$dir/t2/ckpt/step_00000002
rl tr2 2 ckpt.resume="$c"
rl tw1 1 ckpt.resume=none
rl tr1 1 ckpt.resume="$c"
DK_ZERO=1 rl tr1z 1 ckpt.resume="$c"
rl tw3 3 ckpt.resume=none
rl tr3 3 ckpt.resume="$c"
PYTHONPATH="$(dirname "$0")" "$py" - "$dir" <<'PY'
import json, os, sys
import optim_state as os_
d = sys.argv[1]
def rows(n): return [json.loads(l) for l in open(f"{d}/{n}/metrics.jsonl")]
def state(n): return os_.load(f"{d}/{n}/ckpt/step_00000004")
# Timings, and the rollout-vs-trainer logprob gap (float noise by nature).
def timing(k): return k.endswith("_s") or k.startswith("logprob_mismatch")
def compare(a, b, exact, what):
    assert [r["step"] for r in b] == [3, 4], f"{what}: steps {[r['step'] for r in b]}"
    worst = 0.0
    for x, y in zip(a[2:], b):
        for k in x:
            if timing(k): continue
            v = x[k]
            if exact or not isinstance(v, float) or v.is_integer() or k.startswith(("reward", "fast")) or \
                    k.endswith("_rate"):
                assert x[k] == y[k], f"{what}: step {x['step']} {k}: {x[k]} != {y[k]}"
            else:
                worst = max(worst, abs(x[k] - y[k]) / max(abs(x[k]), 1e-3))  # values near 0 compared absolutely
    assert worst < 1e-5, f"{what}: relative difference {worst:.2e}"
    return worst
compare(rows("w2"), rows("r2"), True, "sft r2")
assert os_.equal(state("w2"), state("r2")), "sft r2: step-4 optimizer state differs from the uninterrupted run"
print("sft: saved at 2, resumed at 2: metrics and fp32 state bit-identical")
def same(a, b, what):
    ra, rb = rows(a), rows(b)
    assert [{k: v for k, v in x.items() if not timing(k)} for x in ra] == \
           [{k: v for k, v in x.items() if not timing(k)} for x in rb], f"{what}: metrics differ"
    assert os_.equal(state(a), state(b)), f"{what}: fp32 state differs"
same("r1", "r1z", "resumed at 1, DK_ZERO=1 vs unsharded")
print("sft: resumed at 1 sharded == unsharded: bit-identical")
for w in (1, 3):
    rel = compare(rows(f"w{w}"), rows(f"r{w}"), False, f"sft r{w}")
    dw = os_.max_diff(state(f"w{w}"), state(f"r{w}"), "master")
    print(f"sft: saved at 2, resumed at {w}: max relative loss / grad norm diff {rel:.2e}, max master diff {dw:.2e}")
    assert dw < 2e-5, f"sft r{w}: masters differ by {dw}"
same("h1", "h1z", "from model.path, DK_ZERO=1 vs unsharded")
ra, rb = rows("h1"), rows("h3")
rel = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(ra, rb) for k in ("loss", "grad_norm"))
dw = os_.max_diff(state("h1"), state("h3"), "master")
print(f"sft from model.path: world 1 sharded == unsharded bit-identical; world 3: {rel:.2e} relative, "
      f"masters within {dw:.2e}")
assert len(ra) == len(rb) == 4 and rel < 1e-5 and dw < 2e-5
for n in ("w2", "r3"):
    files = sorted(os.listdir(f"{d}/{n}"))
    assert "weights" not in files and "ckpt" in files, f"{n}: run dir holds {files}"
compare(rows("t2"), rows("tr2"), True, "rl tr2")
assert os_.equal(state("t2"), state("tr2")), "rl tr2: step-4 optimizer state differs from the uninterrupted run"
print("rl: saved at 2, resumed at 2: metrics and fp32 state bit-identical")
# A replica and shards at world 1 differ only in what memory they count.
ra, rb = rows("tr1"), rows("tr1z")
assert [{k: v for k, v in x.items() if not timing(k) and not k.startswith("mem_")} for x in ra] == \
       [{k: v for k, v in x.items() if not timing(k) and not k.startswith("mem_")} for x in rb], \
    "rl resumed at 1, DK_ZERO=1 vs replica: metrics differ"
assert os_.equal(state("tr1"), state("tr1z")), "rl resumed at 1, DK_ZERO=1 vs replica: fp32 state differs"
print("rl: resumed at 1 sharded == replica: bit-identical")
for w in (1, 3):
    rel = compare(rows(f"tw{w}"), rows(f"tr{w}"), False, f"rl tr{w}")
    dw = os_.max_diff(state(f"tw{w}"), state(f"tr{w}"), "master")
    print(f"rl: saved at 2, resumed at {w}: rewards equal, max relative difference {rel:.2e}, "
          f"max master diff {dw:.2e}")
    assert dw < 2e-4, f"rl tr{w}: masters differ by {dw}"
PY
