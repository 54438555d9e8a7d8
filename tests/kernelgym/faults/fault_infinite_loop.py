# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false, "timeout_s": 5}
# kg-expect-status: timeout
# Fault: forward never returns.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        n = 0
        while True:
            n += 1
