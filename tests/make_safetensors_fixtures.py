"""Writes the safetensors fixtures under tests/fixtures/safetensors/ with the
reference `safetensors` package and Hugging Face transformers, so that our C
reader and the HF-name mapping are checked against files we did not write.

    .venv/bin/python tests/make_safetensors_fixtures.py

Produces (all tiny):
  mixed.safetensors + mixed_ref.json + mixed_ref.bin
      BF16 / F16 / F32 tensors with special values (subnormals, inf, NaN, -0,
      the fp16 extremes), a scalar and an empty tensor; the .bin holds each
      tensor's exact fp32 values (raw little-endian, offsets in the .json).
  qwen3/   bf16, untied, q/k norm, head_dim 8 != hidden/heads, one file
  qwen2/   fp16, tied embeddings, q/k/v bias, sharded with an index
  llama/   fp32, untied, attention_bias (q/k/v and o bias), sharded
      each: config.json + model*.safetensors from save_pretrained, and
      ref_layout.bin: the parameters as fp32 in drkernel's flat layout
      (embedding, layer 0 .. L-1 buffers, final norm, lm head when untied),
      built here independently from model/params.h's description.
  bad_truncated/  qwen3 config.json + model.safetensors cut inside the data
  bad_shape/      ... + model.layers.1.mlp.up_proj.weight stored transposed
  bad_missing/    ... + model.layers.0.self_attn.k_proj.weight left out
Every model has vocab 64, hidden 16, intermediate 32, 2 layers, 4 heads,
2 kv heads; tests/unit/test_safetensors.c mirrors these numbers.
"""
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file, load_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "safetensors")

DIMS = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6)


