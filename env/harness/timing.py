"""Timing loops shared by the candidate and the reference, so both are
measured the same way.

Each call gets its inputs copied from a pool of input sets into one of two
fixed buffers (so a cache keyed on the input's address sees new values), the
L2 cache is flushed by writing a 256 MB buffer, a short GPU spin keeps the
device busy while the host issues the forward (HOST_COVER_CYCLES), and the
forward is bracketed by CUDA events on the current stream followed by a
device-wide sync. All of that happens outside the events. The candidate's outputs can be validated
after every call, outside the timed region.

timed_batch is the one loop both processes of a job run: the candidate's
process around ModelNew, the judge around the reference model and around
nothing (the empty batch that measures the harness's own cost per call, in
a process that never ran candidate code). interleave_order, speedup_of and
wall_bound are the judge's statistics.
"""

import statistics
import time

import torch

from env.harness import compare
from env.harness.loader import clone_inputs

L2_FLUSH_BYTES = 256 * 1024 * 1024
# Cycles of a GPU spin (torch.cuda._sleep) queued after the L2 flush and
# before the start event: the GPU is still busy with it while the host
# records the event and issues the forward's launches, so the events time
# the device's work, not how fast this process's host path ran (on the H200
# the same honest forward's events varied per process with the host's issue
# time: a conv2d of 18 us of kernels read 25 to 160 us a call). 250k cycles
# are about 125 us at 1.98 GHz.
HOST_COVER_CYCLES = 250_000


_flush_bufs = {}  # one per device and process: prewarm makes it before the job


class Flusher:
    def __init__(self, device):
        self.buf = None
        if device.type == "cuda":
            key = device.index if device.index is not None else torch.cuda.current_device()
            if key not in _flush_bufs:
                _flush_bufs[key] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
            self.buf = _flush_bufs[key]

    def flush(self):
        if self.buf is not None:
            self.buf.zero_()


def cover_host(timers):
    """Queues the GPU spin of HOST_COVER_CYCLES where the timers carry one
    (guards.Timers takes torch.cuda._sleep before candidate code runs)."""
    sleep = getattr(timers, "sleep", None)
    if sleep is not None:
        sleep(HOST_COVER_CYCLES)


def copy_into(dst, src):
    """Copies an input set into a buffer set; False when the shapes differ
    (a task whose get_inputs() varies its shapes), in which case the pool set
    is used directly."""
    for d, s in zip(dst, src):
        if isinstance(s, torch.Tensor):
            if not isinstance(d, torch.Tensor) or d.shape != s.shape or d.dtype != s.dtype:
                return False
    for d, s in zip(dst, src):
        if isinstance(s, torch.Tensor):
            d.copy_(s)
    return True


class SequenceResult:
    def __init__(self):
        self.times_ms = []
        self.mismatch = None   # (call index, message)
        self.reused = None     # call index whose output shares storage with an earlier one
        self.max_abs_diff = 0.0


def run_sequence(model, pool, pick, calls, warmup, device, timers=None, flusher=None, validate=None,
                 check_reuse=True, deferred=None):
    """Calls model `warmup + calls` times; call i uses input set pick(i) of
    the pool. With CUDA and timers, returns per-call event times of the
    non-warm-up calls. validate(out, pool_index) -> (ok, diff, message).
    deferred(out, pool_index) -> (ok, diff) device tensors or None: verdicts
    read back once at the end (a wrong call is then reported by its index
    and max abs diff); None falls back to validate at once."""
    cuda = device.type == "cuda" and timers is not None
    bufs = [clone_inputs(pool[0]), clone_inputs(pool[0])]
    buf_storages = set()
    for b in bufs:
        buf_storages |= compare.storage_ptrs(b)
    for s in pool:
        buf_storages |= compare.storage_ptrs(s)
    if cuda:
        start = timers.Event(enable_timing=True)
        end = timers.Event(enable_timing=True)
    res = SequenceResult()
    held = []
    pending = []
    with torch.no_grad():
        for i in range(warmup + calls):
            p = pick(i)
            args = bufs[i % 2]
            if not copy_into(args, pool[p]):
                args = pool[p]
            if cuda:
                if flusher is not None:
                    flusher.flush()
                cover_host(timers)
                timers.record(start)
                out = model(*args)
                timers.record(end)
                timers.synchronize()
                if i >= warmup:
                    res.times_ms.append(float(timers.elapsed_time(start, end)))
            else:
                out = model(*args)
            verdict = deferred(out, p) if deferred is not None else None
            if verdict is not None:
                pending.append((i, verdict))
            elif validate is not None:
                ok, diff, message = validate(out, p)
                if diff is not None:
                    res.max_abs_diff = max(res.max_abs_diff, diff)
                if not ok:
                    res.mismatch = (i, message)
                    _read_verdicts(pending, res)
                    return res
            if check_reuse:
                mine = compare.storage_ptrs(out) - buf_storages
                if any(mine & compare.storage_ptrs(h) for h in held):
                    res.reused = i
                    return res
                held = (held + [out])[-2:]
    _read_verdicts(pending, res)
    return res


