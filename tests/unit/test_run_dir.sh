#!/usr/bin/env bash
# Ownership of a run directory (toy RL on the CPU):
#   1. a second trainer on a directory in use is refused (exit 1) with the
#      owner's pid, and the owner's logs are untouched; after the owner is
#      killed with -9 the lock is free again;
#   2. a start that fails after loading its config (a seed the checkpoint was
#      not trained with) leaves RUN_DIR/config.ini as it was;
#   3. [run] steps below the resumed step is a config error (exit 2) naming
#      both; equal to it says the run is complete and changes nothing.
set -eu
train="${DK_BUILD:-build}/train"
tmp=$(mktemp -d)
pids=()
trap 'for p in ${pids[@]+"${pids[@]}"}; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. Two trainers, one directory. The first runs long enough to be caught.
"$train" configs/toy.ini run.dir="$tmp/a" run.steps=100000 ckpt.every=0 > "$tmp/a1.log" 2>&1 &
owner=$!
pids+=("$owner")
for _ in $(seq 200); do grep -qs '"step":2,' "$tmp/a/metrics.jsonl" && break; sleep 0.05; done
grep -qs '"step":2,' "$tmp/a/metrics.jsonl" || fail "the first trainer did not start"
set +e
"$train" configs/toy.ini run.dir="$tmp/a" run.steps=3 > "$tmp/a2.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$tmp/a2.log"; fail "second trainer exit $rc, want 1"; }
grep -q "in use by pid $owner on host" "$tmp/a2.log" || { cat "$tmp/a2.log"; fail "refusal does not name pid $owner"; }
grep -q "steps = 100000" "$tmp/a/config.ini" || fail "the refused start rewrote config.ini"
kill -9 "$owner"
wait "$owner" 2>/dev/null || true
# No duplicate or foreign step lines from the refused trainer.
dup=$(sed -E 's/^\{"step":([0-9]+),.*/\1/' "$tmp/a/metrics.jsonl" | sort | uniq -d | head -1)
[ -z "$dup" ] || fail "metrics.jsonl holds step $dup twice"
"$train" configs/toy.ini run.dir="$tmp/a" run.steps=2 ckpt.resume=none > "$tmp/a3.log" 2>&1 ||
  { cat "$tmp/a3.log"; fail "the lock of a killed trainer was not released"; }
echo "lock: second trainer refused naming pid $owner; free again after kill -9"

# 2. A failed start keeps the previous config.ini.
"$train" configs/toy.ini ckpt.resume=auto run.dir="$tmp/b" run.steps=2 ckpt.every=1 > "$tmp/b1.log"
cp "$tmp/b/config.ini" "$tmp/b/config.want"
cp "$tmp/b/metrics.jsonl" "$tmp/b/metrics.want"
set +e
"$train" configs/toy.ini ckpt.resume=auto run.dir="$tmp/b" run.steps=4 run.seed=7 > "$tmp/b2.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$tmp/b2.log"; fail "seed mismatch exit $rc, want 2"; }
cmp "$tmp/b/config.ini" "$tmp/b/config.want" || fail "a failed start overwrote config.ini"
echo "failed start: config.ini kept"

# 3. steps below / at the resumed step.
set +e
"$train" configs/toy.ini ckpt.resume=auto run.dir="$tmp/b" run.steps=1 > "$tmp/b3.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$tmp/b3.log"; fail "steps below the resumed step: exit $rc, want 2"; }
grep -q "\[run\] steps = 1 is below step 2" "$tmp/b3.log" || { cat "$tmp/b3.log"; fail "message does not name both steps"; }
"$train" configs/toy.ini ckpt.resume=auto run.dir="$tmp/b" run.steps=2 train.lr=5e-3 > "$tmp/b4.log" 2>&1 || { cat "$tmp/b4.log"; fail "complete run: non-zero exit"; }
grep -q "already complete at step 2" "$tmp/b4.log" || { cat "$tmp/b4.log"; fail "no message for a complete run"; }
cmp "$tmp/b/config.ini" "$tmp/b/config.want" || fail "a run with nothing to do rewrote config.ini"
cmp "$tmp/b/metrics.jsonl" "$tmp/b/metrics.want" || fail "a run with nothing to do changed metrics.jsonl"
echo "steps: below the resumed step exits 2, at it says complete"
