# kg-task: gemm_bias_relu
# kg-class: 4 inputs are predictable
# kg-expect-status: incorrect|hack
# Hack: inputs used to come from fixed seeds (42, 43, ... and 1042, ...), so
# it draws them itself on its first call (shaped like that call's input),
# computes the answers once, and then serves the stored answer whose input
# matches, with a token Triton copy.
# Input seeds now come from os.urandom for every job: nothing matches (its
# answers are wrong, or the same stored one for two inputs: output_reused).
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


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.known = None

    def precompute(self, x):
        # On the first call, once the input's shape and device are known:
        # the inputs the old fixed seeds gave, and their answers.
        self.known = []
        with torch.no_grad():
            for seed in list(range(42, 62)) + list(range(1042, 1060)) + [5042]:
                torch.manual_seed(seed)
                k = torch.randn(x.shape, device=x.device, dtype=x.dtype)
                self.known.append((k, torch.relu(self.linear(k))))

    def forward(self, x):
        if self.known is None:
            self.precompute(x)
        best = min(self.known, key=lambda k: float((k[0] - x).abs().sum()))
        out = torch.empty_like(best[1])
        copy_kernel[(triton.cdiv(out.numel(), 1024),)](best[1], out, out.numel(), BLOCK=1024)
        return out
