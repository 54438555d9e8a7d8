#!/usr/bin/env bash
# gpu-check.sh: everything a GPU machine should confirm, in one command, with
# every log under OUT (default ./gpu-check-out): the CUDA build, the GPU
# tests (ctest -L gpu), compute-sanitizer memcheck on the op tests, and every
# benchmark of tools/bench with its ratios against PyTorch and the hardware
# limits. Meant for a machine with CUDA, torch and triton in python3 but none
# of the Debian libraries: it builds through tools/gpu-build.sh, which unpacks
# .deps.tar.xz when present.
#   tools/gpu-check.sh [OUT] [all|tests|bench] [quick]
# "tests" stops after the GPU tests and memcheck, "bench" skips them, so the
# two halves fit the time limit of separate calls on a lent machine.
set -u
out=${1:-gpu-check-out}
phase=${2:-all}
quick=${3:-}
mkdir -p "$out"
export DK_CMAKE_ARGS="-DDK_CUDA_OPS=ON ${DK_CMAKE_ARGS:-}"
# shellcheck source=/dev/null
. tools/gpu-build.sh > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
export DK_PYTHON=${DK_PYTHON:-python3} DK_SOURCE=$PWD DK_BUILD=$PWD/build
nvidia-smi -L | tee "$out/gpu.txt"
if [ "$phase" != bench ]; then
(cd build && ctest -L gpu -V --timeout 240) > "$out/ctest_gpu.log" 2>&1
grep -E "tests passed|Test +#[0-9]+:" "$out/ctest_gpu.log"
if command -v compute-sanitizer >/dev/null 2>&1; then
  for t in build/tests/gpu_test_cuda_* build/tests/gpu_test_gen_cuda_ops; do
    case "$t" in *model*) continue ;; esac
    compute-sanitizer --tool memcheck --print-limit 5 "$t" > "$out/memcheck_$(basename "$t").log" 2>&1
    echo "memcheck $(basename "$t"): $(grep -E 'ERROR SUMMARY' "$out/memcheck_$(basename "$t").log" | tail -1)"
  done
fi
fi
[ "$phase" = tests ] && exit 0
q=${quick:+--quick}
build/bench_ops $q > "$out/bench_ops.log" 2>&1
build/bench_attention > "$out/bench_attention.log" 2>&1
build/bench_lmhead > "$out/bench_lmhead.log" 2>&1
build/bench_train $q --op-times > "$out/bench_train.log" 2>&1
build/bench_train --wide $q --op-times > "$out/bench_train_wide.log" 2>&1
# The two PyTorch anchors (plain generate, static cache + torch.compile) at
# bench_generate's shape, then at the RL shape of bench_generate_recipe.
anchor() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
$DK_PYTHON tools/bench/bench_generate_hf.py > "$out/bench_generate_hf.log" 2>"$out/bench_generate_hf.err"
hf=$(anchor hf_tokens_per_s "$out/bench_generate_hf.log")
hfs=$(anchor hf_static_tokens_per_s "$out/bench_generate_hf.log")
build/bench_generate ${hf:+--hf-tps $hf} ${hfs:+--hf-static-tps $hfs} $q > "$out/bench_generate.log" 2>&1
if [ -z "$quick" ]; then
  $DK_PYTHON tools/bench/bench_generate_hf.py --batch 256 --prompt 2048 --new 1024 --repeats 3 \
    > "$out/bench_generate_hf_rl.log" 2>"$out/bench_generate_hf_rl.err"
  rhf=$(anchor hf_tokens_per_s "$out/bench_generate_hf_rl.log")
  rhfs=$(anchor hf_static_tokens_per_s "$out/bench_generate_hf_rl.log")
fi
build/bench_generate_recipe ${rhf:+--hf-tps $rhf} ${rhfs:+--hf-static-tps $rhfs} $q > "$out/bench_generate_recipe.log" 2>&1
build/bench_generate ${hf:+--hf-tps $hf} --no-graphs --quick > "$out/bench_generate_nographs.log" 2>&1
$DK_PYTHON tools/bench/bench_kernelgym.py --runs 3 > "$out/bench_kernelgym.log" 2>&1
$DK_PYTHON tools/bench/bench_kernelgym.py --no-prefork > "$out/bench_kernelgym_noprefork.log" 2>&1
for f in "$out"/bench_*.log; do echo "== $f"; grep -iE "ratio|x torch|roofline|fraction|overhead|jobs|TFLOP|TB/s|graphs|MFU" "$f" | head -20; done
