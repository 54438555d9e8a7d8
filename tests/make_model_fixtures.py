"""make_model_fixtures.py: builds the tiny Hugging Face checkpoints that the
model's forward and backward are checked against (tests/unit/test_model_hf.c).

For each family (Qwen3, Qwen2-style, Llama-style) it creates a tiny random
model with transformers in fp32 under a fixed seed, replaces HF's default
initialisation (norm weights 1, biases 0, std 0.02 weights) with values that
make every tensor matter, and saves it with save_pretrained into
tests/fixtures/models/<name>/. Next to it, reference.safetensors holds, for one
fixed packed batch of several sequences:

  tokens, positions, cu_seqlens, targets  the batch (small integers stored as F32,
                                          the only dtypes safetensors I/O knows)
  logits [T, V]                           HF's logits, sequence by sequence
  loss [1]                                mean cross-entropy over targets >= 0
  grad.<hf name>                          d loss / d parameter, HF names

HF has no packed variable-length attention without flash-attn, so each
sequence runs on its own with positions restarting at 0; that is exactly what
a packed batch with cu_seqlens means.

Run: .venv/bin/python tests/make_model_fixtures.py
"""

import json
import os

import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "models")

# Three sequences of different lengths packed into one batch of T = 21 tokens.
SEQ_LENS = [7, 5, 9]


def families():
    # head_dim 16 with hidden 48 and 4 heads: head_dim != hidden / heads, so a
    # model that derives D from the hidden size fails.
    qwen3 = Qwen3Config(vocab_size=96, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
                        rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=128,
                        bos_token_id=1, eos_token_id=[2, 3])
    # Qwen2/2.5: q/k/v bias, no q/k norm, tied embeddings, a large rope theta.
    qwen2 = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        tie_word_embeddings=True, max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    # Llama-style: no bias, untied, one kv head shared by all four query heads.
    llama = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=1, rope_theta=500000.0, rms_norm_eps=1e-5,
                        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                        max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    return [("qwen3", Qwen3ForCausalLM, qwen3), ("qwen2", Qwen2ForCausalLM, qwen2),
            ("llama", LlamaForCausalLM, llama)]


def randomise(model, gen):
    """Every parameter gets a value that a wrong formula would expose."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:  # also the tied lm head: keep logits O(1)
                p.copy_(2.0 / p.shape[1] ** 0.5 * torch.randn(p.shape, generator=gen))
            else:  # [out, in] weights: unit-variance outputs for unit-variance inputs
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def make_batch(vocab, gen):
    tokens, positions, targets, cu = [], [], [], [0]
    for s, n in enumerate(SEQ_LENS):
        seq = torch.randint(0, vocab, (n,), generator=gen).tolist()
        tgt = seq[1:] + [-1]
        if s == 0:  # a masked "prompt": targets < 0 in the middle of the batch
            tgt[0] = tgt[1] = -1
        tokens += seq
        positions += list(range(n))
        targets += tgt
        cu.append(cu[-1] + n)
    return tokens, positions, cu, targets


def build(name, cls, cfg, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float()
    randomise(model, gen)
    model.train()  # dropout is 0 in these configs; train mode only enables grads

    tokens, positions, cu, targets = make_batch(cfg.vocab_size, gen)
    logits_all = []
    loss_sum = torch.zeros((), dtype=torch.float64)
    n_valid = sum(1 for t in targets if t >= 0)
    for s in range(len(SEQ_LENS)):
        a, b = cu[s], cu[s + 1]
        ids = torch.tensor(tokens[a:b]).unsqueeze(0)
        pos = torch.tensor(positions[a:b]).unsqueeze(0)
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        tgt = torch.tensor(targets[a:b])
        ce = torch.nn.functional.cross_entropy(logits, tgt, ignore_index=-1, reduction="sum")
        (ce / n_valid).backward()
        loss_sum += ce.detach().double()
        logits_all.append(logits.detach())
    loss = (loss_sum / n_valid).float()

    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    # Published Qwen and Llama checkpoints give rope_theta at the top level;
    # keep it there as well as in rope_parameters so the fixture reads like one.
    cpath = os.path.join(d, "config.json")
    with open(cpath) as f:
        conf = json.load(f)
    conf["rope_theta"] = cfg.rope_parameters["rope_theta"]
    with open(cpath, "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    gpath = os.path.join(d, "generation_config.json")
    if os.path.exists(gpath):
        os.remove(gpath)

    f32 = lambda xs: torch.tensor(xs, dtype=torch.float32)
    ref = {
        "tokens": f32(tokens),
        "positions": f32(positions),
        "cu_seqlens": f32(cu),
        "targets": f32(targets),
        "logits": torch.cat(logits_all).contiguous(),
        "loss": loss.reshape(1),
    }
    for pname, p in model.named_parameters():
        ref["grad." + pname] = p.grad.detach().contiguous()
    save_file(ref, os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})

    # The saved checkpoint must reload in transformers and give the same logits.
    back = cls.from_pretrained(d, attn_implementation="eager").float()
    with torch.no_grad():
        ids = torch.tensor(tokens[cu[0]:cu[1]]).unsqueeze(0)
        pos = torch.tensor(positions[cu[0]:cu[1]]).unsqueeze(0)
        diff = (back(input_ids=ids, position_ids=pos).logits[0] - logits_all[0]).abs().max().item()
    assert diff == 0.0, f"{name}: reloaded checkpoint differs by {diff}"
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: T={len(tokens)} n_valid={n_valid} loss={loss.item():.6f} files={size} bytes")


def main():
    for i, (name, cls, cfg) in enumerate(families()):
        build(name, cls, cfg, seed=1000 + i)


if __name__ == "__main__":
    main()
