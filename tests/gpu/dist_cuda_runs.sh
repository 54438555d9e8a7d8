# dist_cuda_runs.sh: sourced by the GPU data-parallel tests after
# need_gpu.sh and mpirun.sh. dist_cuda_runs CONFIG [key=value...] trains into
# the caller's $tmp: `one` (one rank, as configured), `nccl1` (DK_ZERO=1 over
# NCCL at world 1, checked to be sharded over nccl) and `two_a`, `two_b`
# (two ranks sharing the GPU through the mpi backend), each with its log.
dist_cuda_runs() {
    local train="${DK_BUILD:-build}/train" r
    "$train" "$@" run.dir="$tmp/one" > "$tmp/one.log" 2>&1 || { tail -20 "$tmp/one.log"; exit 1; }
    DK_ZERO=1 "$train" "$@" run.dir="$tmp/nccl1" dist.backend=nccl > "$tmp/nccl1.log" 2>&1 ||
        { tail -20 "$tmp/nccl1.log"; exit 1; }
    grep -q "ZeRO-3" "$tmp/nccl1.log" && grep -q "(nccl)" "$tmp/nccl1.log" ||
        { echo "FAIL: not sharded over nccl"; exit 1; }
    for r in a b; do
        dk_mpirun 2 "$train" "$@" run.dir="$tmp/two_$r" dist.backend=mpi > "$tmp/two_$r.log" 2>&1 ||
            { tail -20 "$tmp/two_$r.log"; exit 1; }
    done
}
