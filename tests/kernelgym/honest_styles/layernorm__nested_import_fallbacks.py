# kg-task: layernorm
# Honest, in a style once refused: a chain of import-only try blocks.
# The kernel uses tl.math.rsqrt, so it also runs in the CPU interpreter.
import torch
import torch.nn as nn
import triton
import triton.language as tl

# libdevice moved between Triton releases
try:
    from triton.language.extra.cuda import libdevice
except ImportError:
    try:
        from triton.language.extra import libdevice
    except ImportError:
        from triton.language.math import libdevice


@triton.jit
def ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=m, other=0.0)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(m, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / N
    rstd = tl.math.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=m)
    b = tl.load(b_ptr + cols, mask=m)
    tl.store(y_ptr + row * N + cols, d * rstd * w + b, mask=m)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        ln_kernel[(M,)](x, self.norm.weight, self.norm.bias, y, N, self.norm.eps, BLOCK=triton.next_power_of_2(N))
        return y
