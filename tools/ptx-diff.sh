#!/usr/bin/env bash
# ptx-diff.sh: what a change to CUDA sources does to the code nvcc makes,
# on a machine with nvcc and no GPU. Compiles each .cu file to sm_90a PTX at
# git revision REV and in the working tree, then reports per kernel whether
# the PTX is byte-identical, and otherwise whether the sequence of the
# instructions that carry the work (tensor-core products, exp2, fp32
# arithmetic, shuffles, loads and stores, copies, barriers) is the same and
# which instruction counts moved. A refactor that keeps that sequence keeps
# the kernel's arithmetic and memory traffic; integer index arithmetic may
# still differ.
#   tools/ptx-diff.sh REV kernels/attention.cu [kernels/attention_wgmma.cu ...]
set -eu
rev=$1
shift
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/old" "$rev"
trap 'git -C "$root" worktree remove --force "$tmp/old"; rm -rf "$tmp"' EXIT
for f in "$@"; do
  b=$(basename "$f" .cu)
  nvcc -std=c++17 -I"$tmp/old" -O3 -arch=sm_90a -ptx "$tmp/old/$f" -o "$tmp/$b.old.ptx"
  nvcc -std=c++17 -I"$root" -O3 -arch=sm_90a -ptx "$root/$f" -o "$tmp/$b.new.ptx"
  echo "== $f ($rev -> working tree)"
  python3 - "$tmp/$b.old.ptx" "$tmp/$b.new.ptx" <<'EOF'
import collections, re, sys

def kernels(path):
    out = {}
    for part in re.split(r'\n(?=(?:\.visible |\.weak )?\.entry )', open(path).read()):
        m = re.match(r'(?:\.visible |\.weak )?\.entry (\S+)\(', part)
        if m:
            out[m.group(1)] = part
    return out

WORK = re.compile(r'^(wgmma|mma|ex2|fma|shfl|st\.|ld\.|cp\.async|ldmatrix|bar|max|min|mul\.f32|sub\.f32|add\.f32|'
                  r'lg2|rcp|div|cvt\.rn\.bf16)')

def ops(text):
    seq = []
    for line in text.split('\n'):
        line = line.strip()
        if line.startswith('@'):
            line = line.split(None, 1)[1] if ' ' in line else ''
        if line and not line.startswith(('.', '/', '{', '}', '$')):
            seq.append(line.split()[0].rstrip(';'))
    return seq

old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
for k in sorted(set(old) | set(new)):
    if k not in old or k not in new:
        print(f"  {'added' if k in new else 'removed':9} {k}")
        continue
    if old[k] == new[k]:
        print(f"  identical {k}")
        continue
    a, b = ops(old[k]), ops(new[k])
    wa, wb = [o for o in a if WORK.match(o)], [o for o in b if WORK.match(o)]
    if wa == wb:
        verdict = 'same work'
    elif sorted(wa) == sorted(wb):
        verdict = 'reordered'
    else:
        verdict = 'CHANGED'
    ca, cb = collections.Counter(a), collections.Counter(b)
    moved = {o: cb[o] - ca[o] for o in set(ca) | set(cb) if ca[o] != cb[o]}
    print(f"  {verdict:9} {k}: {len(wa)} -> {len(wb)} work instructions; other counts moved: "
          + (', '.join(f'{o} {d:+d}' for o, d in sorted(moved.items())) or 'none'))
EOF
done
