# kg-task: gemm_scale_sigmoid
# Honest, in a style once refused: TF32 switched off through torch.backends.
# Torch matmul for the GEMM (full fp32: TF32 switched off for accuracy), the
# bias, scale and sigmoid fused in one Triton kernel.
import torch
import torch.nn as nn
import triton
import triton.language as tl

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@triton.jit
def bias_scale_sigmoid_kernel(y_ptr, b_ptr, out_ptr, n, N, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(y_ptr + offs, mask=m, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=m, other=0.0)
    z = (y + b) * scale
    tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-z)), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        y = torch.matmul(x, self.linear.weight.t()).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        bias_scale_sigmoid_kernel[(triton.cdiv(n, 512),)](y, self.linear.bias, out, n, y.shape[1], self.scale,
                                                         BLOCK=512)
        return out
