# KernelGym test task: row sums of 8192 alternating-sign terms near 100, so
# the sums (tens) are tiny next to the partial sums (hundreds of thousands):
# fp32 rounding of any summation order errs by about 1e-2 here, far outside
# atol = rtol = 1e-4. Candidates are judged against an fp64 evaluation of
# this model (env/harness/error_budget.py).
import torch
import torch.nn as nn

rows = 8
cols = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    sign = torch.ones(cols)
    sign[1::2] = -1.0
    return [(100.0 + torch.randn(rows, cols)) * sign]


def get_init_inputs():
    return []
