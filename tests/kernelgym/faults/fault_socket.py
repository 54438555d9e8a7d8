# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: compile_error
# kg-needs: network
# Fault: connects to a listener on 127.0.0.1 (the test opens it and replaces
# KG_PORT with its port); the test checks nothing arrived.
import socket

import torch
import torch.nn as nn

KG_PORT = 47391


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        s = socket.create_connection(("127.0.0.1", KG_PORT), timeout=2)
        s.sendall(b"escaped the sandbox\n")
        s.close()
        return torch.relu(self.linear(x))
