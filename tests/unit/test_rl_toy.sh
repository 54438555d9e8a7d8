#!/usr/bin/env bash
# RL learns on the CPU: configs/toy.ini (a tiny random model, a verifiable
# digit-pattern reward) must raise the mean reward from under 0.2 to over 0.8
# with TRLOO within its 40 steps; GRPO runs the same budget plus 20 steps for
# the comparison and must learn too. Prints both curves (every 5 steps).
set -eu
# DK_TRAIN_ARGS: extra key=value overrides (the GPU twin passes run.device=cuda).
train="${DK_BUILD:-build}/train"
read -r -a extra <<< "${DK_TRAIN_ARGS:-}"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" configs/toy.ini ${extra[@]+"${extra[@]}"} run.dir="$tmp/trloo" > "$tmp/trloo.log"
"$train" configs/toy.ini ${extra[@]+"${extra[@]}"} run.dir="$tmp/grpo" rl.advantage=grpo run.steps=60 > "$tmp/grpo.log"
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def curve(name):
    return [json.loads(l)["reward_mean"] for l in open(f"{d}/{name}/metrics.jsonl")]
ok = True
for name, last_n in (("trloo", 40), ("grpo", 60)):
    c = curve(name)
    print(f"{name:6s}", " ".join(f"{c[i]:.2f}" for i in range(0, len(c), 5)), f"| last {c[-1]:.3f}")
    start = sum(c[:3]) / 3
    best_late = max(c[-5:])
    if not (start < 0.2 and best_late > 0.8):
        print(f"FAIL {name}: start {start:.3f} (want < 0.2), late {best_late:.3f} (want > 0.8)")
        ok = False
sys.exit(0 if ok else 1)
PY