def write_mixed():
    g = torch.Generator().manual_seed(1)
    special16 = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, -65504.0, 6.103515625e-05, 5.960464477539063e-08,
                              -1.1920928955078125e-07, float("inf"), float("-inf"), float("nan"), 0.333251953125,
                              1000.5], dtype=torch.float32)
    tensors = {
        "a.bf16": (torch.randn(3, 5, generator=g) * 3).to(torch.bfloat16),
        "b.f16": (torch.randn(2, 3, 4, generator=g)).to(torch.float16),
        "b.f16_special": special16.to(torch.float16),
        "c.f32": torch.randn(7, generator=g, dtype=torch.float32) * 1e-3,
        "d.bf16_special": torch.tensor([0.0, -0.0, 3.0e38, -1.0e-38, 9.183549615799121e-41, float("inf"),
                                        float("-inf"), float("nan"), 1.0078125], dtype=torch.float32).to(torch.bfloat16),
        "e.scalar": torch.tensor(2.75, dtype=torch.float32),
        "f.empty": torch.zeros(0, 3, dtype=torch.bfloat16),
        "g.odd_bf16": (torch.randn(1, 3, generator=g)).to(torch.bfloat16),
    }
    save_file(tensors, os.path.join(OUT, "mixed.safetensors"), metadata={"format": "pt"})
    ref, blob, off = [], bytearray(), 0
    for name, t in tensors.items():
        v = t.float().contiguous().numpy().astype("<f4")
        ref.append({"name": name, "dtype": {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[t.dtype],
                    "shape": list(t.shape), "offset": off, "numel": int(v.size)})
        blob += v.tobytes()
        off += v.size
    with open(os.path.join(OUT, "mixed_ref.json"), "w") as f:
        json.dump({"tensors": ref}, f, indent=1)
    with open(os.path.join(OUT, "mixed_ref.bin"), "wb") as f:
        f.write(bytes(blob))


def layout_of(model, cfg, qkv_bias, o_bias, qk_norm):
    """Flat fp32 parameters in the order model/params.h describes."""
    p = {k: v.detach().float().contiguous().numpy() for k, v in model.named_parameters(remove_duplicate=False)}
    parts = [p["model.embed_tokens.weight"]]
    for l in range(cfg.num_hidden_layers):
        a = f"model.layers.{l}."
        parts += [p[a + "input_layernorm.weight"], p[a + "self_attn.q_proj.weight"], p[a + "self_attn.k_proj.weight"],
                  p[a + "self_attn.v_proj.weight"]]
        if qkv_bias:
            parts += [p[a + "self_attn.q_proj.bias"], p[a + "self_attn.k_proj.bias"], p[a + "self_attn.v_proj.bias"]]
        if qk_norm:
            parts += [p[a + "self_attn.q_norm.weight"], p[a + "self_attn.k_norm.weight"]]
        parts += [p[a + "self_attn.o_proj.weight"]]
        if o_bias:
            parts += [p[a + "self_attn.o_proj.bias"]]
        parts += [p[a + "post_attention_layernorm.weight"],
                  np.concatenate([p[a + "mlp.gate_proj.weight"], p[a + "mlp.up_proj.weight"]], axis=0),
                  p[a + "mlp.down_proj.weight"]]
    parts.append(p["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        parts.append(p["lm_head.weight"])
    return np.concatenate([x.ravel() for x in parts]).astype("<f4")


def write_model(name, cls, cfg, dtype, shard, qkv_bias, o_bias, qk_norm, seed):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    # Every parameter distinct and nonzero (norms and biases too), so a tensor
    # mapped to the wrong place cannot go unnoticed.
    with torch.no_grad():
        for _, prm in model.named_parameters():
            prm.copy_(torch.randn_like(prm) * 0.5)
    model = model.to(dtype)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, max_shard_size=shard)
    sharded = os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    assert sharded == (shard != "50GB"), (name, os.listdir(d))
    layout_of(model, cfg, qkv_bias, o_bias, qk_norm).tofile(os.path.join(d, "ref_layout.bin"))
    for junk in ("generation_config.json",):
        if os.path.exists(os.path.join(d, junk)):
            os.remove(os.path.join(d, junk))
    return d


def write_bad(qwen3_dir):
    src = os.path.join(qwen3_dir, "model.safetensors")
    tensors = load_file(src)
    for bad in ("bad_truncated", "bad_shape", "bad_missing"):
        d = os.path.join(OUT, bad)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        shutil.copy(os.path.join(qwen3_dir, "config.json"), d)
    data = open(src, "rb").read()
    # Cut inside the tensor data: the header is intact, the last tensors' data is not.
    with open(os.path.join(OUT, "bad_truncated", "model.safetensors"), "wb") as f:
        f.write(data[: len(data) - 1000])
    t = dict(tensors)
    t["model.layers.1.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"].t().contiguous()
    save_file(t, os.path.join(OUT, "bad_shape", "model.safetensors"), metadata={"format": "pt"})
    t = dict(tensors)
    del t["model.layers.0.self_attn.k_proj.weight"]
    save_file(t, os.path.join(OUT, "bad_missing", "model.safetensors"), metadata={"format": "pt"})


def main():
    os.makedirs(OUT, exist_ok=True)
    write_mixed()
    q3 = write_model("qwen3", Qwen3ForCausalLM, Qwen3Config(**DIMS, head_dim=8, tie_word_embeddings=False),
                     torch.bfloat16, "50GB", qkv_bias=False, o_bias=False, qk_norm=True, seed=3)
    write_model("qwen2", Qwen2ForCausalLM, Qwen2Config(**DIMS, tie_word_embeddings=True), torch.float16, "8KB",
                qkv_bias=True, o_bias=False, qk_norm=False, seed=2)
    write_model("llama", LlamaForCausalLM, LlamaConfig(**DIMS, attention_bias=True, tie_word_embeddings=False),
                torch.float32, "20KB", qkv_bias=True, o_bias=True, qk_norm=False, seed=4)
    write_bad(q3)
    for r, _, fs in os.walk(OUT):
        for f in fs:
            os.chmod(os.path.join(r, f), 0o644)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
