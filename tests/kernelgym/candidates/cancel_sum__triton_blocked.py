# kg-task: cancel_sum
# Honest candidate: one Triton program per row, 256 fp32 lanes each summing
# every 256th element, then a tree sum of the lanes: another summation order
# than torch.sum's, outside atol = rtol = 1e-4 of the fp32 reference on this
# ill-conditioned task, but as close to the exact sums as the reference is.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, cols, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty((rows, 1), device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, y, cols, BLOCK=256)
        return y
