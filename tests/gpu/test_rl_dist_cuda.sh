#!/usr/bin/env bash
# Sharded RL on the GPU, configs/toy.ini for 10 steps:
#   - NCCL at world 1 (DK_ZERO=1 dist.backend=nccl: the sharded policy, the
#     gathered inference copy and the per-step phases, every collective
#     through NCCL) is bit-identical to the unsharded run: rewards, losses
#     and grad norms at every step;
#   - two CUDA ranks sharing one GPU (dist.backend=mpi, staged through the
#     host): every step's mean reward within 0.1 of one rank's (bf16 weights
#     cast from fp32 masters whose gradient sums only change order, and
#     decode batches of another size: a rounding that moves can change a
#     sampled token); whether step 1's rollouts are byte for byte one
#     rank's is printed;
#   - two ranks twice: bit-identical;
#   - device memory does not grow: every run's mem_bytes is the same after
#     every step, and the rollout phase's inference copy is there when
#     sharded only.
# Skips (77) without a GPU.
set -eu
. "$(dirname "$0")/need_gpu.sh"
. "$(dirname "$0")/../mpi/mpirun.sh"
. "$(dirname "$0")/dist_cuda_runs.sh"
py="${DK_PYTHON:-python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dist_cuda_runs configs/toy.ini run.device=cuda run.steps=10 ckpt.resume=none
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
names = ("one", "nccl1", "two_a", "two_b")
rows = {k: [json.loads(l) for l in open(f"{d}/{k}/metrics.jsonl")] for k in names}
assert all(len(r) == 10 for r in rows.values()), {k: len(r) for k, r in rows.items()}
keys = ("reward_mean", "loss", "grad_norm")
def same(a, b):
    for i, (x, y) in enumerate(zip(rows[a], rows[b])):
        bad = [f"{k} {x[k]!r} vs {y[k]!r}" for k in keys if x[k] != y[k]]
        if bad:
            print(f"  {a} vs {b}: first difference at step {i + 1}: " + "; ".join(bad))
            return False
    return True
ok = True
s = same("one", "nccl1")
print(f"nccl at world 1 vs unsharded: bit-identical = {s}")
ok &= s
step1 = lambda n: [l for l in open(f"{d}/{n}/rollouts.jsonl") if json.loads(l).get("step") == 1]
print(f"two ranks on one GPU, step 1: rollouts equal to one rank's = {step1('one') == step1('two_a')}")
worst = max(abs(x["reward_mean"] - y["reward_mean"]) for x, y in zip(rows["one"], rows["two_a"]))
print(f"two ranks vs one rank: worst mean-reward difference {worst:.3f} (bound 0.1)")
ok &= worst <= 0.1
s = same("two_a", "two_b")
print(f"two ranks twice: bit-identical = {s}")
ok &= s
for n in names:
    flat = len({x["mem_bytes"] for x in rows[n]}) == 1
    copy = rows[n][-1]["mem_infer_copy"]
    print(f"{n}: mem_bytes {rows[n][-1]['mem_bytes']} flat = {flat}; inference copy {copy}, KV cache "
          f"{rows[n][-1]['mem_kv_cache']}, rollout peak {rows[n][-1]['mem_rollout_peak']}, train peak "
          f"{rows[n][-1]['mem_train_peak']}")
    ok &= flat and (copy > 0) == (n != "one")
sys.exit(0 if ok else 1)
PY