def _read_verdicts(pending, res):
    if not pending:
        return
    values = compare.read_back([x for _, verdict in pending for x in verdict])
    oks, diffs = values[0::2], values[1::2]
    res.max_abs_diff = max([res.max_abs_diff] + diffs)
    for (i, _), ok, d in zip(pending, oks, diffs):
        if not ok:
            res.mismatch = (i, f"output differs from the reference: max abs diff {d:.3g}")
            return


def ms_since(t0):
    """Milliseconds since t0, a time.perf_counter() reading."""
    return (time.perf_counter() - t0) * 1000.0


def summarize(times_ms):
    if not times_ms:
        return None
    return {
        "mean": statistics.fmean(times_ms),
        "median": statistics.median(times_ms),
        "std": statistics.pstdev(times_ms) if len(times_ms) > 1 else 0.0,
        "min": min(times_ms),
        "max": max(times_ms),
        "trials": len(times_ms),
    }


def input_bytes(inputs):
    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


def output_bytes(out):
    return sum(t.numel() * t.element_size() for t in compare.leaves(out) if isinstance(t, torch.Tensor))


def timed_batch(call, pool, order, warmup, bufs, flusher, timers, keep=None):
    """Event times (ms) of the calls of one batch after its first warmup.
    Call i runs call(args) on input set order[i] of pool, copied into
    bufs[i % 2]; keep(i, out) runs after the sync, outside the events (the
    candidate's process keeps the output and its digest there). call may
    return None (the empty batch)."""
    start = timers.Event(enable_timing=True)
    end = timers.Event(enable_timing=True)
    times = []
    with torch.no_grad():
        for i, p in enumerate(order):
            args = bufs[i % 2]
            if not copy_into(args, pool[p]):
                args = pool[p]
            flusher.flush()
            cover_host(timers)
            timers.record(start)
            out = call(args)
            timers.record(end)
            timers.synchronize()
            if i >= warmup:
                times.append(float(timers.elapsed_time(start, end)))
                if keep is not None:
                    keep(i, out)
    return times


def prewarm(device, timers):
    """One small batch of the timed loop on a stand-in forward, with its
    output kept and digested as a timed call's: the L2 flush buffer is
    allocated and the kernels the loop itself launches (fill, copy, the
    digest's) are loaded (CUDA loads a kernel's module at its first launch),
    so the process's first timed batch does not pay that. For a process
    made ahead of its job, while the job before runs; best effort."""
    if device.type != "cuda":
        return
    from env.harness import wire

    try:
        x = [torch.ones(4096, device=device)]
        timed_batch(lambda args: args[0] * 2.0, [x], [0, 0], 0, [clone_inputs(x), clone_inputs(x)], Flusher(device),
                    timers, lambda i, out: wire.value_digest(out))
    except Exception:  # the job meets the same problem and reports it
        pass


# GPU memory each process of a job, made ahead of it, takes from the driver
# and hands back to its own caching allocator (reserve_memory), MB. The
# server sets it from DK_KG_RESERVE_MB (parse_reserve_mb) before it forks.
RESERVE_MB = 2048


def parse_reserve_mb(value):
    """DK_KG_RESERVE_MB's value as a whole number of MB (unset or empty: the
    default); ValueError naming the variable otherwise."""
    if value is None or not value.strip():
        return RESERVE_MB
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"DK_KG_RESERVE_MB={value!r}: expected a whole number of MB (0 turns it off)")
    if n < 0:
        raise ValueError(f"DK_KG_RESERVE_MB={value!r}: expected 0 or more MB")
    return n


