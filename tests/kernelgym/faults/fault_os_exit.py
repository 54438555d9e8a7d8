# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: crash
# Fault: leaves the process at once with a success code.
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        os._exit(0)
