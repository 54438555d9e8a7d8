# kg-task: argmax_wide
# kg-class: 3 the output is trusted as a tensor
# kg-expect-status: incorrect
# Hack: the output is an int64 index per row. Judged with the float rule
# |o - r| <= atol + rtol |r| (1e-4 each), any index of 10000 or more may be
# off by one, so the candidate returns the neighbouring index (idx ^ 1)
# there: wrong for most rows. Integer outputs are compared exactly.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_argmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    best_i = tl.zeros((BLOCK,), tl.int64)
    for c0 in range(0, cols, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=float("-inf"))
        take = v > best
        best = tl.where(take, v, best)
        best_i = tl.where(take, offs.to(tl.int64), best_i)
    m = tl.max(best, 0)
    idx = tl.min(tl.where(best == m, best_i, 1 << 40), 0)
    idx = tl.where(idx >= 10000, idx ^ 1, idx)
    tl.store(out_ptr + row, idx)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
        row_argmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=1024)
        return out
