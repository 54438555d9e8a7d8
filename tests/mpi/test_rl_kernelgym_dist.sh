#!/usr/bin/env bash
# RL judged by KernelGym at world 2 on the CPU: configs/tiny.ini (two tasks
# a step, two samples each, two turns) from a briefly fine-tuned tiny model,
# one step at world 1 and at world 2. With kernelgym.redis = auto the two
# ranks share one private fleet (rank 0's Redis, one worker started by local
# rank 0). Checks that the world-2 run wrote one metrics.jsonl and one
# rollouts.jsonl whose rows (responses, outcomes, rewards, feedback) equal
# the world-1 run's, that answers reached the judge, and that the single
# worker judged every answer of both ranks. Exits 77 without redis-server.
set -eu
command -v redis-server >/dev/null 2>&1 || { echo "redis-server not installed: skipped"; exit 77; }
. "$(dirname "$0")/mpirun.sh"
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$train" configs/tiny-sft.ini run.dir="$dir/sft" run.steps=120 > "$dir/sft.log"
ck=$(ls -d "$dir"/sft/ckpt/step_* | tail -1)
dk_train w1 1 configs/tiny.ini model.path="$ck" run.steps=1
dk_train w2 2 configs/tiny.ini model.path="$ck" run.steps=1
grep "^step " "$dir/w2.log"
"$py" - "$dir" <<'PY'
import json, os, re, sys
d = sys.argv[1]
def rows(n, f): return [json.loads(l) for l in open(f"{d}/{n}/{f}")]
a, b = rows("w1", "metrics.jsonl"), rows("w2", "metrics.jsonl")
assert [r["step"] for r in b] == [1], f"world 2 metrics.jsonl has steps {[r['step'] for r in b]}"
for k in ("reward_mean", "reward_mean_turn1", "reward_mean_turn2", "correct_rate", "compile_error_rate",
          "no_code_rate", "response_len_mean"):
    assert a[0][k] == b[0][k], f"{k}: {b[0][k]} at world 2, {a[0][k]} at world 1"
ra, rb = rows("w1", "rollouts.jsonl"), rows("w2", "rollouts.jsonl")
assert len(rb) == 4, f"world 2 rollouts.jsonl has {len(rb)} rows, not 4"
assert ra == rb, "world 2 rollouts differ from world 1's"
judged = sum(t["outcome"] != "no_code" for r in rb for t in r["turns"])
assert judged > 0, "no answer reached KernelGym"
files = sorted(os.listdir(f"{d}/w2"))
assert files == ["ckpt", "config.ini", "logs_offsets.json", "metrics.jsonl", "rollouts.jsonl", "run.lock", "tb"], f"world 2 run dir holds {files}"
# One fleet for the job: one worker, which judged the answers of both ranks.
log = open(f"{d}/w2.log").read()
jobs = [int(n) for n in re.findall(r"kernelgym worker \S+: left after (\d+) job", log)]
assert len(jobs) == 1 and jobs[0] == judged, f"workers that left: {jobs}; answers judged: {judged}"
print(f"world 2 == world 1 over {len(rb)} rollouts; {judged} answers judged by one shared worker")
PY
