#!/usr/bin/env bash
# tests/unit/test_kg_harness.py with DK_KG_PREFORK=1: every job's child is
# forked during the job before it (sandbox entered, ready for its job), and
# the whole corpus (honest candidates, hacks, faults, bad input) must get the
# same verdicts, with the children forked ahead killed or used, never leaked.
set -eu
DK_KG_PREFORK=1 exec "${DK_PYTHON:-.venv/bin/python}" "$(dirname "$0")/test_kg_harness.py"
