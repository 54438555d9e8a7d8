# KernelGym test task (GPU sizes): a mean over the middle dimension of a 3-D tensor.
import torch
import torch.nn as nn

batch_size = 64
length = 512
channels = 1024


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.mean(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, length, channels)]


def get_init_inputs():
    return [1]
