# kg-task: conv2d_bias_relu
# Honest partial candidate: the convolution stays in torch; the per-channel
# bias and the ReLU are fused into one Triton kernel over the NCHW output.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def channel_bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, hw, channels, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = (offs // hw) % channels
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + c, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        BLOCK = 1024
        channel_bias_relu_kernel[(triton.cdiv(n, BLOCK),)](y, self.bias, out, n, y.shape[2] * y.shape[3],
                                                           y.shape[1], BLOCK=BLOCK)
        return out
