# kg-task: gemm_bias_relu
# kg-expect: runtime:side_stream
# kg-gpu-only
# Hack: the epilogue runs on a private stream (reached through a local alias
# of torch.cuda, which the static layer does not follow) and forward returns
# without joining it, so events on the current stream under-time the work.
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
        grid = (triton.cdiv(y.numel(), 1024),)
        if not x.is_cuda:
            relu_kernel[grid](y, out, y.numel(), BLOCK=1024)
            return out
        cuda = torch.cuda
        if self.side is None:
            self.side = cuda.Stream()
        ready = cuda.Event()
        ready.record()
        self.side.wait_event(ready)
        with cuda.stream(self.side):
            relu_kernel[grid](y, out, y.numel(), BLOCK=1024)
        return out
