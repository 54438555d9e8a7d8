"""torch_attention.py: the PyTorch side of bench_attention. Times
scaled_dot_product_attention (causal, GQA through enable_gqa) forward and
forward+backward on [B, H, S, D] bf16 and prints one line that bench_attention
parses:  torch fwd_ms=X fwdbwd_ms=Y
Also prints, for reference, the time of each SDPA backend that accepts the shape.

usage: torch_attention.py B H KV S D
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters=10, reps=7):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    times.sort()
    return times[len(times) // 2]


def main():
    if len(sys.argv) != 6:
        print("usage: torch_attention.py B H KV S D", file=sys.stderr)
        sys.exit(2)
    B, H, KV, S, D = map(int, sys.argv[1:])
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(B, H, S, D, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(B, KV, S, D, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(B, KV, S, D, device=dev, dtype=dt, requires_grad=True)
    do = torch.randn(B, H, S, D, device=dev, dtype=dt)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd_bwd():
        o = fwd()
        torch.autograd.grad(o, (q, k, v), do)

    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                f, fb = median_ms(fwd), median_ms(fwd_bwd, iters=5)
            print(f"  torch sdpa backend {name:9s}: forward {f:.3f} ms, forward+backward {fb:.3f} ms")
        except RuntimeError as e:
            print(f"  torch sdpa backend {name:9s}: not available for this shape ({str(e).splitlines()[0][:80]})")
    f, fb = median_ms(fwd), median_ms(fwd_bwd, iters=5)
    print(f"torch fwd_ms={f:.6f} fwdbwd_ms={fb:.6f}")


if __name__ == "__main__":
    main()
