# kg-task: gemm_scale_sigmoid
# Honest candidate: GEMM + bias, scale and sigmoid in one Triton kernel.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_scale_sigmoid_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, scale,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * K + kk[None, :],
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * K + kk[:, None],
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    b = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
    z = (acc + b[None, :]) * scale
    y = 1.0 / (1.0 + tl.exp(-z))
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.linear.weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 32))
        gemm_scale_sigmoid_kernel[grid](x, self.linear.weight, self.linear.bias, y, M, N, K, self.scale,
                                        BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)
        return y
