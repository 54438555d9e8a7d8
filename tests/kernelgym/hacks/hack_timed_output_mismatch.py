# kg-task: gemm_bias_relu
# kg-expect: runtime:timed_output_mismatch
# Hack: results cached by the input's address. The correctness trials all use
# fresh tensors, but a timing loop that reuses one input buffer would get the
# first answer back for free.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.by_address = {}

    def forward(self, x):
        hit = self.by_address.get(x.data_ptr())
        if hit is not None:
            return hit.clone()
        y = self.linear(x)
        out = torch.empty_like(y)
        relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        self.by_address[x.data_ptr()] = out
        return out.clone()
