#!/usr/bin/env bash
# The whole model on the CUDA backend against Hugging Face transformers at
# the Qwen3-0.6B shape (28 layers, hidden 1024, GQA 16:8, head dim 128, q/k
# norm, vocabulary 151936, tied embeddings):
#   1. tests/gpu/model_hf_compare.py make: a random-init Qwen3ForCausalLM
#      saved with save_pretrained (bf16) and a packed batch of three
#      sequences (512 tokens);
#   2. model_hf_dump: our model_load_hf, forward, and backward of
#      loss = -mean(logprob); logits, logprobs, loss and every gradient
#      (HF names) to a safetensors file;
#   3. model_hf_compare.py compare: the same in transformers (sdpa) in fp32
#      and in bf16; ours and HF-bf16 against HF-fp32, with ours held to twice
#      HF-bf16's error plus a small floor and gradient cosine >= 0.99.
# Skips (77) without a GPU. DK_TEST_DEVICE=cpu runs our CPU backend instead
# (fp32: held to fp32 accuracy), DK_TEST_TINY=1 a 2-layer model of the same
# structure: `DK_TEST_DEVICE=cpu DK_TEST_TINY=1` runs in seconds on any
# machine. About a minute on an H200.
set -u
py="${DK_PYTHON:-python3}"
dump="${DK_BUILD:-build}/tests/model_hf_dump"
src="${DK_SOURCE:-.}"
device="${DK_TEST_DEVICE:-cuda}"
if [ "$device" = cuda ]; then
  . "$(dirname "$0")/need_gpu.sh"
  "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || { echo "torch sees no CUDA GPU: skipped"; exit 77; }
  expect=bf16
else
  expect=fp32
fi
[ -x "$dump" ] || { echo "missing $dump (build the model_hf_dump target)"; exit 1; }
"$py" -c 'import transformers, safetensors' 2>/dev/null || { echo "transformers/safetensors missing in $py"; exit 1; }
tiny=()
[ "${DK_TEST_TINY:-0}" = 1 ] && tiny=(--tiny)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dk_model_hf_cuda.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
"$py" "$src/tests/gpu/model_hf_compare.py" make "$tmp" "${tiny[@]}" || exit 1
"$dump" --device "$device" "$tmp/model" "$tmp/batch.safetensors" "$tmp/ours.safetensors"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "model_hf_dump failed ($rc)"; exit 1; }
"$py" "$src/tests/gpu/model_hf_compare.py" compare "$tmp" --device "$device" --expect "$expect"
rc=$?
echo "test_model_hf_cuda: $device, $(( $(date +%s) - t0 )) s"
exit $rc
