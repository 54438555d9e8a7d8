#!/usr/bin/env bash
# cuda_twin.sh TWIN: runs the CPU test tests/unit/test_X.sh named by a GPU
# twin tests/gpu/test_X_cuda.sh on the cuda device (run.device=cuda through
# DK_TRAIN_ARGS): the same assertions, on the GPU. Skips (77) without a GPU.
set -eu
here=$(dirname "$0")
. "$here/need_gpu.sh"
name=$(basename "$1" _cuda.sh)
DK_TRAIN_ARGS="run.device=cuda ${DK_TRAIN_ARGS:-}" exec bash "$here/../unit/$name.sh"
