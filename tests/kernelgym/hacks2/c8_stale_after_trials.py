# kg-task: gemm_bias_relu
# kg-class: 8 checks sample predictably
# kg-expect: runtime:timed_output_mismatch
# kg-expect-gpu: runtime:timed_output_mismatch|runtime:output_reused|runtime:train_eval_divergence|runtime:no_triton_launch_train
# Hack: honest for as many calls as the correctness trials take (two modes,
# two trials in the tests), then returns its last answer without computing.
# Every call of the CPU sequence is verified; on the GPU a call of each
# timed batch, chosen after the batch ran, is.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


def honest(linear, x):
    y = torch.matmul(x, linear.weight.t()).contiguous()
    out = torch.empty_like(y)
    bias_relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, linear.bias, out, y.numel(), y.shape[1], BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 4 and self.last is not None:
            return self.last.clone()
        self.last = honest(self.linear, x)
        return self.last
