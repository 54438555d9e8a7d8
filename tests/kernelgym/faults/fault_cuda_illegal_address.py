# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: crash
# kg-gpu-only
# Fault: a Triton kernel stores 1 TB past its output (CUDA illegal address).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_store_kernel(out_ptr, offset):
    tl.store(out_ptr + offset, 1.0)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.relu(self.linear(x))
        bad_store_kernel[(1,)](out, 1 << 38)
        return out
