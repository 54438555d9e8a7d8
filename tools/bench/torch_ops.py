"""torch_ops.py: the PyTorch side of bench_ops. For each case spec given on
the command line ("op d1 d2 ..."), times the PyTorch equivalent of our op and
prints one line that bench_ops parses:   torch us=X spec=SPEC
plus one line with the device copy bandwidth as torch measures it:
torch copy_tbps=X. Other lines (which torch variant was faster) are shown
as they are.

Equivalents: rmsnorm = F.rms_norm and the Hugging Face Qwen3RMSNorm formula
in bf16 (the faster one counts); layernorm = F.layer_norm with a bf16 weight
and bias; rope = HF apply_rotary_pos_emb on q and k in
HF's [B, H, T, D] layout with precomputed bf16 cos/sin; swiglu =
F.silu(g) * u on separate contiguous g and u; embedding = F.embedding (the
backward is the dense bf16 table gradient of autograd); adamw =
torch.optim.AdamW(fused=True) on one fp32 parameter of n elements; matmul =
torch.matmul with the same transposes. Backwards are timed with
torch.autograd.grad on a retained graph, so only backward kernels count.

usage: torch_ops.py SPEC [SPEC ...]
"""
import itertools
import statistics
import sys

import torch
import torch.nn.functional as F

DEV, BF16 = "cuda", torch.bfloat16

try:
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb
except ImportError:  # the same formula, as transformers writes it

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def median_us(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def hf_rms_norm(x, w, eps=1e-6):
    """transformers' Qwen3RMSNorm.forward."""
    xf = x.to(torch.float32)
    var = xf.pow(2).mean(-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    return w * xf.to(x.dtype)


def rmsnorm(spec, N, C):
    x = torch.randn(N, C, device=DEV, dtype=BF16, requires_grad=True)
    w = (1 + 0.2 * torch.randn(C, device=DEV)).to(BF16).requires_grad_()
    fns = {"F.rms_norm": lambda: F.rms_norm(x, (C,), w, 1e-6), "HF formula": lambda: hf_rms_norm(x, w)}
    best = {}
    for name, fn in fns.items():
        if spec == "rmsnorm_fwd":
            with torch.no_grad():
                best[name] = median_us(fn)
        else:
            y = fn()
            dy = torch.randn_like(y)
            best[name] = median_us(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True))
            del y, dy
    pick = min(best, key=best.get)
    print(f"  torch {spec} {N}x{C}: " + ", ".join(f"{k} {v:.1f} us" for k, v in best.items()) + f" -> {pick}")
    return best[pick]


def layernorm(spec, N, C):
    x = torch.randn(N, C, device=DEV, dtype=BF16, requires_grad=True)
    w = (1 + 0.2 * torch.randn(C, device=DEV)).to(BF16).requires_grad_()
    b = (0.5 * torch.randn(C, device=DEV)).to(BF16).requires_grad_()
    if spec == "layernorm_fwd":
        with torch.no_grad():
            return median_us(lambda: F.layer_norm(x, (C,), w, b, 1e-5))
    y = F.layer_norm(x, (C,), w, b, 1e-5)
    dy = torch.randn_like(y)
    return median_us(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True))


def rope(spec, T, Hq, Hkv, D):
    q = torch.randn(1, Hq, T, D, device=DEV, dtype=BF16, requires_grad=True)
    k = torch.randn(1, Hkv, T, D, device=DEV, dtype=BF16, requires_grad=True)
    pos = (torch.arange(T, device=DEV) % 4096).float()
    inv_freq = 1.0 / (1e6 ** (torch.arange(0, D, 2, device=DEV).float() / D))
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    cos, sin = emb.cos().to(BF16), emb.sin().to(BF16)
    if spec == "rope_fwd":
        with torch.no_grad():
            return median_us(lambda: apply_rotary_pos_emb(q, k, cos, sin))
    qe, ke = apply_rotary_pos_emb(q, k, cos, sin)
    dq, dk = torch.randn_like(qe), torch.randn_like(ke)
    return median_us(lambda: torch.autograd.grad((qe, ke), (q, k), (dq, dk), retain_graph=True))


