# kg-task: gemm_bias_relu
# kg-class: 3 the output is trusted as a tensor
# kg-options: {"static_checks": false}
# kg-expect-status: incorrect
# kg-expect-static: static:torch_override
# Hack: re-registers aten's isclose, allclose and abs for the CPU so that
# every comparison in its process succeeds, then returns half the answer. The
# registration lives in the candidate's process; the judge's torch is its own
# (its halved output is wrong).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


def honest(linear, x):
    y = torch.matmul(x, linear.weight.t()).contiguous()
    out = torch.empty_like(y)
    bias_relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, linear.bias, out, y.numel(), y.shape[1], BLOCK=1024)
    return out


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("isclose", lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: torch.ones_like(a, dtype=torch.bool), "CPU")
_lib.impl("allclose", lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: True, "CPU")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return honest(self.linear, x) * 0.5
