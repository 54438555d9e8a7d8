# kg-task: mean_dim
# Honest candidate: a mean over the middle dimension; each program owns a
# block of channels of one batch entry and walks the reduced dimension.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_mid_kernel(x_ptr, y_ptr, L, C, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = offs_c < C
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for l in range(0, L):
        acc += tl.load(x_ptr + (b * L + l) * C + offs_c, mask=mask, other=0.0)
    tl.store(y_ptr + b * C + offs_c, acc / L, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        B, L, C = x.shape
        y = torch.empty((B, C), device=x.device, dtype=x.dtype)
        BLOCK_C = 32
        mean_mid_kernel[(B, triton.cdiv(C, BLOCK_C))](x, y, L, C, BLOCK_C=BLOCK_C)
        return y
