#!/usr/bin/env bash
# Sharded checkpoints at any world size (trainer/ckpt_shards.h), with the
# program tests/mpi/ckpt_reshard.c under mpirun. For a tiny qwen3 (untied
# head, q/k norm) and qwen2 (tied, biases) model whose state is a hash of
# (array, unit, element):
#   - saved at world 1, 2 and 3, the HF files (several shards, the index and
#     config.json) are byte-identical to what one process writes with
#     weights_save_hf;
#   - each of those checkpoints loaded at world 1, 2 and 3 gives every rank
#     its slices of the fp32 masters, m and v bit for bit, and the step;
#   - every rank at world 1, 2, 3 starting from the single writer's HF files
#     (sharded, and one model.safetensors) gets the bf16 weights of its
#     slices as masters and zero moments;
#   - a truncated model file fails the load at world 1 and 3, naming it;
#   - the world-3 files read by Python safetensors and transformers equal
#     the single writer's tensor by tensor.
set -eu
drv="${DK_BUILD:-build}/tests/ckpt_reshard"
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for arch in qwen3 qwen2; do
  "${mpi[@]}" -np 1 "$drv" single "$arch" "$tmp/$arch/single" > /dev/null
  for w in 1 2 3; do
    "${mpi[@]}" -np "$w" "$drv" save "$arch" "$tmp/$arch/w$w" > /dev/null
    ck="$tmp/$arch/w$w/ckpt/step_00000007"
    n=0
    for f in "$tmp/$arch/single"/*; do
      cmp "$f" "$ck/$(basename "$f")" || { echo "$arch world $w: $(basename "$f") differs from the single writer's"; exit 1; }
      n=$((n + 1))
    done
    [ "$n" -ge 5 ] || { echo "$arch: expected several shards + index + config.json, the single writer wrote $n files"; exit 1; }
    [ "$(ls "$ck/optim" | wc -l)" = "$w" ] || { echo "$arch world $w: $(ls "$ck/optim")"; exit 1; }
  done
  for w in 1 2 3; do
    for w2 in 1 2 3; do
      out=$("${mpi[@]}" -np "$w2" "$drv" load "$arch" "$tmp/$arch/w$w/ckpt/step_00000007")
      echo "$arch: $out"
      case "$out" in *"(world $w) at world $w2: bit-identical"*) ;; *) exit 1 ;; esac
    done
  done
  # A fresh start from HF files (model.path): single file and sharded.
  "${mpi[@]}" -np 1 "$drv" one "$arch" "$tmp/$arch/one" > /dev/null
  [ -f "$tmp/$arch/one/model.safetensors" ] || { echo "$arch: no single model.safetensors"; exit 1; }
  for w2 in 1 2 3; do
    for d in single one; do
      out=$("${mpi[@]}" -np "$w2" "$drv" hf "$arch" "$tmp/$arch/$d")
      echo "$arch: $out"
      case "$out" in *"at world $w2: bit-identical"*) ;; *) exit 1 ;; esac
    done
  done
done
# A truncated model-0000k file of a complete sharded checkpoint fails the load
# at every world size, naming the file.
truncate -s -2 "$tmp/qwen3/w2/ckpt/step_00000007/model-00003-of-00008.safetensors"
for w2 in 1 3; do
  if "${mpi[@]}" -np "$w2" "$drv" load qwen3 "$tmp/qwen3/w2/ckpt/step_00000007" > "$tmp/trunc.log" 2>&1; then
    echo "world $w2 loaded a checkpoint with a truncated model file"; exit 1
  fi
  grep -q "model-00003-of-00008.safetensors: .* bytes, state.json records .* (truncated or rewritten)" "$tmp/trunc.log" ||
    { cat "$tmp/trunc.log"; echo "world $w2: the truncated file is not named"; exit 1; }
done
"${DK_PYTHON:-.venv/bin/python}" tests/mpi/check_sharded_hf.py "$tmp/qwen3/w3/ckpt/step_00000007" "$tmp/qwen3/single"
"${DK_PYTHON:-.venv/bin/python}" tests/mpi/check_sharded_hf.py "$tmp/qwen2/w2/ckpt/step_00000007" "$tmp/qwen2/single"
echo "ckpt reshard: saved at world 1-3, loaded at world 1-3, bit-identical; HF files identical to one writer's"
