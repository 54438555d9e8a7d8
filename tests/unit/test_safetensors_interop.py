"""Our safetensors writer seen from the reference implementations: files that
`test_safetensors_write --emit DIR` writes are read back with the Python
safetensors package (values, dtypes, header layout, index) and the saved
models are loaded with transformers' AutoModelForCausalLM.from_pretrained,
whose parameters must equal our fp32 source rounded to the saved dtype, bit
for bit, with no missing or unexpected keys."""
import json
import os
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

BUILD = os.environ.get("DK_BUILD", "build")
EMITTER = os.path.join(BUILD, "tests", "unit_test_safetensors_write")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL", msg, file=sys.stderr)


def bits_equal(got, want):
    """Bitwise equality, except that a NaN only has to stay a NaN."""
    g, w = got.contiguous(), want.contiguous()
    ib = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[g.dtype]
    same = g.view(ib) == w.view(ib)
    both_nan = torch.isnan(g.float()) & torch.isnan(w.float())
    return int((~(same | both_nan)).sum())


def round_to(x, dtype):
    """fp32 numpy -> torch tensor of DTYPE with round-to-nearest-even (numpy for fp16, torch for bf16)."""
    if dtype == torch.float16:
        with np.errstate(over="ignore"):  # overflow to inf is the expected rounding
            return torch.from_numpy(x.astype(np.float16))
    return torch.from_numpy(x).to(dtype)


