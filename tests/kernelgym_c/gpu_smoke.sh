#!/bin/bash
# gpu_smoke.sh: the C side of KernelGym against the real harness on a GPU
# machine, by hand (not a ctest test): `kernelgym eval` on the GPU, a crash
# (illegal address) followed by the worker's gpu_check and an honest job, and
# `kernelgym score --redis auto --gpus 0` over tests/kernelgym. Writes the
# results under $1 (default /tmp/kg-gpu-smoke).
#   KG=path/to/kernelgym bash tests/kernelgym_c/gpu_smoke.sh [OUT]
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${KG:-${DK_BUILD:-build}/kernelgym}"
out=${1:-/tmp/kg-gpu-smoke}
mkdir -p "$out"
T=tests/kernelgym/tasks C=tests/kernelgym/candidates
py() { "${DK_PYTHON:-python3}" "$@"; }
summary() { py -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['status'], 'speedup', r.get('speedup'), 'coverage', (r.get('profile') or {}).get('coverage'), 'reward', r.get('reward'), 'wall_ms', r.get('wall_ms'), r.get('error','')[:200])" "$1" "$2"; }

echo "== eval on cuda"
for pair in softmax:softmax__triton gemm_bias_relu:gemm_bias_relu__torch_matmul_triton_epilogue; do
    t=${pair%%:*} c=${pair#*:}
    "$KG" eval --task $T/$t.py --candidate $C/$c.py --device cuda --gpu 0 --verbose > "$out/eval_$t.json" 2>> "$out/eval.log"
    echo "exit $?"; summary "$out/eval_$t.json" "$c"
done

echo "== crash, gpu_check, then an honest job (one worker)"
cat > "$out/crash.py" <<'PYEOF'
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_store_kernel(y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i + (1 << 40), tl.zeros([BLOCK], dtype=tl.float32), mask=i < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        bad_store_kernel[(triton.cdiv(x.numel(), 256),)](y, x.numel(), BLOCK=256)
        return y
PYEOF
"$KG" serve --gpus 0 --redis auto --verbose > "$out/url" 2> "$out/serve.log" &
spid=$!
for _ in $(seq 600); do [ -s "$out/url" ] && break; sleep 0.1; done
export KERNELGYM_REDIS=$(head -1 "$out/url")
"$KG" submit --task $T/softmax.py --candidate "$out/crash.py" --wait 300 > "$out/crash.json"; echo "exit $?"
summary "$out/crash.json" crash
"$KG" submit --task $T/softmax.py --candidate $C/softmax__triton.py --wait 300 > "$out/after_crash.json"; echo "exit $?"
summary "$out/after_crash.json" after_crash
kill -TERM $spid; wait $spid; echo "serve exit $?"
grep -E "gpu_check|restart|stopping" "$out/serve.log"

echo "== score --redis auto --gpus 0"
sol=$(mktemp -d)
cp $C/gemm_bias_relu__torch_matmul_triton_epilogue.py $sol/gemm_bias_relu.py
cp $C/conv2d_bias_relu__triton_direct.py $sol/conv2d_bias_relu.py
cp $C/softmax__triton.py $sol/softmax.py
cp $C/layernorm__triton.py $sol/layernorm.py
cp $C/row_sum__triton.py $sol/row_sum.py
"$KG" score --tasks $T --solutions $sol --redis auto --gpus 0 --json "$out/score.json" 2> "$out/score.log"
echo "score exit $?"
