#!/usr/bin/env bash
# get-kernelbench.sh DIR: clones KernelBench (ScalingIntelligence/KernelBench)
# at a pinned commit into DIR, on a machine with internet; needs only git. The
# project ships no KernelBench files. Level 2's tasks are then in
# DIR/KernelBench/level2, ready for configs/eval-kernelbench-l2.ini and
# `kernelgym score`. Running it again on the same DIR checks the pin out again.
set -eu
if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: tools/get-kernelbench.sh DIR" >&2
    exit 2
fi
dir=$1
url=${KERNELBENCH_URL:-https://github.com/ScalingIntelligence/KernelBench.git} # a mirror may stand in
# The pinned commit (2026-03-05); its level2 holds 100 tasks.
commit=423217d9fda91e0c2d67e4a43bf62f96f6d104f1
command -v git >/dev/null 2>&1 || { echo "get-kernelbench.sh: git is not installed" >&2; exit 1; }
if [ ! -d "$dir/.git" ]; then
    if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
        echo "get-kernelbench.sh: $dir exists and is not a git checkout; give an empty or new folder" >&2
        exit 2
    fi
    git clone --quiet "$url" "$dir"
fi
git -C "$dir" fetch --quiet origin "$commit" 2>/dev/null || git -C "$dir" fetch --quiet origin
git -C "$dir" -c advice.detachedHead=false checkout --quiet "$commit"
n=$(ls "$dir"/KernelBench/level2/*.py 2>/dev/null | wc -l)
if [ "$n" -eq 0 ]; then
    echo "get-kernelbench.sh: $dir/KernelBench/level2 holds no tasks at $commit" >&2
    exit 1
fi
echo "KernelBench $commit in $dir: $n level-2 tasks in $dir/KernelBench/level2"
