# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false}
# kg-expect-status: compile_error|hack
# kg-needs: filesystem
# Fault: writes a file outside its private directory; the test checks the
# file does not exist afterwards. Where the candidate's /tmp is a private
# tmpfs the write lands there (the job then ends as a hack: no Triton
# kernel ran); elsewhere the read-only file system refuses it.
import torch
import torch.nn as nn

TARGET = "/tmp/kg_fault_escape_probe.txt"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        with open(TARGET, "w") as f:
            f.write("escaped the sandbox\n")
        return torch.relu(self.linear(x))
