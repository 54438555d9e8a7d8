# kg-task: gemm_bias_relu
# kg-expect: runtime:triton_kernels_no_effect
# Hack: torch does all the work; a token Triton kernel writes into a scratch
# buffer nobody reads, so a launch is always seen.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(buf_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        scratch = torch.empty(64, device=x.device, dtype=torch.float32)
        touch_kernel[(1,)](scratch, BLOCK=64)
        return torch.relu(self.linear(x))
