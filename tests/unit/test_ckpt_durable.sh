#!/usr/bin/env bash
# Durable checkpoints (trainer/checkpoint.h) on the CPU with configs/tiny-sft.ini:
#   - a damaged newest checkpoint (one flipped byte in its optimizer file, or
#     an unreadable state.json, or a truncated model.safetensors) is skipped
#     with a warning naming the file, and the run resumes from the previous
#     one; asked for by path, it fails (exit 1) naming the file;
#   - a checkpoint from before sharding (optimizer file version 1, no
#     checksums) resumes bit-exactly, with a warning;
#   - pruning (ckpt.keep) beside an earlier run's checkpoint of a higher step
#     keeps the new run's newest;
#   - ckpt.resume = none over a run directory with checkpoints exits 2 naming
#     it; ckpt.overwrite = true deletes them and starts clean.
set -eu
train="${DK_BUILD:-build}/train"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(configs/tiny-sft.ini train.warmup_steps=1 ckpt.keep=0 ckpt.overwrite=false)
fail() { echo "$1"; [ -f "${2:-}" ] && cat "$2"; exit 1; }

"$train" "${base[@]}" run.steps=4 ckpt.every=2 run.dir="$tmp/a" ckpt.resume=none > "$tmp/a.log"
ck="$tmp/a/ckpt"
grep -q '"crc32c"' "$ck/step_00000004/state.json" || fail "state.json has no checksums" "$ck/step_00000004/state.json"
cp "$ck/step_00000002/optim/rank_00000.bin" "$tmp/optim2.bin"

# One flipped byte in the newest optimizer file: fall back to step 2.
fresh() { rm -rf "$tmp/b"; mkdir -p "$tmp/b/ckpt"; cp -r "$ck/step_00000002" "$ck/step_00000004" "$tmp/b/ckpt/"; }
flip() { # flip the byte at offset $2 of file $1
  local b; b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $(( (b + 1) % 256 )))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
fresh
flip "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin" 5000
"$train" "${base[@]}" run.steps=4 ckpt.every=2 run.dir="$tmp/b" ckpt.resume=auto > "$tmp/b.log" 2> "$tmp/b.err" || fail "resume over a damaged checkpoint failed" "$tmp/b.err"
grep -q "warning: .*step_00000004/optim/rank_00000.bin: CRC-32C .* (the file is damaged); falling back" "$tmp/b.err" || fail "no warning naming the damaged file" "$tmp/b.err"
grep -q "resumed from $tmp/b/ckpt/step_00000002 (step 2)" "$tmp/b.log" || fail "did not fall back to step 2" "$tmp/b.log"
# The run redid steps 3-4 and rewrote step 4: the same bytes as the straight run.
cmp "$ck/step_00000004/optim/rank_00000.bin" "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin"

# Asked for by path, the damaged checkpoint is an error naming the file.
fresh
flip "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin" 100
set +e
"$train" "${base[@]}" run.steps=4 run.dir="$tmp/b" ckpt.resume="$tmp/b/ckpt/step_00000004" > /dev/null 2> "$tmp/p.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "resume = a damaged path: exit $rc, expected 1" "$tmp/p.err"
grep -q "step_00000004/optim/rank_00000.bin: CRC-32C" "$tmp/p.err" || fail "the error does not name the file" "$tmp/p.err"

# A truncated model file and an unreadable state.json are caught too.
fresh
truncate -s -64 "$tmp/b/ckpt/step_00000004/model.safetensors"
"$train" "${base[@]}" run.steps=2 run.dir="$tmp/b" ckpt.resume=auto > "$tmp/t.log" 2> "$tmp/t.err"
grep -q "step_00000004/model.safetensors: .* bytes, state.json records .* (truncated or rewritten)" "$tmp/t.err" || fail "truncated model file not detected" "$tmp/t.err"
grep -q "resumed from $tmp/b/ckpt/step_00000002" "$tmp/t.log" || fail "did not fall back past the truncated file" "$tmp/t.log"
fresh
echo '{"step": 4, ' > "$tmp/b/ckpt/step_00000004/state.json"
"$train" "${base[@]}" run.steps=2 run.dir="$tmp/b" ckpt.resume=auto > "$tmp/s.log" 2> "$tmp/s.err"
grep -q "step_00000004/state.json: invalid JSON; falling back" "$tmp/s.err" || fail "unreadable state.json not named" "$tmp/s.err"
grep -q "resumed from $tmp/b/ckpt/step_00000002" "$tmp/s.log" || fail "did not fall back past state.json" "$tmp/s.log"

