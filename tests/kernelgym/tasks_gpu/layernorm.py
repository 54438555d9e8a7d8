# KernelGym test task (GPU sizes): LayerNorm over the last dimension with learned scale
# and shift.
import torch
import torch.nn as nn

rows = 8192
features = 2048


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(rows, features) * 2.0 + 1.0]


def get_init_inputs():
    return [features]