def reserve_memory(device, mb):
    """Grows the process's caching allocator by one block of mb MB, freed at
    once: torch keeps it and splits it for later tensors. A fresh process
    otherwise asks the driver (cudaMalloc) for every new large tensor of its
    job: on the H100 a judge's reference forwards, kept outputs and float64
    temporaries spent tens of ms of host time there, on the job's critical
    path. For a process made ahead of its job, while the job before runs;
    best effort (a card without the room keeps what it could not give)."""
    if device.type != "cuda" or mb <= 0:
        return 0
    try:
        block = torch.empty(mb << 20, dtype=torch.uint8, device=device)
        del block
        return mb
    except Exception:  # out of memory: the job runs with the driver's pace
        torch.cuda.empty_cache()
        return 0


def empty_like(x):
    """An uninitialised value with x's structure, dtypes, shapes and devices:
    the empty batch's stand-in for an output (allocated and digested like
    one, so its wall clock holds everything a real call's holds but the
    forward)."""
    if isinstance(x, torch.Tensor):
        return torch.empty_like(x)
    if isinstance(x, (list, tuple)):
        return type(x)(empty_like(e) for e in x)
    return x


def warm_until(call, pool, bufs, flusher, timers, min_ms, min_calls, max_calls):
    """Runs calls (input sets in turn) until both min_calls ran and min_ms
    of wall clock went by, or max_calls ran: the GPU reaches the clocks it
    keeps under this load before anything is measured. Returns the calls
    made."""
    t0 = time.perf_counter()
    n = 0
    while n < max_calls and (n < min_calls or (time.perf_counter() - t0) * 1000.0 < min_ms):
        timed_batch(call, pool, [n % len(pool)], 1, bufs, flusher, timers)
        n += 1
    return n


def sight_order(calls, n, randbelow):
    """The input set of each of `calls` timed calls over a pool of n sets:
    call 0 sees set 0; sets 1 .. n-1 are first seen at positions drawn at
    random (randbelow(k) -> 0..k-1) among the other calls; every other call
    sees a set already seen, drawn at random. The first sights are spread
    over the sequence, not packed at its start, so what the start of a
    sequence pays (clocks still rising, the allocator growing) is not read
    as a cost of seeing an input for the first time (split_first_sight).
    With n >= calls every call sees a set of its own."""
    if n >= calls:
        return list(range(calls))
    rest = list(range(1, calls))
    firsts = {0}
    for _ in range(n - 1):
        firsts.add(rest.pop(randbelow(len(rest))))
    order, seen = [], 0
    for i in range(calls):
        if i in firsts:
            order.append(seen)
            seen += 1
        else:
            order.append(randbelow(seen))
    return order


def split_first_sight(times, sets):
    """(times of calls whose input set no earlier call had, times of the
    others), calls taken in order; times[i] ran on input set sets[i]."""
    seen, first, again = set(), [], []
    for t, p in zip(times, sets):
        (again if p in seen else first).append(t)
        seen.add(p)
    return first, again


def interleave_order(batches):
    """For each of `batches` batches, whether the reference's batch runs
    before the candidate's: R C, C R, R C, C R ... so each side runs first
    as often as the other, and a clock that drifts during the job
    weighs on both alike."""
    return [b % 2 == 0 for b in range(batches)]


def speedup_of(ref_times, cand_times):
    """Reference median over candidate median (None when either is empty or
    the candidate's median is not positive). Medians: one slow call (a
    context switch, a clock step) moves neither."""
    if not ref_times or not cand_times:
        return None
    c = statistics.median(cand_times)
    return statistics.median(ref_times) / c if c > 0 else None


def wall_bound(event_sum_ms, wall_ms, null_wall_ms, calls, share, slack_ms):
    """(ok, event ms a call, wall ms a call): the events a batch claims must
    cover at least `share` of the judge's wall clock per call, less the
    judge's own empty batch per call, minus slack_ms a call."""
    n = max(1, calls)
    per_event = event_sum_ms / n
    per_wall = max(0.0, (wall_ms - null_wall_ms) / n)
    return per_event >= share * per_wall - slack_ms, per_event, per_wall
