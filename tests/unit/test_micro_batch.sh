#!/usr/bin/env bash
# Token-budget micro-batches ([train] micro_batch_tokens) train the same model
# as fixed-count micro-batches: the packing changes only the summation order,
# so SFT losses and RL rewards agree to float rounding step by step. Also the
# two rules that tie the key to others.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sft=(configs/tiny-sft.ini run.steps=6 ckpt.every=0 ckpt.resume=none)
"$train" "${sft[@]}" run.dir="$tmp/count" > /dev/null
"$train" "${sft[@]}" run.dir="$tmp/tokens" train.grad_accum=1 train.micro_batch_tokens=700 > /dev/null
rl=(configs/toy.ini run.steps=6)
"$train" "${rl[@]}" run.dir="$tmp/rl_count" > /dev/null
"$train" "${rl[@]}" run.dir="$tmp/rl_tokens" train.micro_batch_tokens=256 > /dev/null
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
def col(run, key):
    return [json.loads(l)[key] for l in open(f"{d}/{run}/metrics.jsonl")]
for a, b, key, tol in (("count", "tokens", "loss", 1e-4), ("rl_count", "rl_tokens", "reward_mean", 1e-9)):
    x, y = col(a, key), col(b, key)
    worst = max(abs(p - q) / max(abs(p), 1e-12) for p, q in zip(x, y))
    print(f"{key}: {len(x)} steps, worst relative difference {worst:.2e}")
    assert len(x) == len(y) == 6 and worst <= tol, (x, y)
PY
out=$("$train" configs/tiny-sft.ini train.grad_accum=1 train.micro_batch_tokens=100 run.dir="$tmp/bad" 2>&1 >/dev/null) && exit 1
grep -q "micro_batch_tokens = 100 is below \[data\] max_length = 256" <<<"$out" || { echo "$out"; exit 1; }
out=$("$train" configs/tiny-sft.ini train.micro_batch_tokens=1000 run.dir="$tmp/bad" 2>&1 >/dev/null) && exit 1
grep -q "leave grad_accum at 1" <<<"$out" || { echo "$out"; exit 1; }
echo "micro_batch_tokens: same training, both rules enforced"
