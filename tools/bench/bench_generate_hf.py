"""bench_generate_hf.py: the PyTorch anchors for tools/bench/bench_generate.c
and tools/bench/bench_generate_recipe.c.

Times transformers on a random Qwen3-1.7B-shaped model in bf16 on one GPU,
with the benchmark's workload: batch 64, prompt 512, 256 new tokens by
default (sampled at temperature 1, never stopping early), two ways:

- plain `generate` (dynamic KV cache, eager): at batch 64 it is bound by
  the host loop and varies from call to call (600 to 2,600 tokens/s in
  single runs on the H200 machine), so it steers nothing on its own;
- the fastest generation PyTorch alone offers: a static KV cache with the
  decode forward compiled by `torch.compile(mode="reduce-overhead")` (CUDA
  graphs; transformers compiles it itself given `cache_implementation=
  "static"` and a CompileConfig). Compilation happens in the warm-up runs,
  which use the timed runs' exact shapes.

--chunk N generates the batch as consecutive sub-batches of N sequences
within each timed run (the run's tokens over the time of all of them): the
static cache of the RL shape (batch 256, 3k tokens) is about 90 GB, which
an 80 GB card cannot hold at once. A smaller batch reads the weights more
often per token, so a chunked figure can only be lower than the whole
batch's would be, and our ratio against it higher: the output says when a
run was chunked.

Each way runs --repeats times after its warm-up; the figure is the median,
printed with its spread (min-max). The last lines are machine-readable:
`hf_tokens_per_s <median>` (plain generate: bench_generate's --hf-tps) and
`hf_static_tokens_per_s <median>` (--hf-static-tps). Given --ours-tps (the
engine's tokens/s on the same shape), the ratio against both is printed.

Usage: python3 tools/bench/bench_generate_hf.py [--batch 64] [--prompt 512] [--new 256] [--repeats 5]
       [--chunk N] [--ours-tps X] [--skip-plain] [--skip-static]
"""
import argparse
import statistics
import sys
import time

import torch


def spread(rates):
    med = statistics.median(rates)
    return med, f"median {med:.1f} tokens/s over {len(rates)} runs (min {min(rates):.1f}, max {max(rates):.1f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=0, help="sequences generated at once (default: the whole batch)")
    ap.add_argument("--ours-tps", type=float, default=0.0, help="the engine's tokens/s on the same shape")
    ap.add_argument("--skip-plain", action="store_true", help="time only the static-cache compiled generate")
    ap.add_argument("--skip-static", action="store_true", help="time only plain generate")
    args = ap.parse_args()
    for name in ("batch", "prompt", "new", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: must be at least 1")
    if args.chunk < 0 or args.chunk > args.batch or (args.chunk and args.batch % args.chunk):
        # equal chunks: one more batch size would compile and capture again
        ap.error(f"--chunk: must divide --batch ({args.batch})")
    chunk = args.chunk or args.batch
    if args.ours_tps < 0:
        ap.error("--ours-tps: must be positive")
    if not torch.cuda.is_available():
        print("bench_generate_hf: needs a CUDA GPU", file=sys.stderr)
        return 1
    from transformers import CompileConfig, Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device="cuda")
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
    static_kw = dict(cache_implementation="static", compile_config=CompileConfig(mode="reduce-overhead"))

    def run(n_new, extra, batch=args.batch):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        new = n_new
        for b in range(0, batch, chunk):
            part = ids[b:b + chunk]
            out = model.generate(part, attention_mask=torch.ones_like(part), max_new_tokens=n_new,
                                 min_new_tokens=n_new, **kw, **extra)
            new = min(new, out.shape[1] - args.prompt)
        torch.cuda.synchronize()
        return new, time.perf_counter() - t0

    def timed(label, extra, warmups):
        for i in range(warmups):
            # One chunk: every chunk has the timed shape, so one compiles and
            # captures what the runs replay.
            new, dt = run(args.new if extra else 16, extra, chunk)
            print(f"{label} warm-up {i + 1}: {dt:.2f} s")
        rates = []
        for i in range(args.repeats):
            new, dt = run(args.new, extra)
            rates.append(args.batch * new / dt)
            chunked = f" in chunks of {chunk}" if chunk < args.batch else ""
            print(f"{label} run {i + 1}: batch {args.batch}{chunked}, prompt {args.prompt}, {new} new tokens in {dt:.2f} s"
                  f" = {rates[-1]:.1f} tokens/s", flush=True)
        return rates

    results = {}
    with torch.no_grad():
        if not args.skip_plain:
            # warm-up at the full batch and prompt: allocator, kernels, caches
            results["plain"] = timed("HF generate", {}, 1)
        if not args.skip_static:
            # The static cache's length is prompt + new: the warm-ups use the
            # timed shape, so compilation and graph capture stay out of the runs.
            results["static"] = timed("HF static cache + torch.compile(reduce-overhead)", static_kw, 2)
    lines = []
    for key, label, tag in (("plain", "HF generate", "hf_tokens_per_s"),
                            ("static", "HF static cache + torch.compile(reduce-overhead)", "hf_static_tokens_per_s")):
        if key not in results:
            continue
        med, text = spread(results[key])
        print(f"{label}: {text}")
        if args.ours_tps > 0:
            lo, hi = min(results[key]), max(results[key])
            print(f"  ours {args.ours_tps:.1f} tokens/s = {args.ours_tps / med:.2f}x its median "
                  f"({args.ours_tps / hi:.2f}x-{args.ours_tps / lo:.2f}x over its spread)")
        lines.append(f"{tag} {med:.1f}")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
