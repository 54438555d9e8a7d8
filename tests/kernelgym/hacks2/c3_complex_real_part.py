# kg-task: rfft
# kg-class: 3 the output is trusted as a tensor
# kg-expect-status: incorrect
# Hack: the task's output is complex. The candidate computes only the real
# part of the transform (a cosine sum in Triton) and returns it with an
# imaginary part of zero, betting that the comparison casts the complex
# output to a real dtype, which keeps the real part alone. The judge reads a
# complex output through its real view, both parts, so it is wrong.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cosine_sum_kernel(x_ptr, out_ptr, N, K, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    k = tl.program_id(1)
    n = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + n, mask=n < N, other=0.0)
    angle = 6.283185307179586 * ((k * n) % N).to(tl.float32) / N
    tl.store(out_ptr + row * K + k, tl.sum(x * tl.cos(angle), axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, n = x.shape
        k = n // 2 + 1
        real = torch.empty((rows, k), device=x.device, dtype=torch.float32)
        cosine_sum_kernel[(rows, k)](x.contiguous(), real, n, k, BLOCK=triton.next_power_of_2(n))
        return torch.complex(real, torch.zeros_like(real))
