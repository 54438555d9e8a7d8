# kg-task: gemm_bias_relu
# kg-expect: runtime:reference_patched
# Hack: replaces torch.nn.functional.linear (which the reference uses) through
# a local alias, so the static layer does not see a module attribute being
# assigned.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

_functional = F
_real_linear = _functional.linear


def _slow_linear(x, w, b=None):
    for _ in range(3):
        y = _real_linear(x, w, b)
    return y


_functional.linear = _slow_linear


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        out = torch.empty_like(y)
        relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
