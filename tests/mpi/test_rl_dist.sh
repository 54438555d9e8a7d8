#!/usr/bin/env bash
# Data-parallel RL does not depend on the world size. configs/toy.ini (TRLOO,
# PPO, the toy reward) for 6 steps on the CPU backend; at world > 1 the
# policy is sharded (ZeRO-3, trainer/zero.h), at world 1 it is a replica:
#   - world 1 with DK_ZERO=1 (sharded, the inference copy, the phases)
#     against world 1: metrics and checkpoint bit-identical (zero.h: "at
#     world 1 the result is bit-identical"), also with a KL reference
#     (rl.kl_coef > 0: the sharded reference against model_create's);
#   - worlds 2 and 3 against world 1: the same rollouts (rollouts.jsonl
#     byte-identical: every response, outcome and reward), the same per-step
#     rewards and response lengths exactly; loss within 1e-5 relative + 1e-6
#     absolute (the loss is a token mean of advantage-weighted ratios whose
#     terms are ~0.1-1 and cancel to ~1e-10 when TRLOO advantages sum to
#     zero, so what is left is fp32 rounding of those terms: 5.5e-9 to
#     2.8e-8 apart across worlds with mini-batches, by the BLAS kernels; a
#     wrong advantage or ratio moves it by ~0.1), grad norm and entropy
#     within 1e-5 relative; the fp32 masters and AdamW moments of the final checkpoint
#     within 1e-3 absolute (10% of one AdamW step at lr 1e-2; only the order
#     of float sums differs, which AdamW magnifies where a gradient is ~0,
#     by an amount that depends on the CPU's BLAS kernels: with two
#     mini-batches at world 3, 3.6e-5 with OpenBLAS's Nehalem kernels,
#     1.2e-4 with Haswell's, 1.7e-4 with Sandybridge's; a lost or doubled
#     gradient shard moves masters by ~lr, and the grad norm bound above
#     catches it first);
#   - world 3 with two mini-batches and two micro-batches each, so ranks
#     straddle mini-batch bounds, against world 1 with the same settings;
#   - world 3 with 2 tasks a step, so one rank rolls out nothing (and runs
#     one-token masked micro-batches for the sharded model's collectives);
#   - world 2 with the KL reference against world 1 with it;
#   - world 2 twice: bit-identical metrics (timings aside) and checkpoint;
#   - the run directory holds one metrics.jsonl and one rollouts.jsonl,
#     written by rank 0 alone;
#   - the memory phases of the same runs: tests/mpi/rl_phases.py.
set -eu
. "$(dirname "$0")/mpirun.sh"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() { dk_train "$1" "$2" configs/toy.ini run.steps=6 "${@:3}"; } # NAME NP [key=value...]
run w1 1
DK_ZERO=1 run z1 1
run w1kl 1 rl.kl_coef=0.05
DK_ZERO=1 run z1kl 1 rl.kl_coef=0.05
run w2kl 2 rl.kl_coef=0.05
run w2 2
run w2b 2
run w3 3
run w1mb 1 rl.mini_batches=2 train.grad_accum=2
run w3mb 3 rl.mini_batches=2 train.grad_accum=2
run w1few 1 train.batch_size=16
run w3few 3 train.batch_size=16
for f in model.safetensors optim/rank_00000.bin optim/rank_00001.bin; do
    cmp "$dir/w2/ckpt/step_00000006/$f" "$dir/w2b/ckpt/step_00000006/$f"
done
for p in "w1 z1" "w1kl z1kl"; do
    set -- $p
    for f in model.safetensors optim/rank_00000.bin; do
        cmp "$dir/$1/ckpt/step_00000006/$f" "$dir/$2/ckpt/step_00000006/$f" ||
            { echo "FAIL: DK_ZERO=1 at world 1: $f differs from the replica's ($1, $2)"; exit 1; }
    done
