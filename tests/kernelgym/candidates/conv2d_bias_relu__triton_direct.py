# kg-task: conv2d_bias_relu
# Honest candidate: a direct convolution in Triton. Each program computes a
# block of output pixels for all output channels of one image, accumulating
# the outer product of an input column and a weight row per (c_in, kh, kw),
# then adds the bias and applies ReLU.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C_in, H, W, C_out, OH, OW,
                          KS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    n = tl.program_id(0)
    pid_p = tl.program_id(1)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.arange(0, BLOCK_C)
    mask_p = offs_p < OH * OW
    mask_c = offs_c < C_out
    oh = offs_p // OW
    ow = offs_p % OW
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for ci in range(0, C_in):
        for kh in tl.static_range(KS):
            for kw in tl.static_range(KS):
                xv = tl.load(x_ptr + ((n * C_in + ci) * H + oh + kh) * W + ow + kw, mask=mask_p, other=0.0)
                wv = tl.load(w_ptr + ((offs_c * C_in + ci) * KS + kh) * KS + kw, mask=mask_c, other=0.0)
                acc += xv[:, None] * wv[None, :]
    b = tl.load(b_ptr + offs_c, mask=mask_c, other=0.0)
    acc = tl.maximum(acc + b[None, :], 0.0)
    tl.store(y_ptr + (n * C_out + offs_c[None, :]) * (OH * OW) + offs_p[:, None], acc,
             mask=mask_p[:, None] & mask_c[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        x = x.contiguous()
        Nb, C_in, H, W = x.shape
        w = self.conv.weight.contiguous()
        C_out, _, KS, _ = w.shape
        OH, OW = H - KS + 1, W - KS + 1
        y = torch.empty((Nb, C_out, OH, OW), device=x.device, dtype=x.dtype)
        BLOCK_P = 128
        BLOCK_C = triton.next_power_of_2(C_out)
        grid = (Nb, triton.cdiv(OH * OW, BLOCK_P))
        conv_bias_relu_kernel[grid](x, w, self.bias, y, C_in, H, W, C_out, OH, OW,
                                    KS=KS, BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C)
        return y
