#!/usr/bin/env bash
# tests/unit/test_rl_toy.sh on the cuda device (run.device=cuda): the same
# assertions, on the GPU. Skips (77) without a GPU.
set -eu
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
DK_TRAIN_ARGS="run.device=cuda ${DK_TRAIN_ARGS:-}" exec bash "$(dirname "$0")/../unit/test_rl_toy.sh"