done
PYTHONPATH="$(dirname "$0")" "$py" - "$dir" <<'PY'
import glob, json, os, sys
import numpy as np
import optim_state as os_
d = sys.argv[1]
timing = {"rollout_s", "env_s", "train_s", "step_s", "rollout_tokens_per_s", "train_tokens_per_s"}
# Device memory counts (ops_mem_bytes) differ by design between a replica and
# shards; test_rl_phases.sh checks them.
def mem(k): return k.startswith("mem_")
exact = ["reward_mean", "reward_mean_turn1", "reward_std_turn1", "response_len_mean", "fast1", "correct_rate",
         "prs_drop_rate", "lr"]
def rows(n): return [json.loads(l) for l in open(f"{d}/{n}/metrics.jsonl")]
def state(n):
    """The final checkpoint's fp32 masters, m and v, whole units (any world)."""
    return os_.load(f"{d}/{n}/ckpt/step_00000006")
def compare(base, n):
    a, b = rows(base), rows(n)
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6], f"{n}: steps {[r['step'] for r in b]}"
    for x, y in zip(a, b):
        for k in exact:
            assert x[k] == y[k], f"{n} step {x['step']}: {k} {y[k]} != {x[k]} at world 1"
    dl = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    loss_ok = all(abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]) + 1e-6 for x, y in zip(a, b))
    dn = max(abs(x["grad_norm"] - y["grad_norm"]) / (abs(x["grad_norm"]) + 1e-12) for x, y in zip(a, b))
    de = max(abs(x["entropy"] - y["entropy"]) / (abs(x["entropy"]) + 1e-12) for x, y in zip(a, b))
    sa, sb = state(base), state(n)
    assert sa["t"] == sb["t"], f"{n}: step counts {sa['t']}, {sb['t']}"
    dw = max(os_.max_diff(sa, sb, f) for f in ("master", "m", "v"))
    print(f"{n} vs {base}: rewards equal; max loss diff {dl:.1e}, relative grad norm {dn:.1e}, "
          f"entropy {de:.1e}; max master/moment diff {dw:.1e}")
    assert loss_ok and dn < 1e-5 and de < 1e-5 and dw < 1e-3, n
    assert open(f"{d}/{base}/rollouts.jsonl", "rb").read() == open(f"{d}/{n}/rollouts.jsonl", "rb").read(), \
        f"{n}: rollouts.jsonl differs from {base}'s"
    files = sorted(os.listdir(f"{d}/{n}"))
    assert files == ["ckpt", "config.ini", "logs_offsets.json", "metrics.jsonl", "rollouts.jsonl", "run.lock", "tb"], f"{n}: run dir holds {files}"
for base, n in (("w1", "w2"), ("w1", "w3"), ("w1mb", "w3mb"), ("w1few", "w3few"), ("w1kl", "w2kl")):
    compare(base, n)
assert any(r["ref_kl"] != 0 for r in rows("w1kl")), "kl_coef 0.05: no reference KL measured"
for base, n in (("w1", "z1"), ("w1kl", "z1kl")):
    for x, y in zip(rows(base), rows(n)):
        for k in x:
            assert k in timing or mem(k) or x[k] == y[k], f"DK_ZERO=1 {n}: step {x['step']} {k}: {x[k]} != {y[k]}"
    assert open(f"{d}/{base}/rollouts.jsonl", "rb").read() == open(f"{d}/{n}/rollouts.jsonl", "rb").read()
    assert os_.equal(state(base), state(n))
print("world 1, DK_ZERO=1 against the replica: bit-identical (with and without the KL reference)")
assert len(open(f"{d}/w2/rollouts.jsonl", "rb").readlines()) == 6 * 32
for x, y in zip(rows("w2"), rows("w2b")):
    for k in x:
        assert k in timing or x[k] == y[k], f"world 2 twice: step {x['step']} {k}: {x[k]} != {y[k]}"
print("world 2 twice: bit-identical")
PY
"$py" "$(dirname "$0")/rl_phases.py" "$dir"