# A checkpoint from before sharding (optimizer file version 1, no checksums
# in state.json) still resumes, with a warning, and bit-exactly.
fresh
rm -r "$tmp/b/ckpt/step_00000004"
"${DK_PYTHON:-python3}" - "$tmp/b/ckpt/step_00000002" <<'PY'
import json, struct, sys
d = sys.argv[1]
p = d + "/optim/rank_00000.bin"
b = open(p, "rb").read()
ver, world, rank, t = struct.unpack("<4I", b[8:24])
(n,) = struct.unpack("<Q", b[24:32])
assert (ver, world, rank) == (2, 1, 0), (ver, world, rank)
table, off = b"", 0
for i in range(n):  # v2 rows (size, begin, end) -> v1 rows (global offset, size)
    size, lo, hi = struct.unpack("<3Q", b[32 + 24 * i:56 + 24 * i])
    assert (lo, hi) == (0, size)
    table += struct.pack("<2Q", off, size)
    off += size
open(p, "wb").write(b[:8] + struct.pack("<4I", 1, world, rank, t) + b[24:32] + table + b[32 + 24 * n:])
s = json.load(open(d + "/state.json"))
del s["files"], s["run_id"]
json.dump(s, open(d + "/state.json", "w"))
PY
"$train" "${base[@]}" run.steps=4 ckpt.every=2 run.dir="$tmp/b" ckpt.resume=auto > "$tmp/v.log" 2> "$tmp/v.err"
grep -q "step_00000002/state.json records no checksums" "$tmp/v.err" || fail "no warning about the missing checksums" "$tmp/v.err"
grep -q "resumed from $tmp/b/ckpt/step_00000002 (step 2)" "$tmp/v.log" || fail "did not resume from the version-1 file" "$tmp/v.log"
cmp "$ck/step_00000004/optim/rank_00000.bin" "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin"

# Pruning: run k continues from a's step 2 in a directory that holds an
# earlier run's step 6; with keep = 1 it must keep its own step 4.
"$train" "${base[@]}" run.steps=6 ckpt.every=6 run.dir="$tmp/k" ckpt.resume=none > /dev/null
"$train" "${base[@]}" run.steps=4 ckpt.every=1 ckpt.keep=1 run.dir="$tmp/k" ckpt.resume="$ck/step_00000002" > "$tmp/k.log"
kept=$(cd "$tmp/k/ckpt" && echo step_*)
[ "$kept" = "step_00000004" ] || fail "ckpt.keep = 1 beside an earlier run's step 6 left: $kept"
# With keep = 2 it keeps its own two (the earlier run's step 6 goes first);
# with keep = 3 there is room for the earlier run's too.
for keep in 2 3; do
  "$train" "${base[@]}" run.steps=6 ckpt.every=6 run.dir="$tmp/k$keep" ckpt.resume=none > /dev/null
  "$train" "${base[@]}" run.steps=4 ckpt.every=1 ckpt.keep=$keep run.dir="$tmp/k$keep" ckpt.resume="$ck/step_00000002" > /dev/null
  kept=$(cd "$tmp/k$keep/ckpt" && echo step_*)
  want="step_00000003 step_00000004"
  [ "$keep" = 3 ] && want="$want step_00000006"
  [ "$kept" = "$want" ] || fail "ckpt.keep = $keep beside an earlier run's step 6 left: $kept"
done

# resume = none refuses over checkpoints; overwrite starts clean.
set +e
"$train" "${base[@]}" run.steps=2 run.dir="$tmp/a" ckpt.resume=none > /dev/null 2> "$tmp/n.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "resume = none over checkpoints: exit $rc, expected 2" "$tmp/n.err"
grep -q "resume = none, but $tmp/a/ckpt already holds checkpoints" "$tmp/n.err" || fail "the refusal does not name the dir" "$tmp/n.err"
[ -d "$ck/step_00000004" ] || fail "the refusal deleted a checkpoint"
# A half-written step_X.tmp alone is no checkpoint: resume = none starts.
mkdir -p "$tmp/h/ckpt/step_00000009.tmp"
"$train" "${base[@]}" run.steps=1 ckpt.every=0 run.dir="$tmp/h" ckpt.resume=none > /dev/null 2> "$tmp/h.err" ||
  fail "resume = none refused a directory with only a half-written checkpoint" "$tmp/h.err"
"$train" "${base[@]}" run.steps=2 ckpt.every=2 run.dir="$tmp/a" ckpt.resume=none ckpt.overwrite=true > "$tmp/o.log"
kept=$(cd "$ck" && echo step_*)
[ "$kept" = "step_00000002" ] || fail "ckpt.overwrite left: $kept"
grep -q "resumed" "$tmp/o.log" && fail "ckpt.overwrite resumed instead of starting clean" "$tmp/o.log"
cmp "$ck/step_00000002/optim/rank_00000.bin" "$tmp/optim2.bin"
echo "ckpt durable: damaged, truncated and unreadable checkpoints skipped with a warning; pruning keeps the run's own; resume = none refuses; overwrite starts clean"
