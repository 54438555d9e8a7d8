#!/usr/bin/env bash
# install-deps.sh: installs everything drkernel needs to build and test on a
# Debian machine (docs/DESIGN.md §16): the Debian packages and a Python venv .venv
# with torch, triton and numpy for the KernelGym harness, plus transformers,
# tokenizers and sentencepiece for the scripts that regenerate test fixtures,
# tensorboard for the test that reads our event files back.
# Idempotent: a second run checks and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake gcc g++ make pkg-config python3-venv
      libopenmpi-dev openmpi-bin
      libhiredis-dev redis-server libssl-dev
      libcjson-dev libinih-dev libpcre2-dev
      libsentencepiece-dev libopenblas-dev)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The venv: the harness (torch, triton, numpy) and the fixture scripts.
py_pkgs=(torch triton numpy safetensors transformers tokenizers sentencepiece tensorboard)
stamp=.venv/.drkernel-deps
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${py_pkgs[*]}" ]; then
  echo "install-deps: python venv .venv: ${py_pkgs[*]}"
  # The venv takes ~6 GB once unpacked, and pip needs room for the wheels
  # besides. A disk that cannot hold it fails here, saying so, instead of in
  # pip's retries with a venv half written.
  need_kb=$((9 * 1024 * 1024))
  free_kb=$(df -Pk . | awk 'NR==2 {print $4}')
  if [ "${free_kb:-0}" -lt "$need_kb" ]; then
    echo "install-deps: $(pwd) has $((free_kb / 1024)) MB free; the venv .venv needs about $((need_kb / 1024)) MB" >&2
    exit 1
  fi
  [ -x .venv/bin/python ] || python3 -m venv .venv
  pip=(.venv/bin/python -m pip)
  # torch pulls ~3 GB of CUDA wheels from PyPI; a dropped connection midway
  # must cost a resume, not the whole install. Completed wheels stay in pip's
  # cache, so each further attempt only fetches what is still missing.
  net=(--retries 10 --timeout 120)
  "${pip[@]}" install -q "${net[@]}" --upgrade pip >/dev/null
  "${pip[@]}" install --help | grep -q -- --resume-retries && net+=(--resume-retries 50)
  for attempt in 1 2 3 4; do
    "${pip[@]}" install -q "${net[@]}" "${py_pkgs[@]}" && break
    [ "$attempt" -eq 4 ] && { echo "install-deps: pip failed 4 times, giving up" >&2; exit 1; }
    echo "install-deps: pip attempt $attempt failed; retrying in $((attempt * 20)) s" >&2
    sleep $((attempt * 20))
  done
  echo "${py_pkgs[*]}" > "$stamp"
fi
echo "install-deps: ok"
