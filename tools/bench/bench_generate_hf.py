"""bench_generate_hf.py: the Hugging Face anchor for tools/bench/bench_generate.c.

Times transformers' generate on a random Qwen3-1.7B-shaped model in bf16 on
one GPU, with the benchmark's workload: batch 64, prompt 512, 256 new tokens
(sampled at temperature 1, never stopping early). HF generate at batch 64
is bound by the host CPU and varies from call to call (600 to 1,040 tokens/s
in single runs on the H200 machine), so the workload runs --repeats times
after a full-size warm-up and the median is the anchor. Prints every run and
one line, `hf_tokens_per_s <median>`, that bench_generate takes as --hf-tps.

Usage: python3 tools/bench/bench_generate_hf.py [--batch 64] [--prompt 512] [--new 256] [--repeats 3]
"""
import argparse
import statistics
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats: must be at least 1")
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

    def run(n_new):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new, **kw)
        torch.cuda.synchronize()
        return out.shape[1] - args.prompt, time.perf_counter() - t0

    with torch.no_grad():
        run(16)  # warm-up at the full batch and prompt: allocator, kernels, caches
        rates = []
        for i in range(args.repeats):
            new, dt = run(args.new)
            rates.append(args.batch * new / dt)
            print(f"HF generate run {i + 1}: batch {args.batch}, prompt {args.prompt}, {new} new tokens in {dt:.2f} s"
                  f" = {rates[-1]:.1f} tokens/s")
    median = statistics.median(rates)
    print(f"HF generate: median {median:.1f} tokens/s over {len(rates)} runs (min {min(rates):.1f}, max {max(rates):.1f})")
    print(f"hf_tokens_per_s {median:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
