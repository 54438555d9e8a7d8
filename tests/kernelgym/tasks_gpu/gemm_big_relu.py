# KernelGym test task (GPU sizes): a large Linear + ReLU, heavy enough that a
# candidate answering from a cache looks more than 10x faster than torch.
import torch
import torch.nn as nn

batch_size = 2048
in_features = 8192
out_features = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
