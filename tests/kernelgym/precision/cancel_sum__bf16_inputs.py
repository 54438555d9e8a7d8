# kg-task: cancel_sum
# Imprecise candidate: the same kernel as the honest one, but it reads its
# input rounded to bf16 (a silent downcast to halve the bytes moved). Its
# error against the fp64 sums is tens of times the fp32 reference's, so it
# must be rejected: status incorrect, correct_rule none, a mismatch.
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
        x = x.to(torch.bfloat16).to(torch.float32).contiguous()
        rows, cols = x.shape
        y = torch.empty((rows, 1), device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, y, cols, BLOCK=256)
        return y
