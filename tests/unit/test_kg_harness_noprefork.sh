#!/usr/bin/env bash
# tests/unit/test_kg_harness.py with DK_KG_PREFORK=0: each job's child is
# forked only when its job arrives (the default forks it during the job
# before). The whole corpus (honest candidates, hacks, faults, bad input)
# must get the same verdicts, and no job may run in a child forked ahead.
set -eu
DK_KG_PREFORK=0 exec "${DK_PYTHON:-.venv/bin/python}" "$(dirname "$0")/test_kg_harness.py"
