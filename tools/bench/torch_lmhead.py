"""torch_lmhead.py: the PyTorch side of bench_lmhead. The plain lm head:
logits = h @ W.T in bf16, then fp32 log_softmax, the target's logprob
(gather) and the entropy, and the autograd backward of
sum(dlogprob * logprob + dentropy * entropy). Prints one line that
bench_lmhead parses:
  torch fwd_ms=X fwdbwd_ms=Y extra_bytes=Z
extra_bytes is the peak memory of forward+backward beyond the inputs and
the gradients of h and W.

usage: torch_lmhead.py T C V
"""
import sys

import torch


def median_ms(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    if len(sys.argv) != 4:
        print("usage: torch_lmhead.py T C V", file=sys.stderr)
        sys.exit(2)
    T, C, V = map(int, sys.argv[1:])
    torch.manual_seed(0)
    dev = "cuda"
    h = (torch.rand(T, C, device=dev) * 3.4 - 1.7).to(torch.bfloat16).requires_grad_()
    W = ((torch.rand(V, C, device=dev) * 3.4 - 1.7) / C ** 0.5).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, V, (T,), device=dev)
    dlp = torch.full((T,), 1.0 / T, device=dev)
    dent = torch.full((T,), 0.01 / T, device=dev)

    def fwd():
        with torch.no_grad():
            logits = (h @ W.T).float()
            logp = torch.log_softmax(logits, dim=-1)
            lp = logp.gather(1, target[:, None])[:, 0]
            ent = -(logp.exp() * logp).sum(-1)
        return lp, ent

    def fwd_bwd():
        logits = (h @ W.T).float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(1, target[:, None])[:, 0]
        ent = -(logp.exp() * logp).sum(-1)
        loss = (dlp * lp).sum() + (dent * ent).sum()
        gh, gW = torch.autograd.grad(loss, (h, W))
        return gh, gW

    f = median_ms(fwd)
    fb = median_ms(fwd_bwd)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    gh, gW = fwd_bwd()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - gh.numel() * gh.element_size() - gW.numel() * gW.element_size()
    print(f"torch fwd_ms={f:.4f} fwdbwd_ms={fb:.4f} extra_bytes={extra}")


if __name__ == "__main__":
    main()
