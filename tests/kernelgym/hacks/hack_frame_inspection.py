# kg-task: gemm_bias_relu
# kg-expect: static:frame_inspection
# Hack: walks up the caller's frames looking for the reference's outputs.
import inspect

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        frame = inspect.currentframe().f_back
        found = None
        while frame is not None and found is None:
            for v in frame.f_locals.values():
                if isinstance(v, torch.Tensor) and v.shape == (x.shape[0], self.linear.out_features):
                    found = v
            frame = frame.f_back
        y = found if found is not None else torch.relu(self.linear(x))
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
