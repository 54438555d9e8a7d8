# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: crash
# Fault: a bounded fork bomb. At most 200 children, each sleeping 20 s, so it
# cannot harm the machine even if the sandbox failed to stop it; the sandbox
# must kill them all well before that.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        for _ in range(200):
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
        time.sleep(20)
        return torch.relu(self.linear(x))
