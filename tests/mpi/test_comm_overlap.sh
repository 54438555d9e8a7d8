#!/usr/bin/env bash
# The mpi backend's async collectives overlap compute at 2 and 3 ranks
# (tests/mpi/test_comm_async.c: each async collective completes while the
# caller computes, before comm_wait, and equals the synchronous one). Then
# the path without the progress thread (where MPI grants no
# MPI_THREAD_MULTIPLE; DK_COMM_SYNC=1 takes it): every collective of
# tests/mpi/test_comm_ops.c against its hand-computed values, at 2 and 3.
set -eu
. "$(dirname "$0")/mpirun.sh"
bin="${DK_BUILD:-build}/tests/mpi_test_comm_async"
for np in 2 3; do
    dk_mpirun "$np" "$bin"
done
for np in 2 3; do
    log=$(mktemp)
    dk_mpirun "$np" -x DK_COMM_SYNC=1 "${DK_BUILD:-build}/tests/mpi_test_comm_ops" > "$log" 2>&1 ||
        { cat "$log"; echo "FAIL: the collectives without the progress thread at $np ranks"; exit 1; }
    cat "$log"
    grep -q "DK_COMM_SYNC=1; collectives run on the caller's thread" "$log" ||
        { echo "FAIL: DK_COMM_SYNC=1 did not take the path without the thread"; exit 1; }
    rm -f "$log"
done
