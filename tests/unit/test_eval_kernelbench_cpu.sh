#!/usr/bin/env bash
# configs/eval-kernelbench-l2.ini end to end on the CPU: a tiny random model
# (model.path emptied, no checkpoint) over the bundled KernelBench-format level folder
# tests/fixtures/tasks/level2, judged by a private KernelGym fleet through the
# Triton interpreter. The model answers nothing useful, so Fast@p is 0; what
# is checked is the table's shape (the fast@p rows, one column per turn and
# best) and that every task of the folder was evaluated, in the printed table
# and in eval.json. Exits 77 when redis-server is not installed.
set -eu
command -v redis-server >/dev/null 2>&1 || { echo "redis-server not installed: skipped"; exit 77; }
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tasks=tests/fixtures/tasks/level2
"$train" configs/eval-kernelbench-l2.ini run.device=cpu kernelgym.device=cpu kernelgym.timeout_s=120 \
    data.tasks="$tasks" data.max_length=2048 rl.max_new_tokens=16 rl.max_turns=2 train.batch_size=4 \
    model.path= model.arch=qwen3 model.vocab_size=512 model.hidden_size=64 model.intermediate_size=128 model.n_layers=2 \
    model.n_heads=4 model.n_kv_heads=2 model.head_dim=16 model.max_position=2048 \
    tokenizer.path=tests/fixtures/tokenizers/bpe/tokenizer.json run.dir="$tmp/eval" > "$tmp/eval.log" 2>&1 \
    || { tail -30 "$tmp/eval.log"; exit 1; }
cat "$tmp/eval.log"
"$py" - "$tmp" "$tasks" <<'PY'
import json, os, re, sys
d, tasks = sys.argv[1], sys.argv[2]
# The evaluable tasks: files with a module-level get_inputs (5_Missing_Inputs
# has none and is skipped with a warning); a task's name drops its number.
files = sorted(f for f in os.listdir(tasks) if f.endswith(".py") and not f.startswith(("_", ".")))
ok = [f for f in files if re.search(r"^def get_inputs", open(os.path.join(tasks, f)).read(), re.M)]
names = sorted(re.sub(r"^\d+_", "", f[:-3]) for f in ok)
ev = json.load(open(f"{d}/eval/eval.json"))
assert ev["n_tasks"] == len(names) == 3, (ev["n_tasks"], names)
assert len(ev["tasks"]) == len(names), ev["tasks"]
got = sorted(t["name"] for t in ev["tasks"])
assert got == names, (got, names)
# Every task has its per-turn outcomes: it went through the rollout and judge.
for t in ev["tasks"]:
    assert len(t["turns"]) >= 1 and all(r["outcome"] for r in t["turns"]), t
# turn 1, turn 2 and best, each with the four fast@p values.
assert [t["turn"] for t in ev["turns"]] == [1, 2, "best"], ev["turns"]
for t in ev["turns"]:
    for p in ("1.0", "1.2", "1.5", "2.0"):
        assert 0.0 <= t[f"fast_{p}"] <= 1.0, t
text = open(f"{d}/eval.log").read()
assert "5_Missing_Inputs.py: no module-level `def get_inputs`" in text, "the skipped task is not named"
log = text.splitlines()
head = [i for i, l in enumerate(log) if l.split()[:4] == ["fast@1.0", "fast@1.2", "fast@1.5", "fast@2.0"]]
assert len(head) == 1, "no fast@p header in the printed table"
rows = [l.split() for l in log[head[0] + 1:head[0] + 4]]
assert [r[0] for r in rows] == ["turn", "turn", "best"], rows
assert all(len(r) == (8 if r[0] == "turn" else 7) for r in rows), rows
for n in names:
    assert any(l.startswith(n[:32]) for l in log), f"task {n} missing from the printed table"
assert any(l.startswith(f"Fast@1 = ") and l.endswith(f"over {len(names)} tasks") for l in log), log[-3:]
print(f"eval over {len(names)} tasks: table of 3 rows x 4 fast@p, every task evaluated")
PY
