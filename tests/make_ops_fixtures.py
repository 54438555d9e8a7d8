"""make_ops_fixtures.py: writes the PyTorch reference values that the CPU op
tests (tests/unit/test_ops_*.c) compare against, into tests/fixtures/ops/.

Each op gets one small text file of named fp32 tensors:
    name count
    v0 v1 ... (count values, %.9g, so every float32 round-trips exactly)
Integer tensors (ids, positions) and scalars are stored the same way; they
are small integers or are meant to be read as float32. Inputs come from a
fixed seed, so rerunning the script reproduces the files byte for byte on the
same torch version.

Run: .venv/bin/python tests/make_ops_fixtures.py
"""

import os

import torch
import torch.nn.functional as F
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding, apply_rotary_pos_emb

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ops")


class Fixture:
    def __init__(self, name):
        self.name = name
        self.lines = [f"# {name}: written by tests/make_ops_fixtures.py (torch {torch.__version__})"]

    def add(self, key, value):
        t = torch.as_tensor(value).detach().to(torch.float32).reshape(-1)
        self.lines.append(f"{key} {t.numel()}")
        vals = [f"{float(v):.9g}" for v in t.tolist()]
        for i in range(0, len(vals), 8):
            self.lines.append(" ".join(vals[i : i + 8]))

    def write(self):
        path = os.path.join(OUT, self.name + ".txt")
        with open(path, "w") as f:
            f.write("\n".join(self.lines) + "\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def randn(g, *shape, scale=1.0, offset=0.0):
    return torch.randn(*shape, generator=g, dtype=torch.float32) * scale + offset


def make_matmul(g):
    fx = Fixture("matmul")
    cases = [(7, 5, 3), (13, 17, 11), (1, 9, 33)]
    k = 0
    for M, N, K in cases:
        for ta in (0, 1):
            for tb in (0, 1):
                a = randn(g, *((K, M) if ta else (M, K)))
                b = randn(g, *((N, K) if tb else (K, N)))
                c0 = randn(g, M, N)
                alpha, beta = 0.75, -0.5
                opa = a.t() if ta else a
                opb = b.t() if tb else b
                # Reference in float64, rounded once: the tolerance then
                # measures only the fp32 error of the op under test.
                c = alpha * (opa.double() @ opb.double()) + beta * c0.double()
                fx.add(f"mm{k}.dims", [M, N, K, ta, tb, alpha, beta])
                fx.add(f"mm{k}.a", a)
                fx.add(f"mm{k}.b", b)
                fx.add(f"mm{k}.c0", c0)
                fx.add(f"mm{k}.c", c)
                k += 1
    fx.add("count", [k])
    fx.write()


def make_rmsnorm(g):
    fx = Fixture("rmsnorm")
    for k, (N, C, eps) in enumerate([(5, 37, 1e-6), (9, 8, 1e-5)]):
        x = randn(g, N, C, scale=1.5, offset=0.3)
        w = randn(g, C, scale=0.2, offset=1.0)
        dout = randn(g, N, C)
        norm = Qwen3RMSNorm(C, eps=eps)
        with torch.no_grad():
            norm.weight.copy_(w)
        xr = x.clone().requires_grad_(True)
        out = norm(xr)
        out.backward(dout)
        rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)
        fx.add(f"rms{k}.dims", [N, C, eps])
        fx.add(f"rms{k}.x", x)
        fx.add(f"rms{k}.w", w)
        fx.add(f"rms{k}.dout", dout)
        fx.add(f"rms{k}.out", out)
        fx.add(f"rms{k}.rstd", rstd)
        fx.add(f"rms{k}.dx", xr.grad)
        fx.add(f"rms{k}.dw", norm.weight.grad)
    fx.write()


def make_layernorm(g):
    fx = Fixture("layernorm")
    for k, (N, C, eps, bias) in enumerate([(5, 37, 1e-5, True), (4, 19, 1e-6, False)]):
        x = randn(g, N, C, scale=2.0, offset=3.0)  # a common offset: the variance must not cancel
        w = randn(g, C, scale=0.2, offset=1.0).requires_grad_(True)
        b = randn(g, C, scale=0.5).requires_grad_(True) if bias else None
        dout = randn(g, N, C)
        xr = x.clone().requires_grad_(True)
        out = F.layer_norm(xr, (C,), w, b, eps)
        out.backward(dout)
        mean = x.double().mean(-1)
        rstd = torch.rsqrt(x.double().var(-1, unbiased=False) + eps)
        fx.add(f"ln{k}.dims", [N, C, eps, 1 if bias else 0])
        fx.add(f"ln{k}.x", x)
        fx.add(f"ln{k}.w", w)
        if bias:
            fx.add(f"ln{k}.b", b)
        fx.add(f"ln{k}.dout", dout)
        fx.add(f"ln{k}.out", out)
        fx.add(f"ln{k}.mean", mean)
        fx.add(f"ln{k}.rstd", rstd)
        fx.add(f"ln{k}.dx", xr.grad)
        fx.add(f"ln{k}.dw", w.grad)
        if bias:
            fx.add(f"ln{k}.db", b.grad)
    fx.write()


