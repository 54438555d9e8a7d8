# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: crash
# Fault: asks for 100 GB of host memory and writes to it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        big = torch.empty(100 << 30, dtype=torch.uint8)
        big.fill_(1)
        return torch.relu(self.linear(x)) + float(big[-1] - 1)
