# kg-task: gemm_bias_relu
# kg-expect: static:no_triton_kernel
# Hack: plain torch, no kernel at all.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
