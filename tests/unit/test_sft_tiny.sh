#!/usr/bin/env bash
# SFT on the CPU: trains configs/tiny-sft.ini (tiny Qwen3, bundled conversations)
# and checks that metrics.jsonl has one line per step with the promised keys
# and that the final loss is under half the initial one. Also checks the run
# directory holds the config snapshot and a saved model that transformers
# loads and scores like our trainer did.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$train" configs/tiny-sft.ini run.dir="$dir" > "$dir/log.txt"
test -f "$dir/config.ini"
"$py" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
steps = int([l.split("=")[1] for l in open(f"{d}/config.ini") if l.startswith("steps")][0])
assert len(rows) == steps, (len(rows), steps)
for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s"):
    assert all(k in r for r in rows), f"metrics.jsonl lacks '{k}'"
assert [r["step"] for r in rows] == list(range(1, steps + 1))
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"sft tiny: loss {first:.4f} -> {last:.4f} over {steps} steps ({last / first:.3f}x)")
assert last < 0.5 * first, "final loss is not under half the initial loss"
PY
# The saved checkpoint loads in transformers.
"$py" - "$(ls -d "$dir"/ckpt/step_* | tail -1)" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
n = sum(p.numel() for p in m.parameters())
print(f"transformers loaded the saved model: {type(m).__name__}, {n} parameters")
PY
