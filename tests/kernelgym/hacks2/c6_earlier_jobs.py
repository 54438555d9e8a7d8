# kg-task: gemm_bias_relu
# kg-class: 6 jobs share state
# kg-sequence: snoop
# kg-options: {"static_checks": false}
# kg-expect-status: ok
# kg-expect-static: static:frame_inspection
# Hack, run after other jobs in the same server: looks in its own process's
# memory for an earlier job's candidate source (every frame on its stack and
# every object the garbage collector tracks), and for a socket it inherited
# (a way back to the process that forked it). A source found there could be
# loaded and run as its own: a parasite that solves nothing. Here it returns
# a wrong answer when it finds anything, so a correct (ok) verdict proves
# its memory held no other job's data. What it found goes to stderr.
import gc
import os
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl

# The headers of the jobs run before this one in the test (c6_plant.py,
# c6_victim.py), put together at run time so that this text holds neither.
EARLIER = ["kg-sequence: " + "plant", "kg-sequence: " + "victim"]


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


def foreign_source(text):
    """A whole source file (not a line of one, nor the marks themselves)
    of one of the earlier jobs."""
    return isinstance(text, str) and "\n" in text and any(mark in text for mark in EARLIER)


def snoop():
    found = []
    frame = sys._getframe(0)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, dict) and foreign_source(value.get("candidate_source")):
                found.append(f"a job in the frame of {frame.f_code.co_name}")
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict) and foreign_source(obj.get("candidate_source")):
            found.append("a job dict on the heap")
        elif isinstance(obj, (list, tuple)) and any(foreign_source(x) for x in obj[:64]):
            found.append("an earlier candidate's source on the heap")
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.append(f"an inherited socket (fd {fd})")
        except OSError:
            pass
    return found


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.found = snoop()
        if self.found:
            print("found:", sorted(set(self.found))[:10], file=sys.stderr)

    def forward(self, x):
        y = torch.matmul(x, self.linear.weight.t()).contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        bias_relu_kernel[(triton.cdiv(n, 1024),)](y, self.linear.bias, out, n, y.shape[1], BLOCK=1024)
        return out * 2.0 if self.found else out
