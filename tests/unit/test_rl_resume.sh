#!/usr/bin/env bash
# Bit-exact RL resume on the CPU (toy environment): 4 steps straight against
# 2 steps, a crash that leaves a half-written step-4 checkpoint, and a resume
# for 2 more: the same rewards and losses per step, and bit-identical
# optimizer state and weights at step 4.
set -eu
# DK_TRAIN_ARGS: extra key=value overrides (the GPU twin passes run.device=cuda).
train="${DK_BUILD:-build}/train"
read -r -a extra <<< "${DK_TRAIN_ARGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(configs/toy.ini run.steps=4 ckpt.every=2 ckpt.keep=0)
"$train" "${args[@]}" ${extra[@]+"${extra[@]}"} run.dir="$tmp/a" ckpt.resume=none > "$tmp/a.log"
mkdir -p "$tmp/b/ckpt"
cp -r "$tmp/a/ckpt/step_00000002" "$tmp/b/ckpt/"
cp -r "$tmp/a/ckpt/step_00000004" "$tmp/b/ckpt/step_00000004.tmp"
rm "$tmp/b/ckpt/step_00000004.tmp/DONE"
cp "$tmp/a/metrics.jsonl" "$tmp/b/metrics.jsonl"
"$train" "${args[@]}" ${extra[@]+"${extra[@]}"} run.dir="$tmp/b" ckpt.resume=auto > "$tmp/b.log"
grep -q "resumed from $tmp/b/ckpt/step_00000002 (step 2)" "$tmp/b.log" || { echo "did not resume"; cat "$tmp/b.log"; exit 1; }
# Everything but the timings must match.
# Times differ between runs; so does the KV cache on CUDA, which takes a
# share of the device memory free at the time (tests/mpi/rl_phases.py checks
# the memory figures where they are deterministic).
strip() { sed -E 's/"(rollout_s|env_s|train_s|step_s|rollout_tokens_per_s|train_tokens_per_s|mem_rollout_peak|mem_kv_cache)":[^,}]*,?//g' "$1"; }
diff <(strip "$tmp/a/metrics.jsonl") <(strip "$tmp/b/metrics.jsonl") || { echo "metrics differ after resume"; exit 1; }
cmp "$tmp/a/ckpt/step_00000004/optim/rank_00000.bin" "$tmp/b/ckpt/step_00000004/optim/rank_00000.bin"
cmp "$tmp/a/ckpt/step_00000004/model.safetensors" "$tmp/b/ckpt/step_00000004/model.safetensors"
echo "rl resume: rewards, losses, optimizer state and weights bit-identical after a crash at step 2"
