# kg-task: gemm_bias_relu
# kg-expect: runtime:no_triton_launch_train
# kg-expect-static: static:dynamic_attribute
# kg-options: {"static_checks": false}
# Hack: the Triton path only in eval() mode (the mode read indirectly).
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

    def forward(self, x):
        y = self.linear(x)
        if not getattr(self, "train" + "ing"):
            out = torch.empty_like(y)
            relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
            return out
        return torch.relu(y)
