#!/usr/bin/env bash
# tests/unit/test_rl_resume.sh on the cuda device (see cuda_twin.sh).
exec bash "$(dirname "$0")/cuda_twin.sh" "$0"
