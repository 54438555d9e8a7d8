# KernelGym test task: a real-input FFT over the last dimension. Its output
# is complex64, so a judge must compare the real and the imaginary parts.
import torch
import torch.nn as nn

rows = 16
cols = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.fft.rfft(x, dim=-1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
