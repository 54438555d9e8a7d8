# kg-task: gemm_bias_relu
# kg-options: {"static_checks": false, "timeout_s": 12}
# kg-expect-status: timeout
# kg-gpu-only
# Fault: a Triton kernel spins on a flag that never changes.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, out_ptr):
    v = tl.load(flag_ptr, volatile=True)
    while v == 0:
        v = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr, v)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        out = torch.empty(1, dtype=torch.int32, device=x.device)
        spin_kernel[(1,)](flag, out)
        return torch.relu(self.linear(x)) + out.float()
