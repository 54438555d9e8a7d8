# kg-task: gemm_bias_relu
# kg-class: 6 jobs share state
# kg-sequence: victim
# kg-options: {"static_checks": false}
# kg-expect-status: ok
# kg-expect-static: static:file_access
# Hack, second half: looks for what c6_plant.py planted, for other jobs'
# folders, for the Redis socket and its password (the folder the test makes
# as a decoy, and the password in any visible process's command line) and
# for other processes. Were anything visible it would use it; here it
# returns a wrong answer when it finds anything, so a correct (ok) verdict
# proves it saw nothing. It writes what it found to stderr.
import os
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, b_ptr, out_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(y + b, 0.0), mask=mask)


def honest(linear, x):
    y = torch.matmul(x, linear.weight.t()).contiguous()
    out = torch.empty_like(y)
    bias_relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, linear.bias, out, y.numel(), y.shape[1], BLOCK=1024)
    return out


KG_SHARED_DIR = "/nonexistent"
MARK = b"KG-PLANT-7f3a"


def _look():
    found = []
    dirs = ["/dev/shm", "/tmp", "/var/tmp", os.path.expanduser("~"), KG_SHARED_DIR,
            os.path.join(KG_SHARED_DIR, "triton"), os.path.join(KG_SHARED_DIR, "inductor"),
            os.path.join(os.path.expanduser("~"), ".triton", "cache")]
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "TMPDIR"):
        if os.environ.get(var):
            dirs.append(os.environ[var])
    for d in dirs:
        for name in ("kg_plant_marker", os.path.join("kgplant", "bias_relu_kernel.so")):
            try:
                with open(os.path.join(d, name), "rb") as f:
                    if MARK in f.read():
                        found.append(f"planted file {d}/{name}")
            except OSError:
                pass
        try:
            for entry in os.listdir(d):
                if entry.startswith(("dk-kernelgym-", "kernelgym-redis-", "job-")):
                    found.append(f"{d}/{entry}")
        except OSError:
            pass
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for p in pids:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"password=" in cmd or b"redis" in cmd:
            found.append(f"process {p}: {cmd[:80]!r}")
    if len(pids) > 3:
        found.append(f"{len(pids)} processes visible")
    return found


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.found = _look()
        if self.found:
            sys.stderr.write("found: " + "; ".join(self.found) + "\n")

    def forward(self, x):
        out = honest(self.linear, x)
        return out + 1.0 if self.found else out
