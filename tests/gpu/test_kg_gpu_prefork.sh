#!/usr/bin/env bash
# tests/gpu/test_kg_gpu.py with DK_KG_PREFORK=1: each job's child is forked
# and its CUDA context made during the job before it, which waits for that
# setup to end before its timed calls. The same verdicts, coverage and
# speedup stability must hold. Skips (77) without a GPU.
set -eu
DK_KG_PREFORK=1 exec "${DK_PYTHON:-python3}" "$(dirname "$0")/test_kg_gpu.py"
