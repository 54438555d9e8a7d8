#!/usr/bin/env bash
# Eval mode end to end on the CPU: the toy policy before and after RL, greedy.
# The random model answers no task correctly; after configs/toy.ini's 40 RL
# steps, loaded back from its final checkpoint, it answers every one. Checks
# the printed table and eval.json agree.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" configs/toy.ini run.mode=eval rl.temperature=0 run.dir="$tmp/before" > "$tmp/before.log"
"$train" configs/toy.ini run.dir="$tmp/rl" > "$tmp/rl.log"
"$train" configs/toy.ini run.mode=eval rl.temperature=0 model.path="$tmp/rl/ckpt/step_00000040" \
    run.dir="$tmp/after" > "$tmp/after.log"
grep -A3 "fast@1.0" "$tmp/after.log"
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
before = json.load(open(f"{d}/before/eval.json"))
after = json.load(open(f"{d}/after/eval.json"))
cb = before["turns"][-1]["correct_rate"]
ca = after["turns"][-1]["correct_rate"]
print(f"toy eval, greedy: correct {cb:.2f} before RL, {ca:.2f} after")
assert after["n_tasks"] == 4 and len(after["tasks"]) == 4
assert cb == 0.0 and ca == 1.0, (cb, ca)
# Untimed answers are never fast, whatever their correctness.
assert after["turns"][-1]["fast_1.0"] == 0.0
PY
