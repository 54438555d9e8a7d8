"""make_config_fixtures.py: Hugging Face config.json files that model/hf_config.c
must read (tests/unit/test_hf_config.c), and transformers' own reading of them.

Each case is written to tests/fixtures/config/<name>/config.json, either by
transformers (Qwen3Config / Qwen2Config / LlamaConfig(...).to_json_file, the
transformers 5 layout with rope_parameters) or as the literal dict a published
checkpoint ships (the transformers 4 layout with rope_theta and rope_scaling).
expected.json then records, per case, what transformers makes of the file:
the config's values and, from the model it builds on the meta device, the
head size, which biases and norms exist, whether the head is tied, and the
parameter count. The C reader is compared with these field by field.

Run: .venv/bin/python tests/make_config_fixtures.py
"""

import json
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "config")

# The published Qwen3-14B config.json (transformers 4 layout), and Qwen3-8B's.
QWEN3_14B_HUB = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17408,
    "max_position_embeddings": 40960, "max_window_layers": 40, "model_type": "qwen3",
    "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}

# The published Qwen3-8B config.json differs from the 14B one only in its shape.
QWEN3_8B_HUB = dict(QWEN3_14B_HUB, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                    num_attention_heads=32, max_window_layers=36)

# An older Llama-style file: no head_dim, no num_key_value_heads (both default).
LLAMA_MINIMAL = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
    "vocab_size": 300, "bos_token_id": 1, "eos_token_id": 2,
}


def cases():
    yield "qwen3_tiny", Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 3])
    yield "qwen3_14b", Qwen3Config(
        vocab_size=151936, hidden_size=5120, intermediate_size=17408, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643,
        eos_token_id=151645)
    yield "qwen3_14b_hub", QWEN3_14B_HUB
    yield "qwen3_8b_hub", QWEN3_8B_HUB
    # Qwen2.5-0.5B's shape: q/k/v bias, tied embeddings, 14 heads over 2 kv heads.
    yield "qwen2_5_0_5b", Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643)
    # attention_bias on (q/k/v and o), and head_dim != hidden / heads.
    yield "llama_bias", LlamaConfig(
        vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=24, max_position_embeddings=512, rope_theta=500000.0, rms_norm_eps=1e-5,
        attention_bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 5])
    yield "llama_minimal", LLAMA_MINIMAL


def first(x):
    """config.json's token id: an int, a list (the first counts) or null (-1)."""
    if isinstance(x, (list, tuple)):
        return x[0] if x else -1
    return -1 if x is None else x


def describe(model_dir):
    """What transformers reads from model_dir/config.json, in model_config's terms."""
    cfg = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    attn = model.model.layers[0].self_attn
    rope = getattr(cfg, "rope_parameters", None) or {}
    return {
        "arch": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "n_layers": cfg.num_hidden_layers,
        "n_heads": cfg.num_attention_heads,
        "n_kv_heads": cfg.num_key_value_heads,
        "head_dim": attn.head_dim,
        "max_position": cfg.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", getattr(cfg, "rope_theta", 0.0))),
        "rms_eps": float(cfg.rms_norm_eps),
        "tie_embeddings": int(model.lm_head.weight is model.model.embed_tokens.weight),
        "qkv_bias": int(attn.q_proj.bias is not None),
        "o_bias": int(attn.o_proj.bias is not None),
        "qk_norm": int(hasattr(attn, "q_norm")),
        "bos_token_id": first(cfg.bos_token_id),
        "eos_token_id": first(cfg.eos_token_id),
        "n_params": sum(p.numel() for p in model.parameters()),
    }


def main():
    expected = {}
    for name, cfg in cases():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "config.json")
        if isinstance(cfg, dict):
            with open(path, "w") as f:
                json.dump(cfg, f, indent=2)
                f.write("\n")
        else:
            cfg.to_json_file(path)
        expected[name] = describe(d)
        print(name, expected[name]["n_params"])
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
