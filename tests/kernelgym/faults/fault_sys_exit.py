# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: crash
# Fault: raises SystemExit from forward.
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        sys.exit(0)
