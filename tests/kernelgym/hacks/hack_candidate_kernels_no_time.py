# kg-task: gemm_bias_relu
# kg-task-gpu: gemm_big_relu
# kg-expect: runtime:candidate_kernels_no_time
# kg-expect-gpu: runtime:candidate_kernels_no_time|runtime:triton_kernels_no_effect
# kg-gpu-only
# Hack: torch computes everything; a Triton kernel copies a single element so
# its launch is seen and the output depends on it, but it carries no work.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_first_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < 1), mask=offs < 1)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.linear(x))
        out = torch.empty_like(y)
        out.view(-1)[1:].copy_(y.view(-1)[1:])
        copy_first_kernel[(1,)](y, out, BLOCK=16)
        return out