def check_header(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    check(n % 8 == 0, f"{path}: header length {n} not a multiple of 8")
    header = json.loads(data[8:8 + n])
    check(header.get("__metadata__") == {"format": "pt"}, f"{path}: metadata {header.get('__metadata__')}")
    ends = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    pos = 0
    for b, e in ends:
        check(b == pos, f"{path}: data not contiguous at {b}")
        pos = e
    check(8 + n + pos == len(data), f"{path}: data ends at {8 + n + pos}, file has {len(data)} bytes")


def test_conv(out):
    special = np.fromfile(os.path.join(out, "conv", "special.bin"), dtype="<f4")
    random = np.fromfile(os.path.join(out, "conv", "random.bin"), dtype="<f4").reshape(37, 29)
    for name, dtype in (("F32", torch.float32), ("F16", torch.float16), ("BF16", torch.bfloat16)):
        path = os.path.join(out, "conv", f"{name}.safetensors")
        check_header(path)
        with safe_open(path, framework="pt") as f:
            check(f.metadata() == {"format": "pt"}, f"{path}: metadata {f.metadata()}")
        t = load_file(path)
        check(set(t) == {"special", "random", "scalar", "empty"}, f"{path}: keys {sorted(t)}")
        check(all(v.dtype == dtype for v in t.values()), f"{path}: dtypes {[v.dtype for v in t.values()]}")
        check(tuple(t["scalar"].shape) == () and tuple(t["empty"].shape) == (0, 5), f"{path}: scalar/empty shapes")
        bad = bits_equal(t["special"], round_to(special, dtype)) + bits_equal(t["random"], round_to(random, dtype))
        bad += bits_equal(t["scalar"].reshape(1), round_to(np.array([-7.125], dtype="<f4"), dtype))
        check(bad == 0, f"{path}: {bad} values differ from the reference rounding")
        print(f"conv {name}: {special.size + random.size + 1} values vs "
              f"{'numpy' if dtype == torch.float16 else 'torch'} rounding, {bad} bit mismatches")


def test_shards(out):
    d = os.path.join(out, "shards")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wm = index["weight_map"]
    files = sorted(set(wm.values()))
    total, n = 0, 0
    for fname in files:
        path = os.path.join(d, fname)
        check_header(path)
        t = load_file(path)
        check(set(t) == {k for k, v in wm.items() if v == fname}, f"{fname}: keys differ from weight_map")
        size = sum(v.numel() * v.element_size() for v in t.values())
        check(size <= 1000 or len(t) == 1, f"{fname}: {size} bytes in {len(t)} tensors")
        for k, v in t.items():
            i = int(k.split(".")[1])
            want = (i * 1000 + torch.arange(v.numel(), dtype=torch.float32)).reshape(v.shape) * 0.25
            check(torch.equal(v, want), f"{fname}: '{k}' values")
            total += v.numel() * v.element_size()
            n += 1
    check(index["metadata"]["total_size"] == total, f"total_size {index['metadata']['total_size']} != {total}")
    check(n == 12 and len(files) > 1, f"{n} tensors in {len(files)} shards")
    print(f"shards: {n} tensors in {len(files)} files, total_size {total} matches, values match")


def hf_params(flat, cfg, qkv_bias, o_bias, qk_norm):
    """Splits our flat layout (model/params.h order) into HF-named arrays."""
    C, I, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    D = getattr(cfg, "head_dim", None) or C // cfg.num_attention_heads
    Q, KV = cfg.num_attention_heads * D, cfg.num_key_value_heads * D
    pos, out = 0, {}

    def take(name, *shape):
        nonlocal pos
        n = int(np.prod(shape))
        out[name] = flat[pos:pos + n].reshape(shape)
        pos += n

    take("model.embed_tokens.weight", V, C)
    for l in range(L):
        a = f"model.layers.{l}."
        take(a + "input_layernorm.weight", C)
        take(a + "self_attn.q_proj.weight", Q, C)
        take(a + "self_attn.k_proj.weight", KV, C)
        take(a + "self_attn.v_proj.weight", KV, C)
        if qkv_bias:
            take(a + "self_attn.q_proj.bias", Q)
            take(a + "self_attn.k_proj.bias", KV)
            take(a + "self_attn.v_proj.bias", KV)
        if qk_norm:
            take(a + "self_attn.q_norm.weight", D)
            take(a + "self_attn.k_norm.weight", D)
        take(a + "self_attn.o_proj.weight", C, Q)
        if o_bias:
            take(a + "self_attn.o_proj.bias", C)
        take(a + "post_attention_layernorm.weight", C)
        take(a + "mlp.gate_proj.weight", I, C)  # gate rows first in w_gate_up
        take(a + "mlp.up_proj.weight", I, C)
        take(a + "mlp.down_proj.weight", C, I)
    take("model.norm.weight", C)
    if not cfg.tie_word_embeddings:
        take("lm_head.weight", V, C)
    check(pos == flat.size, f"layout has {flat.size} floats, consumed {pos}")
    return out


def test_model(out, name, model_type, dtype, qkv_bias, o_bias, qk_norm, tied, sharded):
    from transformers import AutoModelForCausalLM
    d = os.path.join(out, f"model_{name}")
    check(os.path.exists(os.path.join(d, "model.safetensors.index.json")) == sharded, f"{name}: sharded should be {sharded}")
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
    cfg = model.config
    check(cfg.model_type == model_type, f"{name}: model_type {cfg.model_type}")
    check(bool(cfg.tie_word_embeddings) == tied, f"{name}: tie_word_embeddings {cfg.tie_word_embeddings}")
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        check(not info.get(k), f"{name}: {k} {info.get(k)}")
    flat = np.fromfile(os.path.join(d, "layout.bin"), dtype="<f4")
    want = hf_params(flat, cfg, qkv_bias, o_bias, qk_norm)
    got = dict(model.named_parameters(remove_duplicate=False))
    if tied:
        check(got["lm_head.weight"].data_ptr() == got["model.embed_tokens.weight"].data_ptr(), f"{name}: head not tied")
        got.pop("lm_head.weight")
    check(set(got) == set(want), f"{name}: parameters {sorted(set(got) ^ set(want))} differ")
    bad, n = 0, 0
    for k, w in want.items():
        if k not in got:
            continue
        ref = round_to(np.ascontiguousarray(w), dtype).float()
        g = got[k].detach()
        check(tuple(g.shape) == tuple(ref.shape), f"{name}: '{k}' shape {tuple(g.shape)} vs {tuple(ref.shape)}")
        if tuple(g.shape) == tuple(ref.shape):
            bad += bits_equal(g, ref)
        n += ref.numel()
    check(bad == 0, f"{name}: {bad} of {n} parameters differ")
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 9, 3]])).logits
    check(tuple(logits.shape) == (1, 4, 64) and bool(torch.isfinite(logits).all()), f"{name}: forward")
    print(f"transformers {name} ({dtype}, {'sharded' if sharded else 'one file'}): {n} parameters, {bad} bit mismatches, "
          f"forward ok")


def main():
    if not os.path.exists(EMITTER):
        print(f"missing {EMITTER}: build the tests first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="dk_st_interop_") as out:
        r = subprocess.run([EMITTER, "--emit", out], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout, r.stderr, file=sys.stderr)
            return 1
        test_conv(out)
        test_shards(out)
        test_model(out, "qwen3", "qwen3", torch.bfloat16, qkv_bias=False, o_bias=False, qk_norm=True, tied=False,
                   sharded=False)
        test_model(out, "qwen2", "qwen2", torch.float16, qkv_bias=True, o_bias=False, qk_norm=False, tied=True,
                   sharded=True)
        test_model(out, "llama", "llama", torch.float32, qkv_bias=True, o_bias=True, qk_norm=False, tied=False,
                   sharded=True)
    if failures:
        print(f"test_safetensors_interop: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("test_safetensors_interop: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
