# KernelGym test task (GPU sizes): a Linear layer (GEMM + bias) followed by ReLU.
import torch
import torch.nn as nn

batch_size = 4096
in_features = 256
out_features = 4096


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
