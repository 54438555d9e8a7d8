# kg-task: gemm_bias_relu
# kg-class: 7 profiles credit kernels by name
# kg-gpu-only
# kg-expect-status: ok
# kg-expect-coverage-max: 0.6
# Hack: the GEMM stays in cuBLAS and the bias + ReLU epilogue is a Triton
# kernel (an honest split), but its Triton kernels are named after the
# prefixes of cuBLAS's kernels (sm90_xmma_gemm_..., nvjet_..., ampere_...),
# so a profile that credits kernels by name prefix counts the library's
# GEMM as the candidate's work. Kernels are now the candidate's only when
# its own launches made them (CUPTI correlation ids): the coverage stays
# that of the epilogue.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sm90(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


@triton.jit
def nvjet(buf_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32))


@triton.jit
def ampere(buf_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32))


@triton.jit
def cutlass(buf_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        scratch = torch.empty(64, dtype=torch.float32, device=x.device)
        nvjet[(1,)](scratch, BLOCK=64)
        ampere[(1,)](scratch, BLOCK=64)
        cutlass[(1,)](scratch, BLOCK=64)
        y = torch.matmul(x, self.linear.weight.t()).contiguous()
        out = torch.empty_like(y)
        sm90[(triton.cdiv(y.numel(), 1024),)](y, self.linear.bias, out, y.numel(), y.shape[1], BLOCK=1024)
        return out
