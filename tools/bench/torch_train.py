"""torch_train.py: the Hugging Face side of bench_train. Times the training
step of Qwen3ForCausalLM(config), random weights in bf16, sdpa attention, on
B = 4 sequences of S = 4096 tokens: forward + backward of the causal LM loss
(model(input_ids, labels=input_ids).loss, the mean next-token cross-entropy),
optimizer excluded, gradients set to None before each step. Each shape runs
without and then with gradient checkpointing (every decoder layer recomputed
in the backward, what bench_train's recompute = layer is compared with).

--wide (bench_train --wide) runs instead the Qwen3-8B and 14B widths with
untied embeddings (tie_word_embeddings=False, as the real models) and
num_hidden_layers = --layers N (default 4): the keys say the depth, 8b-4l,
8b-4l-gc, 14b-4l, 14b-4l-gc.

For each run it prints the lines bench_train reads (KEY is 0.6b, 0.6b-gc,
1.7b, 1.7b-gc, or tiny / tiny-gc; with --wide as above, or tiny-4l /
tiny-4l-gc with --tiny):
    hf_tokens_per_s KEY X
    hf_peak_mem_gb KEY X      (torch.cuda.max_memory_allocated)
    hf_loss KEY X

usage: torch_train.py [--quick] [--tiny] [--wide] [--layers N] [--device cuda|cpu] [--steps N] [--warmup N]
--quick: the first shape only (0.6B, or 8B with --wide); --tiny: the small
shape bench_train --tiny uses (for a check of the script on the CPU), or
with --wide the small untied one bench_train --wide --tiny uses.
"""
import argparse
import sys
import time
import warnings

import torch

SHAPES = {
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, vocab_size=512),
}

# --wide: full width, depth from --layers, untied (bench_train.c's qwen3_8b,
# qwen3_14b and tiny_wide with n_layers replaced).
WIDE = {
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8,
               head_dim=128, vocab_size=151936),
    "14b": dict(hidden_size=5120, intermediate_size=17408, num_attention_heads=40, num_key_value_heads=8,
                head_dim=128, vocab_size=151936),
    "tiny": dict(hidden_size=128, intermediate_size=384, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                 vocab_size=512),
}


def shapes(args):
    """(key, Qwen3Config keyword arguments) of each model to run, in order."""
    if args.wide:
        names = ["tiny"] if args.tiny else (["8b"] if args.quick else ["8b", "14b"])
        return [(f"{n}-{args.layers}l", dict(WIDE[n], num_hidden_layers=args.layers, tie_word_embeddings=False))
                for n in names]
    names = ["tiny"] if args.tiny else (["0.6b"] if args.quick else ["0.6b", "1.7b"])
    return [(n, dict(SHAPES[n], tie_word_embeddings=True)) for n in names]


def build(shape, dev):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**shape, max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 directly: no fp32 copy of 1.7B on the device
    try:
        with torch.device(dev):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    # Not model.to(bfloat16): that would also round the fp32 RoPE frequencies.
    return model.train()


def checkpointing_on(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable()


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def time_steps(model, ids, dev, warmup, steps):
    """Seconds per step (mean over `steps` after `warmup`) and the last loss."""

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss

    for _ in range(warmup):
        step()
    sync(dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times), min(times), float(loss.detach().float())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--wide", action="store_true")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    args = ap.parse_args()
    if args.layers is not None and not args.wide:
        ap.error("--layers sets the depth of the --wide shapes only")
    if args.layers is None:
        args.layers = 4
    if args.layers < 1:
        ap.error("--layers must be at least 1")
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("torch_train: no CUDA GPU visible to torch", file=sys.stderr)
        return 1
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    B = args.batch or (2 if args.tiny else 4)
    S = args.seq or (64 if args.tiny else 4096)
    t_all = time.perf_counter()
    for name, shape in shapes(args):
        model = build(shape, dev)
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(0, model.config.vocab_size, (B, S), generator=gen).to(dev)
        attn = model.config._attn_implementation
        for gc in (False, True):
            if gc:
                checkpointing_on(model)
            key = name + ("-gc" if gc else "")
            step_s, min_s, loss = time_steps(model, ids, dev, args.warmup, args.steps)
            mem = torch.cuda.max_memory_allocated() / 1e9 if dev == "cuda" else float("nan")
            tps = B * S / step_s
            print(f"HF {key}: B={B} S={S} attn={attn} checkpointing={'on' if gc else 'off'}: "
                  f"{step_s * 1e3:.1f} ms/step (min {min_s * 1e3:.1f}), {tps:.0f} tokens/s, "
                  f"peak {mem:.1f} GB, loss {loss:.4f}")
            print(f"hf_tokens_per_s {key} {tps:.1f}")
            if dev == "cuda":
                print(f"hf_peak_mem_gb {key} {mem:.2f}")
            print(f"hf_loss {key} {loss:.5f}")
            sys.stdout.flush()
        del model
        if dev == "cuda":
            torch.cuda.empty_cache()
    print(f"torch_train: {time.perf_counter() - t_all:.1f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
