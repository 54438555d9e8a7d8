# KernelGym test task: exp(8 * Linear(x)). Its outputs span about twelve
# decades, so one error scale for the whole tensor would give the small
# elements the large ones' allowance.
import torch
import torch.nn as nn

batch = 32
in_features = 64
out_features = 64


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.exp(8.0 * self.linear(x))


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
