#!/usr/bin/env bash
# The main job on the CPU, as `make run` runs it: SFT of the tiny model, then
# 3 steps of two-turn RL whose answers a private KernelGym fleet (its own
# redis-server and a worker, Triton through the interpreter) evaluates.
# Checks that every step logged the metrics a user watches, that answers
# really reached KernelGym (outcomes other than no_code), and that the run
# left a complete checkpoint. Exits 77 when redis-server is not installed.
set -eu
command -v redis-server >/dev/null 2>&1 || { echo "redis-server not installed: skipped"; exit 77; }
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" configs/tiny-sft.ini run.dir="$tmp/sft" > "$tmp/sft.log"
ck=$(ls -d "$tmp"/sft/ckpt/step_* | tail -1)
"$train" configs/tiny.ini model.path="$ck" run.dir="$tmp/rl" > "$tmp/rl.log" || { tail -30 "$tmp/rl.log"; exit 1; }
grep "^step " "$tmp/rl.log"
test -f "$tmp/rl/ckpt/step_00000003/DONE"
ls "$tmp"/rl/tb/events.out.tfevents.* > /dev/null
"$py" - "$tmp/rl" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert [r["step"] for r in rows] == [1, 2, 3], rows
need = ["reward_mean", "reward_mean_turn1", "reward_std_turn1", "reward_mean_turn2", "reward_std_turn2", "fast1",
        "correct_rate", "hack_rate", "compile_error_rate", "no_code_rate", "coverage_mean", "prs_drop_rate",
        "response_len_mean", "clip_frac", "approx_kl", "entropy", "logprob_mismatch_mean", "grad_norm", "lr",
        "rollout_s", "env_s", "train_s", "rollout_tokens_per_s", "train_tokens_per_s"]
missing = [k for k in need if not all(k in r for r in rows)]
assert not missing, f"metrics.jsonl lacks {missing}"
outcomes = {}
for line in open(f"{d}/rollouts.jsonl"):
    for t in json.loads(line)["turns"]:
        outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
print("outcomes over 3 steps x 4 rollouts x 2 turns:", outcomes)
assert sum(outcomes.values()) == 24, outcomes
judged = sum(v for k, v in outcomes.items() if k != "no_code")
assert judged > 0, "no answer reached KernelGym"
print(f"{judged} answers judged by KernelGym; mismatch rollout vs trainer logprob: "
      f"mean {rows[-1]['logprob_mismatch_mean']:.2e}, max {rows[-1]['logprob_mismatch_max']:.2e}")
PY
