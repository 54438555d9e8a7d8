# optim_state.py: reads a checkpoint's optimizer files (optim/rank_*.bin,
# version 2, the layout trainer/ckpt_shards.c documents) back into whole
# units, independently of the trainer's loader: the tests compare the fp32
# masters and AdamW moments of runs at different world sizes with it.
import glob
import struct

import numpy as np


def load(ckpt_dir):
    """{'t': step count, 'world': ranks, 'master'/'m'/'v': [unit arrays]}"""
    files = sorted(glob.glob(f"{ckpt_dir}/optim/rank_*.bin"))
    assert files, f"{ckpt_dir}: no optimizer files"
    out = None
    for path in files:
        b = open(path, "rb").read()
        assert b[:8] == b"DKOPTIM\0", f"{path}: bad magic"
        version, world, rank, t = struct.unpack_from("<4I", b, 8)
        (nu,) = struct.unpack_from("<Q", b, 24)
        assert version == 2 and world == len(files), (path, version, world)
        table = [struct.unpack_from("<3Q", b, 32 + 24 * u) for u in range(nu)]
        if out is None:
            out = {"t": t, "world": world}
            for f in ("master", "m", "v"):
                out[f] = [np.full(n, np.nan, np.float32) for n, _, _ in table]
        assert out["t"] == t, f"{path}: step count {t}, rank 0 has {out['t']}"
        pos = 32 + 24 * nu
        for u, (n, lo, hi) in enumerate(table):
            for f in ("master", "m", "v"):
                out[f][u][lo:hi] = np.frombuffer(b, np.float32, hi - lo, pos)
                pos += 4 * (hi - lo)
        assert pos == len(b), f"{path}: {len(b) - pos} bytes past the last unit"
    for f in ("master", "m", "v"):
        assert not any(np.isnan(a).any() for a in out[f]), f"{ckpt_dir}: {f} not covered by the rank files"
    return out


def max_diff(a, b, field):
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a[field], b[field]))


def equal(a, b):
    return a["t"] == b["t"] and all(
        np.array_equal(x, y) for f in ("master", "m", "v") for x, y in zip(a[f], b[f]))
