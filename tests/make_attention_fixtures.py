"""make_attention_fixtures.py: PyTorch references for the CPU attention op
(kernels/attention_cpu.c), written to tests/fixtures/attention/ and read by
tests/unit/test_attention_cpu.c.

Each case is one .safetensors file holding the fp32 inputs (q, k, v, dout,
cu_seqlens, scale) and the expected outputs (out, lse, dq, dk, dv). The
expected values come from torch.nn.functional.scaled_dot_product_attention
with is_causal=True applied to each packed sequence separately, GQA expressed
by repeat_interleave of k and v over the query heads, and torch autograd for
the gradients, all in float64 so the fp32 op is measured against the exact
answer rather than against another fp32 rounding. Tokens after the last
sequence (padding) get zero outputs, lse 0 and zero gradients, as ops.h's CPU
op defines.

Run: .venv/bin/python tests/make_attention_fixtures.py
"""

import math
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "attention")

# name, sequence lengths, padding tokens at the end, Hq, Hkv, D, scale (None = 1/sqrt(D))
CASES = [
    ("d16_h4_kv4", [1, 7, 16, 3], 0, 4, 4, 16, None),
    ("d16_h4_kv2", [5, 1, 20], 0, 4, 2, 16, None),
    ("d64_h4_kv1", [12, 1, 19], 0, 4, 1, 64, None),
    ("d64_h2_kv2_single", [1], 0, 2, 2, 64, None),
    ("d16_h2_kv1_long", [70, 1, 3], 0, 2, 1, 16, 0.3),  # crosses the 64-row query block
    ("d16_h2_kv1_pad", [4, 9], 3, 2, 1, 16, None),      # padding tokens after the last sequence
]


def reference(q, k, v, dout, seqlens, pad, scale):
    """Float64 forward and backward of packed causal GQA attention."""
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    q = q.double().requires_grad_(True)
    k = k.double().requires_grad_(True)
    v = v.double().requires_grad_(True)
    outs, lses = [], []
    off = 0
    for L in seqlens:
        # [L, H, D] -> [H, L, D]; each query head gets its group's k/v.
        qs = q[off:off + L].transpose(0, 1)
        ks = k[off:off + L].transpose(0, 1).repeat_interleave(Hq // Hkv, dim=0)
        vs = v[off:off + L].transpose(0, 1).repeat_interleave(Hq // Hkv, dim=0)
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        outs.append(o.transpose(0, 1))
        s = (qs @ ks.transpose(1, 2)) * scale
        mask = torch.ones(L, L, dtype=torch.bool).tril()
        lses.append(torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1))  # [H, L]
        off += L
    outs.append(torch.zeros(pad, Hq, D, dtype=torch.float64))
    lses.append(torch.zeros(Hq, pad, dtype=torch.float64))
    out = torch.cat(outs, dim=0)
    lse = torch.cat(lses, dim=1)
    (out * dout.double()).sum().backward()
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def make_case(gen, name, seqlens, pad, Hq, Hkv, D, scale):
    T = sum(seqlens) + pad
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    q = torch.randn(T, Hq, D, generator=gen)
    k = torch.randn(T, Hkv, D, generator=gen)
    v = torch.randn(T, Hkv, D, generator=gen)
    dout = torch.randn(T, Hq, D, generator=gen)
    out, lse, dq, dk, dv = reference(q, k, v, dout, seqlens, pad, scale)
    cu = torch.tensor([0] + list(torch.tensor(seqlens).cumsum(0)), dtype=torch.int32)
    tensors = {
        "q": q, "k": k, "v": v, "dout": dout, "cu_seqlens": cu,
        "scale": torch.tensor([scale], dtype=torch.float32),
        "out": out.float(), "lse": lse.float(), "dq": dq.float(), "dk": dk.float(), "dv": dv.float(),
    }
    path = os.path.join(OUT_DIR, name + ".safetensors")
    save_file({n: t.contiguous() for n, t in tensors.items()}, path)
    print(f"{path}: T={T} seqs={seqlens} pad={pad} Hq={Hq} Hkv={Hkv} D={D} scale={scale:.4f}")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    for case in CASES:
        make_case(gen, *case)


if __name__ == "__main__":
    main()
