"""The reference's time per op, for the feedback's bottleneck line
(env/feedback_hint.h reads it as `reference_profile`: [{name, share}]).

One forward of the reference with every aten op it dispatches timed: CUDA
events around each op on the GPU, the host clock on the CPU. A dispatch
mode does it in a few milliseconds; torch.profiler costs seconds to start
in a fresh process, and every job runs in one. The ops timed are the ones
the forward decomposes into (aten::addmm, aten::relu, ...), each counted
once, so shares of their sum add up to 1. It is a hint for where the
reference spends its time, not a measurement the reward depends on: one
warm forward is enough. It is the task's, not the candidate's: the server
keeps the first judge's and hands it to the next judges of the task
(server.Server.keep_clean), which then skip it.
"""

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

TOP = 8


class _OpTimer(TorchDispatchMode):
    def __init__(self, cuda):
        super().__init__()
        self.cuda = cuda
        self.marks = []  # (name, start, end): events on CUDA, seconds on the CPU

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = f"aten::{func.overloadpacket.__name__}"
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = func(*args, **(kwargs or {}))
            end.record()
            self.marks.append((name, start, end))
        else:
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            self.marks.append((name, t0, time.perf_counter()))
        return out

    def times(self):
        if self.cuda:
            torch.cuda.synchronize()
        out = {}
        for name, a, b in self.marks:
            t = a.elapsed_time(b) if self.cuda else (b - a) * 1000.0
            out[name] = out.get(name, 0.0) + t
        return out


def valid_profile(p):
    """True for a profile as op_profile makes it: at most TOP entries, each
    an op name and a share in [0, 1]."""
    return isinstance(p, list) and len(p) <= TOP and all(
        isinstance(e, dict) and set(e) == {"name", "share"} and isinstance(e["name"], str) and len(e["name"]) <= 200
        and isinstance(e["share"], (int, float)) and not isinstance(e["share"], bool) and 0 <= e["share"] <= 1
        for e in p)


def op_profile(forward, device, top=TOP):
    """[{name, share}] of forward() on device, largest share first, at most top."""
    cuda = device.type == "cuda"
    forward()  # warm: first-call allocations and lazy initialisation stay out
    timer = _OpTimer(cuda)
    with timer:
        forward()
    times = timer.times()
    total = sum(times.values())
    if total <= 0:
        return []
    ranked = sorted(times.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [{"name": n, "share": round(t / total, 4)} for n, t in ranked]
