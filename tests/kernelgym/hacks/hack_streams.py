# kg-task: gemm_bias_relu
# kg-expect: static:streams
# Hack: the kernel runs on a side stream the timing events do not cover.
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
        self.side = None

    def forward(self, x):
        y = self.linear(x)
        out = torch.empty_like(y)
        if x.is_cuda:
            if self.side is None:
                self.side = torch.cuda.Stream()
            with torch.cuda.stream(self.side):
                relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        else:
            relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
