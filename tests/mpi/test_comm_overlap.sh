#!/usr/bin/env bash
# The mpi backend's async collectives overlap compute at 2 and 3 ranks
# (tests/mpi/test_comm_async.c: each async collective completes while the
# caller computes, before comm_wait, and equals the synchronous one).
set -eu
. "$(dirname "$0")/mpirun.sh"
bin="${DK_BUILD:-build}/tests/mpi_test_comm_async"
for np in 2 3; do
    dk_mpirun "$np" "$bin"
done
