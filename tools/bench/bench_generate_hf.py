"""bench_generate_hf.py: the Hugging Face anchor for tools/bench/bench_generate.c.

Times transformers' generate on a random Qwen3-1.7B-shaped model in bf16 on
one GPU, with the benchmark's workload: batch 64, prompt 512, 256 new tokens
(sampled at temperature 1, never stopping early). Prints one line,
`hf_tokens_per_s <value>`, that bench_generate takes as --hf-tps.

Usage: python3 tools/bench/bench_generate_hf.py [--batch 64] [--prompt 512] [--new 256]
"""
import argparse
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_generate_hf: needs a CUDA GPU", file=sys.stderr)
        return 1
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device="cuda")
    mask = torch.ones_like(ids)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids[:, :32], attention_mask=mask[:, :32], max_new_tokens=8, min_new_tokens=8, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    new = out.shape[1] - args.prompt
    tps = args.batch * new / dt
    print(f"HF generate: batch {args.batch}, prompt {args.prompt}, {new} new tokens in {dt:.2f} s")
    print(f"hf_tokens_per_s {tps:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
