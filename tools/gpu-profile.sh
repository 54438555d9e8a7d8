#!/usr/bin/env bash
# gpu-profile.sh: Nsight Compute (ncu) reports for the kernels whose speed
# is furthest from the hardware limit, one ncu run per kernel, each report
# under OUT (default ./gpu-profile-out) as text: speed of light, memory
# workload, warp stall reasons, occupancy. The benchmarks of tools/bench
# drive the kernels at their benchmark shapes; ncu keeps the clocks as they
# are (--clock-control none) so the numbers compare with the benchmarks'.
#   tools/gpu-profile.sh [OUT] [KERNEL_REGEX]
# KERNEL_REGEX limits the run to the entries whose kernel name it matches.
# Builds through tools/gpu-build.sh like tools/gpu-check.sh.
set -u
out=${1:-gpu-profile-out}
only=${2:-}
mkdir -p "$out"
export DK_CMAKE_ARGS="-DDK_CUDA_OPS=ON ${DK_CMAKE_ARGS:-}"
export DK_BUILD_TARGETS="bench_generate bench_ops bench_attention"
# shellcheck source=/dev/null
. tools/gpu-build.sh > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
command -v ncu >/dev/null || { echo "gpu-profile: ncu is not on the PATH"; exit 1; }
# name | kernel regex | launches to skip | command
entries=(
  "paged_decode|paged_decode|20|build/bench_generate --quick"
  "matmul_skinny|matmul_skinny|20|build/bench_generate --quick"
  "gemv|gemv_rows|40|build/bench_generate --quick"
  "qkv_to_cache|qkv_to_cache_kernel|20|build/bench_generate --quick"
  "rmsnorm_bwd|norm_bwd_vec|4|build/bench_ops --quick"
  "rope|rope_vec|4|build/bench_ops --quick"
  "embedding_bwd|emb_window_sums|2|build/bench_ops --quick"
  "attention_fwd|attn_fwd|2|build/bench_attention"
)
for e in "${entries[@]}"; do
  IFS='|' read -r name regex skip cmd <<< "$e"
  if [ -n "$only" ] && ! [[ $regex =~ $only ]]; then continue; fi
  # shellcheck disable=SC2086
  timeout 300 ncu --clock-control none -k "regex:$regex" -s "$skip" -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats $cmd > "$out/ncu_$name.txt" 2>&1
  echo "== $name ($regex): $(grep -E 'Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy' \
    "$out/ncu_$name.txt" | tr -s ' ' | tr '\n' ';' | head -c 400)"
done
