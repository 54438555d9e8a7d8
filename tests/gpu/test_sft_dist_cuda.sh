#!/usr/bin/env bash
# Data-parallel SFT on the GPU, configs/tiny-sft.ini for 20 steps:
#   - NCCL at world 1 (DK_ZERO=1 dist.backend=nccl: the sharded model with
#     every collective through NCCL) is bit-identical to the unsharded run:
#     losses and grad norms at every step;
#   - two CUDA ranks sharing one GPU (dist.backend=mpi, staged through the
#     host) follow the one-rank run: |loss diff| <= 5e-3 relative at every
#     step (bf16 weights are the cast of fp32 masters whose gradient sums
#     only change order, so rounding rarely moves);
#   - two ranks twice: bit-identical.
# Skips (77) without a GPU.
set -eu
. "$(dirname "$0")/need_gpu.sh"
. "$(dirname "$0")/../mpi/mpirun.sh"
. "$(dirname "$0")/dist_cuda_runs.sh"
py="${DK_PYTHON:-python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dist_cuda_runs configs/tiny-sft.ini run.device=cuda run.steps=20 ckpt.resume=none
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
rows = {k: [json.loads(l) for l in open(f"{d}/{k}/metrics.jsonl")] for k in ("one", "nccl1", "two_a", "two_b")}
one = rows["one"]
assert all(len(r) == 20 for r in rows.values()), {k: len(r) for k, r in rows.items()}
ok = True
same = all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(one, rows["nccl1"]))
print(f"nccl at world 1 vs unsharded: bit-identical = {same}")
ok &= same
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(one, rows["two_a"]))
print(f"two ranks on one GPU vs one rank: worst relative loss diff {worst:.2e} (bound 5e-3)")
ok &= worst <= 5e-3
same = all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(rows["two_a"], rows["two_b"]))
print(f"two ranks twice: bit-identical = {same}")
ok &= same
sys.exit(0 if ok else 1)
PY
