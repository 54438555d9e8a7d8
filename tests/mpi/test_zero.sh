#!/usr/bin/env bash
# ZeRO-3 against the unsharded model at 2 and 3 ranks (tests/mpi/test_zero_model.c
# says what it checks; alone it runs at world 1).
set -eu
. "$(dirname "$0")/mpirun.sh"
for np in 2 3; do
    dk_mpirun "$np" "${DK_BUILD:-build}/tests/mpi_test_zero_model"
done