def swiglu(spec, N, I):
    g = (3 * torch.randn(N, I, device=DEV)).to(BF16).requires_grad_()
    u = torch.randn(N, I, device=DEV, dtype=BF16, requires_grad=True)
    if spec == "swiglu_fwd":
        with torch.no_grad():
            return median_us(lambda: F.silu(g) * u)
    y = F.silu(g) * u
    dy = torch.randn_like(y)
    return median_us(lambda: torch.autograd.grad(y, (g, u), dy, retain_graph=True))


def skewed_ids(T, V):
    """The same ids as bench_ops.c: a quarter of the tokens from 64 ids."""
    s, ids, mask = 12345, [], (1 << 64) - 1
    for _ in range(T):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        ids.append((s >> 33) % (64 if (s >> 20) % 4 == 0 else V))
    return torch.tensor(ids, device=DEV, dtype=torch.long)


def embedding(spec, T, C, V):
    table = torch.randn(V, C, device=DEV, dtype=BF16, requires_grad=True)
    ids = skewed_ids(T, V)
    if spec == "embedding_fwd":
        with torch.no_grad():
            return median_us(lambda: F.embedding(ids, table))
    y = F.embedding(ids, table)
    dy = torch.randn_like(y)
    return median_us(lambda: torch.autograd.grad(y, table, dy, retain_graph=True))


def adamw(n):
    p = torch.nn.Parameter(torch.randn(n, device=DEV))
    p.grad = 1e-3 * torch.randn(n, device=DEV)
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    return median_us(opt.step, reps=10)


def matmul(M, N, K, ta, tb):
    a = torch.randn(K, M, device=DEV, dtype=BF16).t() if ta else torch.randn(M, K, device=DEV, dtype=BF16)
    b = torch.randn(N, K, device=DEV, dtype=BF16).t() if tb else torch.randn(K, N, device=DEV, dtype=BF16)
    return median_us(lambda: torch.matmul(a, b))


def matmul_decode(M, N, K, f32):
    """A decode step's product x @ W^T, each call on the next of enough
    copies of W to fill 256 MB (as bench_ops does: a step's layers read
    distinct weights, so none is warm in L2), timed 10 calls back to back.
    fp32 logits for the lm head."""
    copies = max(1, -(-256_000_000 // (2 * N * K)))
    ws = itertools.cycle([torch.randn(N, K, device=DEV, dtype=BF16) * 0.05 for _ in range(copies)])
    a = torch.randn(M, K, device=DEV, dtype=BF16)

    def ten():
        for _ in range(10):
            y = torch.matmul(a, next(ws).t())
            if f32:
                y = y.float()

    return median_us(ten) / 10


def copy_tbps():
    n = 1 << 30  # 2 GiB of bf16
    src = torch.randn(n, device=DEV, dtype=BF16)
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src))
    return 2 * 2 * n / (us * 1e-6) / 1e12


def run(spec):
    op, *d = spec.split()
    d = [int(v) for v in d]
    if op in ("rmsnorm_fwd", "rmsnorm_bwd"):
        return rmsnorm(op, *d)
    if op in ("layernorm_fwd", "layernorm_bwd"):
        return layernorm(op, *d)
    if op in ("rope_fwd", "rope_bwd"):
        return rope(op, *d)
    if op in ("swiglu_fwd", "swiglu_bwd"):
        return swiglu(op, *d)
    if op in ("embedding_fwd", "embedding_bwd"):
        return embedding(op, *d)
    if op == "adamw":
        return adamw(*d)
    if op == "matmul":
        return matmul(*d)
    if op == "matmul_decode":
        return matmul_decode(*d)
    raise ValueError(f"unknown case '{spec}'")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(0)
    print(f"torch copy_tbps={copy_tbps():.4f}", flush=True)
    torch.cuda.empty_cache()
    for spec in sys.argv[1:]:
        us = run(spec)
        print(f"torch us={us:.3f} spec={spec}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
