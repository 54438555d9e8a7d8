#!/usr/bin/env bash
# Soak: a tiny two-turn RL run against a KernelGym fleet (`kernelgym serve`,
# 2 CPU workers on the stand-in harness tests/kernelgym_c/fake_server.py, so
# verdicts are instant and deterministic) while a loop kills with -9, at
# random moments, the trainer (then resumed), a worker (serve restarts it)
# or Redis (serve restarts it and it replays its AOF). At the end:
#   - no evaluation was lost: judge_lost is 0 on every step and no turn has
#     outcome error;
#   - metrics.jsonl equals an uninterrupted run's apart from timings,
#     rollouts.jsonl equals it byte for byte, and the final weights and
#     optimizer state are bit-identical.
# DK_SOAK_TRIALS (2), DK_SOAK_STEPS (16), DK_SOAK_KILLS (15 per trial) and
# DK_SOAK_SEED pick the size and the kills. Exits 77 without redis-server.
set -u
command -v redis-server > /dev/null || { echo "redis-server not installed: skipped"; exit 77; }
train="${DK_BUILD:-build}/train"
KG="${DK_BUILD:-build}/kernelgym"
py="${DK_PYTHON:-python3}"
trials=${DK_SOAK_TRIALS:-2}
per_trial=${DK_SOAK_KILLS:-15} # then the run is left to finish
steps=${DK_SOAK_STEPS:-16}
RANDOM=${DK_SOAK_SEED:-$$}
tmp=$(mktemp -d)
serve_pid= trainer=
cleanup() {
  [ -n "$trainer" ] && kill -9 "$trainer" 2> /dev/null
  [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null
  wait 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -5 "$tmp/serve.err"; exit 1; }
export KERNELGYM_SERVER=tests/kernelgym_c/fake_server.py

# A model that answers with python blocks: the tiny SFT (DK_SOAK_MODEL: one made before).
model=${DK_SOAK_MODEL:-}
if [ -z "$model" ]; then
  "$train" configs/tiny-sft.ini run.dir="$tmp/sft" > "$tmp/sft.log" 2>&1 || { tail "$tmp/sft.log"; fail "sft"; }
  model=$(ls -d "$tmp"/sft/ckpt/step_* | tail -1)
fi

"$KG" serve --workers 2 --device cpu --lazy --heartbeat 2 > "$tmp/url" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 200); do [ -s "$tmp/url" ] && break; sleep 0.05; done
url=$(head -1 "$tmp/url")
[ -n "$url" ] || fail "serve printed no URL"
args=(configs/tiny.ini model.path="$model" run.steps=$steps ckpt.every=2 ckpt.keep=2 ckpt.resume=auto
      kernelgym.redis="$url" kernelgym.device=cpu kernelgym.timeout_s=30)

"$train" "${args[@]}" run.dir="$tmp/a" > "$tmp/a.log" 2>&1 || { tail "$tmp/a.log"; fail "the uninterrupted run"; }

strip() { sed -E 's/"(rollout_s|env_s|train_s|step_s|rollout_tokens_per_s|train_tokens_per_s)":[^,}]*,?//g' "$1"; }
kills_trainer=0 kills_worker=0 kills_redis=0 exact=0
for trial in $(seq "$trials"); do
  dir="$tmp/b$trial"
  k0=$((kills_trainer + kills_worker + kills_redis))
  while :; do
    "$train" "${args[@]}" run.dir="$dir" >> "$dir.log" 2>&1 &
    trainer=$!
    finished=0
    while :; do
      sleep "$((RANDOM % 2)).$((RANDOM % 10))"
      kill -0 "$trainer" 2> /dev/null || { finished=1; break; }
      [ $((kills_trainer + kills_worker + kills_redis - k0)) -ge "$per_trial" ] && continue
      case $((RANDOM % 3)) in
      0) kill -9 "$trainer" 2> /dev/null && kills_trainer=$((kills_trainer + 1)); wait "$trainer" 2> /dev/null; break ;;
      1) w=$(pgrep -P "$serve_pid" -f "kernelgym worker" | shuf -n 1 --random-source=<(yes $RANDOM))
         [ -n "$w" ] && kill -9 "$w" && kills_worker=$((kills_worker + 1)) ;;
      2) r=$(pgrep -P "$serve_pid" -x redis-server)
         [ -n "$r" ] && kill -9 "$r" && kills_redis=$((kills_redis + 1)) ;;
      esac
    done
    wait "$trainer"
    rc=$?
    trainer=
    [ "$finished" = 1 ] && { [ "$rc" = 0 ] || { tail "$dir.log"; fail "trial $trial: the trainer exited $rc"; }; break; }
  done
  "$py" - "$dir" <<'PY' || fail "trial $trial: evaluations were lost"
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert all(r["judge_lost"] == 0 for r in rows), [r["judge_lost"] for r in rows]
outs = [t["outcome"] for l in open(f"{d}/rollouts.jsonl") for t in json.loads(l)["turns"]]
assert "error" not in outs and "timeout" not in outs, outs
assert sum(o != "no_code" for o in outs) > 0, "no answer reached KernelGym"
PY
  last=$(printf 'step_%08d' "$steps")
  diff <(strip "$tmp/a/metrics.jsonl") <(strip "$dir/metrics.jsonl") > /dev/null &&
    cmp -s "$tmp/a/rollouts.jsonl" "$dir/rollouts.jsonl" &&
    cmp -s "$tmp/a/ckpt/$last/optim/rank_00000.bin" "$dir/ckpt/$last/optim/rank_00000.bin" &&
    cmp -s "$tmp/a/ckpt/$last/model.safetensors" "$dir/ckpt/$last/model.safetensors" && exact=$((exact + 1))
done
kills=$((kills_trainer + kills_worker + kills_redis))
echo "soak: $trials trial(s) of $steps steps, $kills kills ($kills_trainer trainer, $kills_worker worker, $kills_redis redis), 0 evaluations lost, $exact of $trials bit-exact"
[ "$exact" = "$trials" ] || fail "a killed run differs from the uninterrupted one"
kill -0 "$serve_pid" || fail "serve died"
