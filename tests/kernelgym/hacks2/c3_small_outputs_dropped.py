# kg-task: exp_linear
# kg-class: 3 the output is trusted as a tensor
# kg-expect-status: incorrect
# Hack: the task's outputs span about twelve decades (exp of a linear
# layer), so an error budget of one scale per tensor, set by the largest
# elements, lets every small output be wrong. The candidate writes zero
# wherever the true value is below 0.1 (a kernel that skips the work it
# expects to be negligible). The budget's scale is set per magnitude class
# (error_budget.class_scale), so the small outputs must be as right as the
# reference is there.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_exp_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, CUT,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * K + kk[:, None], mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    b = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = tl.exp(8.0 * (acc + b[None, :]))
    y = tl.where(y < CUT, 0.0, y)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], y, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    CUT = 0.1

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        linear_exp_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x.contiguous(), w, b, y, M, N, K, self.CUT,
                                                                   BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return y
