#!/usr/bin/env bash
# tests/gpu/test_kg_gpu.py with DK_KG_PREFORK=0: each job's child is forked,
# and its CUDA context made, only when its job arrives (the default prepares
# it during the job before). The same verdicts, coverage and speedup
# stability must hold. Skips (77) without a GPU.
set -eu
DK_KG_PREFORK=0 exec "${DK_PYTHON:-python3}" "$(dirname "$0")/test_kg_gpu.py"
