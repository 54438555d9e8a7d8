#!/usr/bin/env bash
# train --plan on the recipes: configs/drkernel14b.ini and drkernel8b.ini fit
# 8 GPUs of 141 GB (exit 0; their [dist] world = 8 makes that the plain --plan), the 14B recipe does not fit one (exit 1, with
# the table), the shape read from a checkpoint's config.json (model.path) or
# the world size from the launcher plan the same, and a config that cannot be
# planned exits 2. The tables go to
# the log. At 8 GPUs recompute = auto picks layer_keep_attention, whose
# activations exceed layer's by the attention output and logsumexp of all
# layers but one (layer's shared set holds one). Their shard and gather rows are checked against the figures a
# separate computation from the HF shape gives (python below: every unit of
# Qwen3-14B / 8B padded to a multiple of the world size, times 2 bytes for
# bf16 and 4 for fp32; gathered: the embedding, final norm, lm head and two
# layers), to the table's 0.01 GB.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

plan() { # name, expected exit code, train arguments...
    local name=$1 want=$2 rc=0
    shift 2
    "$train" --plan "$@" dist.gpu_memory_gb=141 > "$tmp/$name" 2> "$tmp/$name.err" || rc=$?
    echo "== train --plan $* dist.gpu_memory_gb=141: exit $rc"
    cat "$tmp/$name" "$tmp/$name.err"
    [ "$rc" = "$want" ] || { echo "FAIL: exit $rc, want $want"; exit 1; }
}

plan 14b_w8 0 configs/drkernel14b.ini dist.world=8
plan 8b_w8 0 configs/drkernel8b.ini dist.world=8
plan 14b_w8_layer 0 configs/drkernel14b.ini dist.world=8 train.recompute=layer
plan 8b_w8_layer 0 configs/drkernel8b.ini dist.world=8 train.recompute=layer
plan 14b_w1 1 configs/drkernel14b.ini dist.world=1
grep -q "DOES NOT FIT" "$tmp/14b_w1" && grep -q "^  parameter shard " "$tmp/14b_w1" ||
    { echo "FAIL: world 1 printed no table or no verdict"; exit 1; }
# The recipes' own [dist] world = 8 is what a plain --plan plans for.
plan 14b_plain 0 configs/drkernel14b.ini
grep -q "^world 8 (dist.world)" "$tmp/14b_plain" && cmp -s "$tmp/14b_plain" "$tmp/14b_w8" ||
    { echo "FAIL: plain --plan of the 14B recipe is not its world-8 plan"; exit 1; }
# world 0 is the launcher's: Open MPI's size when there is one.
OMPI_COMM_WORLD_SIZE=8 plan 14b_launch 0 configs/drkernel14b.ini dist.world=0
grep -q "^world 8 (the launcher's)" "$tmp/14b_launch" &&
    cmp -s <(tail -n +2 "$tmp/14b_launch") <(tail -n +2 "$tmp/14b_w8") ||
    { echo "FAIL: OMPI_COMM_WORLD_SIZE=8 plans differently from world 8"; exit 1; }
# The shape from a checkpoint's config.json (model.path) plans the same.
plan 14b_hub 0 configs/drkernel14b.ini dist.world=8 model.path=tests/fixtures/config/qwen3_14b_hub
cmp -s "$tmp/14b_hub" "$tmp/14b_w8" || { echo "FAIL: model.path's config.json plans differently"; exit 1; }
# More conversations per rank than one generation step holds: a config error.
plan bad 2 configs/drkernel8b.ini dist.world=1 train.batch_size=8192 rl.n_samples=16 data.max_length=2048 \
    train.micro_batch_tokens=2048
grep -q "exceed the generation step" "$tmp/bad.err" || { echo "FAIL: no reason given"; exit 1; }

"$py" - "$tmp" <<'PY'
import re, sys
d = sys.argv[1]
shapes = {  # Qwen3-14B and Qwen3-8B config.json: V, C, I, L, Hq, Hkv, D
    "14b": (151936, 5120, 17408, 40, 40, 8, 128),
    "8b": (151936, 4096, 12288, 36, 32, 8, 128),
}
def rows(path):
    out = {}
    for line in open(path):
        m = re.match(r"  (\S.*?)\s{2,}([-\d. ]+)$", line)
        if m:
            out[m.group(1)] = [None if v == "-" else float(v) for v in m.group(2).split()]
    return out
for name, (V, C, I, L, Hq, Hkv, D) in shapes.items():
    for world, tag in ((8, f"{name}_w8"),) + (((1, "14b_w1"),) if name == "14b" else ()):
        layer = C + (Hq * D + 2 * Hkv * D) * C + 2 * D + C * Hq * D + C + 3 * I * C
        units = [V * C] + [layer] * L + [C, V * C]
        shard = sum(-(-n // world) for n in units)
        pad = lambda n: -(-n // world) * world
        working = pad(V * C) + pad(C) + pad(V * C) + 2 * pad(layer)  # the ends + two layer slots (zero.c)
        padded = sum(-(-n // world) * world for n in units)
        want = {
            "parameter shard": 2 * shard, "fp32 master shard": 4 * shard, "AdamW m shard (fp32)": 4 * shard,
            "AdamW v shard (fp32)": 4 * shard, "gradient shard (fp32)": 4 * shard,
            "gathered parameters (ends + 2 layers)": 2 * working if world > 1 else 0,
            "gathered gradients (same, fp32)": 4 * working if world > 1 else 0,
            "inference copy of the weights": 2 * padded if world > 1 else 0,
        }
        got = rows(f"{d}/{tag}")
        for item, b in want.items():
            cells = [c for c in got[item] if c is not None]
            exp = round(b / 1e9, 2)
            assert all(abs(c - exp) < 0.006 for c in cells) and (cells or b == 0), (tag, item, cells, exp)
            print(f"{tag}: {item}: {cells} GB, computed {b / 1e9:.3f}")
    # recompute = auto at 8 GPUs: none does not fit, layer_keep_attention
    # does; its activations are layer's plus, per layer, the attention
    # output [T, Hq*D] bf16 and its logsumexp [Hq, T] fp32 (T = 32768),
    # less the one pair layer's shared activation set holds: L - 1 pairs.
    text = open(f"{d}/{name}_w8").read()
    assert "recompute = auto picked layer_keep_attention: none does not fit" in text, (name, text[:600])
    T = 32768
    extra = (L - 1) * (T * Hq * D * 2 + Hq * T * 4)
    keep, layer = rows(f"{d}/{name}_w8")["activations"][0], rows(f"{d}/{name}_w8_layer")["activations"][0]
    assert abs(keep - layer - extra / 1e9) < 0.011, (name, keep, layer, extra / 1e9)
    print(f"{name}_w8: auto picks layer_keep_attention: activations {keep} GB = layer's {layer} + {extra / 1e9:.3f}")
print("recipe plans: shard, gather and inference-copy rows agree; auto picks layer_keep_attention")
PY
