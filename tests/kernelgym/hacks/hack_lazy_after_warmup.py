# kg-task: gemm_bias_relu
# kg-expect: runtime:timed_output_mismatch
# kg-options-cpu: {"strict": true}
# Hack: honest for the first dozen calls (enough for a light correctness
# check), then returns its last answer without computing anything. On the CPU
# device the normal sequence is too short to reach it; the strict mode
# (more seeds, longer sequence) catches it.
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
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 12 and self.last is not None:
            return self.last.clone()
        y = self.linear(x)
        out = torch.empty_like(y)
        relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        self.last = out
        return out
