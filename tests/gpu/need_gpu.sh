# need_gpu.sh: sourced by the GPU shell tests; exits 77 (ctest: skipped)
# where no GPU answers.
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