def make_rope(g):
    """transformers' own Qwen3 rotary embedding and apply_rotary_pos_emb on
    q laid out [1, H, T, D], the layout that function expects."""
    fx = Fixture("rope")
    cases = [
        # two packed sequences (positions restart at 0), small head dim
        (3, 16, 10000.0, [0, 1, 2, 3, 0, 1, 2]),
        # Qwen3's theta and head dim at large positions, where the fp32 angle
        # product dominates the error
        (2, 128, 1000000.0, [0, 1, 17, 1000, 4095, 32767]),
        # Llama's theta with an odd head count
        (5, 64, 500000.0, [5, 300, 2047]),
    ]
    for k, (H, D, theta, pos) in enumerate(cases):
        T = len(pos)
        cfg = Qwen3Config(
            hidden_size=H * D, num_attention_heads=H, num_key_value_heads=H, head_dim=D,
            rope_theta=theta, max_position_embeddings=65536,
        )
        rot = Qwen3RotaryEmbedding(cfg)
        x = randn(g, T, H, D)
        pos_t = torch.tensor(pos, dtype=torch.int64)[None, :]
        cos, sin = rot(x, pos_t)  # [1, T, D]
        q = x.transpose(0, 1)[None]  # [1, H, T, D]
        q_embed, _ = apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=1)
        out = q_embed[0].transpose(0, 1).contiguous()  # back to [T, H, D]
        fx.add(f"rope{k}.dims", [T, H, D, theta])
        fx.add(f"rope{k}.pos", pos)
        fx.add(f"rope{k}.x", x)
        fx.add(f"rope{k}.out", out)
    fx.write()


def make_swiglu(g):
    fx = Fixture("swiglu")
    N, I = 6, 11
    gate = randn(g, N, I, scale=3.0)
    gate[0, :4] = torch.tensor([-90.0, -20.0, 20.0, 0.0])  # saturated and zero gates
    up = randn(g, N, I)
    gu = torch.cat([gate, up], dim=1)
    dout = randn(g, N, I)
    gur = gu.clone().requires_grad_(True)
    out = F.silu(gur[:, :I]) * gur[:, I:]
    out.backward(dout)
    fx.add("dims", [N, I])
    fx.add("gu", gu)
    fx.add("dout", dout)
    fx.add("out", out)
    fx.add("dgu", gur.grad)
    fx.write()


def make_embedding(g):
    fx = Fixture("embedding")
    V, C = 10, 7
    ids = torch.tensor([3, 0, 9, 3, 3, 7, 0, 1, 9, 3, 5, 2], dtype=torch.int64)  # repeated ids
    table = randn(g, V, C).requires_grad_(True)
    dout = randn(g, len(ids), C)
    out = F.embedding(ids, table)
    out.backward(dout)
    fx.add("dims", [len(ids), V, C])
    fx.add("ids", ids)
    fx.add("table", table)
    fx.add("dout", dout)
    fx.add("out", out)
    fx.add("dtable", table.grad)
    fx.write()


def make_adamw(g):
    """torch.optim.AdamW over several steps; the op is given the raw gradient
    and grad_scale, torch the already scaled gradient (one fp32 product)."""
    fx = Fixture("adamw")
    n, steps = 23, 6
    lr, betas, eps, wd, grad_scale = 1e-2, (0.9, 0.95), 1e-8, 0.1, 0.37
    p = torch.nn.Parameter(randn(g, n))
    fx.add("dims", [n, steps, lr, betas[0], betas[1], eps, wd, grad_scale])
    fx.add("p0", p.detach())
    opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
    for s in range(steps):
        raw = randn(g, n, scale=10.0 ** (s % 3 - 1))  # gradients of changing size
        if s == 2:
            raw[:3] = 0.0  # zero gradients: only decay moves these
        raw[-4:] *= 1e-8  # gradients near eps: its placement matters here
        p.grad = raw * grad_scale
        opt.step()
        fx.add(f"grad{s}", raw)
        fx.add(f"p{s + 1}", p.detach())
    st = opt.state[p]
    fx.add("m", st["exp_avg"])
    fx.add("v", st["exp_avg_sq"])
    fx.write()


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    torch.set_num_threads(1)
    make_matmul(g)
    make_rmsnorm(g)
    make_layernorm(g)
    make_rope(g)
    make_swiglu(g)
    make_embedding(g)
    make_adamw(g)


if __name__ == "__main__":
    main()
