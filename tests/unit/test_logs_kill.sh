#!/usr/bin/env bash
# Crash-safe logs (toy RL on the CPU). Run A trains STEPS steps straight. Run B
# trains the same steps but is killed with -9 at random moments (inside a
# step, while writing its lines, inside a checkpoint, inside the cut-back at
# resume) and resumed each time, until it finishes. Then:
#   - metrics.jsonl equals A's apart from the timing columns,
#   - rollouts.jsonl equals A's byte for byte (no step twice, no half line),
#   - the final optimizer state and weights are bit-identical,
#   - every rollouts line is valid UTF-8 JSON (model output is sanitised).
# A checkpoint every 3 steps makes every resume redo steps already logged.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-python3}"
steps=${DK_KILL_STEPS:-60}
kills_max=${DK_KILL_MAX:-40}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(configs/toy.ini run.steps=$steps ckpt.every=3 ckpt.keep=2 ckpt.resume=auto)
"$train" "${args[@]}" run.dir="$tmp/a" > "$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "run A"; }

RANDOM=${DK_KILL_SEED:-4242}
kills=0
while :; do
  "$train" "${args[@]}" run.dir="$tmp/b" >> "$tmp/b.log" 2>&1 &
  pid=$!
  if [ "$kills" -lt "$kills_max" ]; then
    sleep "0.$(printf '%03d' $((RANDOM % 400 + 20)))"
    if kill -9 "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
      kills=$((kills + 1))
      continue
    fi
  fi
  wait "$pid" || { tail -20 "$tmp/b.log"; fail "run B exited non-zero"; }
  break
done

strip() { sed -E 's/"(rollout_s|env_s|train_s|step_s|rollout_tokens_per_s|train_tokens_per_s)":[^,}]*,?//g' "$1"; }
diff <(strip "$tmp/a/metrics.jsonl") <(strip "$tmp/b/metrics.jsonl") > "$tmp/diff" || { head "$tmp/diff"; fail "metrics differ after $kills kills"; }
cmp "$tmp/a/rollouts.jsonl" "$tmp/b/rollouts.jsonl" || fail "rollouts differ after $kills kills"
last=$(printf 'step_%08d' "$steps")
cmp "$tmp/a/ckpt/$last/optim/rank_00000.bin" "$tmp/b/ckpt/$last/optim/rank_00000.bin"
cmp "$tmp/a/ckpt/$last/model.safetensors" "$tmp/b/ckpt/$last/model.safetensors"
"$py" - "$tmp/b/rollouts.jsonl" "$steps" <<'PY'
import json, sys
path, steps = sys.argv[1], int(sys.argv[2])
rows = [json.loads(line.decode("utf-8")) for line in open(path, "rb")]  # strict: raises on a bad byte
assert len(rows) == steps * 32, (len(rows), steps * 32)
assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
bad = sum("\ufffd" in t["response"] for r in rows for t in r["turns"])
print(f"rollouts: {len(rows)} rows, all valid UTF-8 ({bad} responses had bytes replaced)")
PY
echo "logs: $kills kills of $steps steps; metrics, rollouts, weights and optimizer equal to the uninterrupted run"
