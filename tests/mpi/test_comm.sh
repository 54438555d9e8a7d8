#!/usr/bin/env bash
# The collectives of dist/comm.h at 2 and 3 ranks (tests/mpi/test_comm_ops.c
# checks each against hand-computed values), also with counts past the
# plain-count limit, then the timeout: the last rank
# sleeps 30 s with [dist] timeout_s at 2 s, so the job must end non-zero
# within 20 s with a message that names the late rank; and a fatal error on
# the last rank ends the others within 20 s although their timeout is 60 s.
set -eu
. "$(dirname "$0")/mpirun.sh"
bin="${DK_BUILD:-build}/tests/mpi_test_comm_ops"
for np in 2 3; do
    dk_mpirun "$np" "$bin"
done
# Byte counts past MPI's int, scaled down: above 1000 bytes a transfer goes
# as one element of a type made of 1000-byte blocks and the rest.
dk_mpirun 3 -x DK_COMM_MAX_COUNT=1000 "$bin"
for np in 2 3; do
    log=$(mktemp)
    t0=$(date +%s)
    if dk_mpirun "$np" "$bin" timeout > "$log" 2>&1; then
        cat "$log"
        echo "FAIL: the timeout job exited 0"
        exit 1
    fi
    dt=$(( $(date +%s) - t0 ))
    cat "$log"
    late=$((np - 1))
    grep -q "ranks that did not arrive: $late\$" "$log" || { echo "FAIL: rank $late is not named"; exit 1; }
    [ "$dt" -le 20 ] || { echo "FAIL: the job took $dt s to end (bound 20 s)"; exit 1; }
    echo "timeout at $np ranks: ended after $dt s naming rank $late"
    rm -f "$log"
done
for np in 2 3; do
    log=$(mktemp)
    t0=$(date +%s)
    if dk_mpirun "$np" "$bin" fail > "$log" 2>&1; then
        cat "$log"
        echo "FAIL: the job with a failed rank exited 0"
        exit 1
    fi
    dt=$(( $(date +%s) - t0 ))
    grep -q "rank $((np - 1)): test: a fatal error on the last rank" "$log" || { cat "$log"; echo "FAIL: no message"; exit 1; }
    [ "$dt" -le 20 ] || { echo "FAIL: the job took $dt s to end after a rank failed (bound 20 s)"; exit 1; }
    echo "fatal error at $np ranks: the job ended after $dt s"
    rm -f "$log"
done
