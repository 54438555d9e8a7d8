#!/usr/bin/env bash
# mode = eval at world > 1: every rank rolls out its share of each batch and
# rank 0 writes one report. configs/toy.ini trained 15 steps at world 1 (so
# the rewards are not all zero), then evaluated from that checkpoint with
# batches of 3 of its 4 tasks (so a batch is split unevenly and a rank can
# have none) at worlds 1, 2 and 3: eval.json and rollouts.jsonl are byte for
# byte the same, with 4 tasks, and some reward above 0.
set -eu
. "$(dirname "$0")/mpirun.sh"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
dk_train tr 1 configs/toy.ini run.steps=15 ckpt.resume=none
for np in 1 2 3; do
    dk_train e$np "$np" configs/toy.ini run.mode=eval train.batch_size=3 model.path="$dir/tr/ckpt/step_00000015"
done
for np in 2 3; do
    for f in eval.json rollouts.jsonl; do
        cmp "$dir/e1/$f" "$dir/e$np/$f" || { echo "FAIL: $f differs between world 1 and world $np"; exit 1; }
    done
done
"$py" - "$dir/e1" <<'PY'
import json, sys
d = sys.argv[1]
ev = json.load(open(f"{d}/eval.json"))
ro = [json.loads(l) for l in open(f"{d}/rollouts.jsonl")]
assert ev["n_tasks"] == 4 and len(ev["tasks"]) == 4 and len(ro) == 4, (ev["n_tasks"], len(ro))
rewards = [t["reward"] for r in ro for t in r["turns"]]
assert max(rewards) > 0, f"rewards {rewards}: the test would not tell rollouts apart"
print(f"eval at worlds 1, 2, 3: eval.json and rollouts.jsonl identical; rewards {rewards}")
PY
