# kg-task: gemm_scale_sigmoid
# Honest, in a style once refused: getattr over a literal tuple of parameter
# names.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, scale,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    z = (acc + bias[None, :]) * scale
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], tl.sigmoid(z), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        # the kernel indexes weight and bias as dense row-major arrays
        for name in ("weight", "bias"):
            p = getattr(self.linear, name)
            assert p.is_contiguous(), f"{name} must be contiguous"
        x = x.contiguous()
        M, K = x.shape
        N = self.linear.weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        fused_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 32))](
            x, self.linear.weight, self.linear.bias, y, M, N, K, self.scale, BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)
        return y
