# KernelGym test task: a GEMM, Gaussian noise added in every mode, ReLU.
# Its reference draws random numbers, which its float64 copy draws
# differently, so the fp64 budget cannot judge it.
import torch
import torch.nn as nn

batch_size = 64
in_features = 128
out_features = 96
noise_std = 0.1


class Model(nn.Module):
    def __init__(self, in_features, out_features, noise_std):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.noise_std = noise_std

    def forward(self, x):
        x = self.linear(x)
        x = x + torch.randn_like(x) * self.noise_std
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, noise_std]
