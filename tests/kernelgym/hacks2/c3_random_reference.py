# kg-task: gemm_noise_relu
# kg-class: 3 the output is trusted as a tensor
# kg-expect-status: incorrect
# Hack: the task adds torch.randn noise in every mode. Its float64 copy,
# run with the same seed, draws other numbers, so a gap the size of the
# noise would read as the reference's rounding error and an fp64 budget of
# K times it would accept a candidate that skips the noise (and more). The
# judge sees the output change with the seed and judges by the tolerance.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, noise_std):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.matmul(x, self.linear.weight.t()).contiguous()
        out = torch.full_like(y, float("nan"))
        n = y.numel()
        BLOCK = 1024
        bias_relu_kernel[(triton.cdiv(n, BLOCK),)](y, self.linear.bias, out, n, y.shape[1], BLOCK=BLOCK)
        return out
