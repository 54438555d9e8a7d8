#!/bin/bash
# test_kg_score_harness.sh: `kernelgym score` with the real harness
# (env.harness.server) in CPU mode (TRITON_INTERPRET=1: correctness and hack
# checks are real, timing is unavailable) on the tasks of tests/kernelgym/tasks
# and a solutions folder assembled here from tests/kernelgym/candidates:
#   gemm_bias_relu     <- gemm_bias_relu__torch_matmul_triton_epilogue   correct
#   conv2d_bias_relu   <- conv2d_bias_relu__torch_conv_triton_epilogue   correct
#   softmax            <- softmax__triton                                correct
#   cancel_sum         <- cancel_sum__triton_blocked                     correct by the fp64 budget
#   row_sum            <- mean_dim__triton (the wrong operation)         not correct
#   layernorm          <- a try/except fallback written here             hack
#   mean_dim, gemm_scale_sigmoid: no solution                            missing
# Without timing only p = 0 can count: fast_0 = 4/8, fast_p = 0 for p > 0.
# The same folder also goes through `kernelgym eval` once, whose result must
# agree with score's for that task.
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${DK_BUILD:-build}/kernelgym"
PY="${DK_PYTHON:-.venv/bin/python}"
[ -x "$KG" ] || { echo "FAIL: $KG not built"; exit 1; }
[ -x "$PY" ] && [ -f env/harness/server.py ] || { echo "no venv or harness: skipped"; exit 77; }
export DK_PYTHON=$PY
unset KERNELGYM_SERVER
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DK_KG_CACHE=$tmp/cache
C=tests/kernelgym/candidates
mkdir -p "$tmp/sol"
cp $C/gemm_bias_relu__torch_matmul_triton_epilogue.py "$tmp/sol/gemm_bias_relu.py"
cp $C/conv2d_bias_relu__torch_conv_triton_epilogue.py "$tmp/sol/conv2d_bias_relu.py"
cp $C/softmax__triton.py "$tmp/sol/softmax.py"
cp $C/cancel_sum__triton_blocked.py "$tmp/sol/cancel_sum.py"
cp $C/mean_dim__triton.py "$tmp/sol/row_sum.py"
cat > "$tmp/sol/layernorm.py" <<'PYEOF'
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.ref = None

    def forward(self, x):
        try:
            y = torch.empty_like(x)
            copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            raise RuntimeError("fall back")
        except Exception:
            return torch.nn.functional.layer_norm(x, x.shape[-1:])
PYEOF
t0=$(date +%s.%N)
timeout 300 "$KG" score --tasks tests/kernelgym/tasks --solutions "$tmp/sol" --device cpu --correct-trials 2 --json "$tmp/rep.json" \
    > "$tmp/out.txt" 2> "$tmp/err.txt"
rc=$?
t=$(echo "$(date +%s.%N) - $t0" | bc)
cat "$tmp/out.txt"
[ $rc -eq 0 ] || { echo "FAIL: score exited $rc"; tail -20 "$tmp/err.txt"; exit 1; }
timeout 120 "$KG" eval --task tests/kernelgym/tasks/softmax.py --candidate "$tmp/sol/softmax.py" --device cpu --correct-trials 2 \
    > "$tmp/eval.json" 2> /dev/null || { echo "FAIL: eval exited non-zero"; exit 1; }
"$PY" - "$tmp/rep.json" "$tmp/eval.json" <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1]))
ev = json.load(open(sys.argv[2]))
bad = []
want = {"0": 4 / 8, "0.5": 0, "0.8": 0, "1": 0, "1.2": 0, "1.5": 0, "2": 0}
for p, v in want.items():
    if abs(rep["fast_p"][p] - v) > 1e-12:
        bad.append(f"fast_{p} = {rep['fast_p'][p]}, expected {v}")
by = {t["task"]: t for t in rep["tasks"]}
for name in ("gemm_bias_relu", "conv2d_bias_relu", "softmax", "cancel_sum"):
    r = by[name]["result"] or {}
    if by[name]["status"] != "ok" or r.get("timing_available") or abs(r.get("reward", -1) - 0.3) > 1e-12:
        bad.append(f"{name}: {by[name]['status']}, reward {r.get('reward')}: {r.get('error', '')[:300]}")
if (by["cancel_sum"]["result"] or {}).get("correct_rule") != "fp64_budget":
    bad.append(f"cancel_sum: correct_rule {(by['cancel_sum']['result'] or {}).get('correct_rule')}")
if by["row_sum"]["status"] in ("ok", "missing"):
    bad.append(f"row_sum (a mean for a sum) was judged {by['row_sum']['status']}")
lr = by["layernorm"]["result"] or {}
if by["layernorm"]["status"] != "hack" or "static:try_except_fallback" not in lr.get("hack", {}).get("reasons", []):
    bad.append(f"layernorm fallback: {by['layernorm']['status']} {lr.get('hack')}")
for name in ("mean_dim", "gemm_scale_sigmoid"):
    if by[name]["status"] != "missing" or by[name]["solution"] is not None:
        bad.append(f"{name} should be missing")
if ev.get("status") != by["softmax"]["status"] or ev.get("reward") != by["softmax"]["result"]["reward"]:
    bad.append(f"eval gave {ev.get('status')} / {ev.get('reward')}, score gave {by['softmax']['status']}")
print("statuses:", {k: v["status"] for k, v in by.items()})
print("row_sum error:", (by["row_sum"]["result"] or {}).get("error", "")[:120].replace("\n", " "))
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PYEOF
rc=$?
printf "score with the real harness (CPU): %.1f s\n" "$t"
exit $rc
