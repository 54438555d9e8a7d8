# kg-task: gemm_bias_relu
# Honest, in a style once refused: the output is a view of a buffer padded to
# the block size (strides with holes).
# Output allocated with N padded to a multiple of the block so the store needs
# no column mask; the valid columns are returned as a view.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def padded_linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, ldy,
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
    acc = tl.maximum(acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * ldy + rn[None, :], acc, mask=rm[:, None] < M)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.linear.out_features
        BLOCK_N = 32
        n_pad = triton.cdiv(N, BLOCK_N) * BLOCK_N
        y = torch.empty((M, n_pad), device=x.device, dtype=x.dtype)
        padded_linear_relu_kernel[(triton.cdiv(M, 32), n_pad // BLOCK_N)](
            x, self.linear.weight, self.linear.bias, y, M, N, K, n_pad, BLOCK_M=32, BLOCK_N=BLOCK_N, BLOCK_K=32)
        return y[:, :N]
