# KernelGym test task: log(relu(linear(x))). About half of its outputs are
# -inf (the log of 0), which only -inf may match.
import torch
import torch.nn as nn

batch_size = 32
in_features = 64
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.log(torch.relu(self.linear(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
