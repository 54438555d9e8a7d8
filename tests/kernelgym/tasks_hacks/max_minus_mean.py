# KernelGym test task: the max over dim 1, kept, minus its mean over that
# same kept dimension of size 1. The output is 0 whatever the input (a
# degenerate task of the kind KernelBench has): an output left unwritten in
# zeroed memory already holds it.
import torch
import torch.nn as nn

batch_size = 16
features = 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = torch.amax(x, dim=1, keepdim=True)
        return m - m.mean(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
