#!/usr/bin/env bash
# Bit-exact resume on the CPU: run A trains 4 steps with a checkpoint every 2.
# Run B is A's directory as a crash would leave it after step 2: the step-4
# checkpoint only half written (step_00000004.tmp, no DONE) and metrics lines
# past step 2. Resuming B (ckpt.resume = auto) must skip the partial
# checkpoint, redo steps 3-4 and end with the same losses and a bit-identical
# optimizer state (fp32 masters, moments) and model file.
set -eu
# DK_TRAIN_ARGS: extra key=value overrides (the GPU twin passes run.device=cuda).
train="${DK_BUILD:-build}/train"
read -r -a extra <<< "${DK_TRAIN_ARGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(configs/tiny-sft.ini run.steps=4 ckpt.every=2 ckpt.keep=0 train.warmup_steps=1)
"$train" "${args[@]}" ${extra[@]+"${extra[@]}"} run.dir="$tmp/a" ckpt.resume=none > "$tmp/a.log"
mkdir -p "$tmp/b/ckpt"
cp -r "$tmp/a/ckpt/step_00000002" "$tmp/b/ckpt/"
cp -r "$tmp/a/ckpt/step_00000004" "$tmp/b/ckpt/step_00000004.tmp"
rm "$tmp/b/ckpt/step_00000004.tmp/DONE"
cp "$tmp/a/metrics.jsonl" "$tmp/b/metrics.jsonl" # holds steps 3-4 of the "crashed" run
"$train" "${args[@]}" ${extra[@]+"${extra[@]}"} run.dir="$tmp/b" ckpt.resume=auto > "$tmp/b.log"
grep -q "resumed from $tmp/b/ckpt/step_00000002 (step 2)" "$tmp/b.log" || { echo "did not resume from step 2"; cat "$tmp/b.log"; exit 1; }
# Same steps, same losses and grad norms (timing columns differ).
strip() { sed -E 's/,"tokens_per_s":[^,]*,"step_s":[^,]*//' "$1"; }
if ! diff <(strip "$tmp/a/metrics.jsonl") <(strip "$tmp/b/metrics.jsonl"); then
  echo "metrics differ after resume"; exit 1
fi
cmp "$tmp/a/ckpt/step_00000004/optim/rank_00000.bin" "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin"
cmp "$tmp/a/ckpt/step_00000004/model.safetensors" "$tmp/b/ckpt/step_00000004/model.safetensors"
[ ! -e "$tmp/b/ckpt/step_00000004.tmp" ] || { echo "stale .tmp checkpoint left behind"; exit 1; }
# ckpt.keep prunes all but the newest complete checkpoints.
"$train" configs/tiny-sft.ini ${extra[@]+"${extra[@]}"} run.steps=4 ckpt.every=1 ckpt.keep=2 run.dir="$tmp/k" ckpt.resume=none > "$tmp/k.log"
kept=$(cd "$tmp/k/ckpt" && echo step_*)
[ "$kept" = "step_00000003 step_00000004" ] || { echo "ckpt.keep = 2 left: $kept"; exit 1; }
echo "resume: 4 steps straight == 2 steps + crash + resume + 2 steps (losses, optimizer state, weights bit-identical)"
