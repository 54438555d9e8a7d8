"""KernelGym's timing, the judge's side, without a GPU.

  statistics   timing.speedup_of, timing.wall_bound and
               timing.interleave_order on hand-computed cases
  loops        timing.timed_batch: warm-up calls are not timed, each call
               gets its input set copied into the two buffers in turn and
               its output handed to keep; timing.warm_until stops at its
               call and time bounds
  sequence     the judge's timed sequence (evaluate.Evaluation._timed_
               sequence) against a stand-in for the candidate's process on
               a fake clock: the reference is timed in the judge between
               the candidate's batches, alternating which goes first; the
               empty batch runs in the judge, never in the candidate's
               process; the speedup is the ratio of the medians; a
               candidate whose events claim far less than the judge's wall
               clock is runtime:timing_mismatch; the judge never asks the
               candidate's process for an empty batch
  settle       an interleaved reference slowed by more than INTERFERENCE_SHARE
               against the clean baseline (timed before the candidate's
               process ran anything) gives way to the clean one
  reserve      DK_KG_RESERVE_MB's parsing (a bad value is an error naming
               the variable), the reservation capped at a quarter of a
               process's share of DK_KG_GPU_MEMORY_GB, nothing reserved on
               the CPU
"""

import os
import random
import sys
import tempfile
import time

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import torch  # noqa: E402

import corpus  # noqa: E402
from env.harness import evaluate, judge_timing, loader, protocol, server, timing, wire  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def test_statistics():
    # medians: ref [1, 2, 3, 100] -> 2.5, candidate [1, 1, 2] -> 1
    check(timing.speedup_of([1.0, 2.0, 3.0, 100.0], [1.0, 1.0, 2.0]) == 2.5, "speedup_of: medians")
    check(timing.speedup_of([], [1.0]) is None and timing.speedup_of([1.0], [0.0]) is None,
          "speedup_of: empty or zero")
    # 10 calls, events 10 ms in all (1 ms a call), wall 30 ms, empty batch 10 ms -> 2 ms a call
    ok, ev, wall = timing.wall_bound(10.0, 30.0, 10.0, 10, 0.5, 0.25)
    check(ok and ev == 1.0 and wall == 2.0, f"wall_bound: honest case gave {ok, ev, wall}")
    # events 5 ms (0.5 a call) against 0.5 * 2 - 0.25 = 0.75
    ok, ev, wall = timing.wall_bound(5.0, 30.0, 10.0, 10, 0.5, 0.25)
    check(not ok and ev == 0.5, f"wall_bound: forged case gave {ok, ev, wall}")
    # an empty batch longer than the batch itself never makes the wall negative
    ok, _, wall = timing.wall_bound(0.0, 5.0, 10.0, 10, 0.5, 0.0)
    check(ok and wall == 0.0, "wall_bound: negative wall")
    check(timing.interleave_order(5) == [True, False, True, False, True], "interleave_order")
    rng = random.Random(7)
    for calls, n in ((100, 8), (8, 3), (5, 5), (4, 9), (30, 1)):
        order = timing.sight_order(calls, n, rng.randrange)
        seen, ok = 0, len(order) == calls
        for p in order:
            ok = ok and (p == seen or p < seen)
            seen = max(seen, p + 1)
        ok = ok and seen == min(n, calls) and order[0] == 0
        check(ok, f"sight_order({calls}, {n}): {order}")
    # the last set's first sight is spread over the sequence (with the sets
    # taken in turn it would always be call 7)
    last = [timing.sight_order(100, 8, rng.randrange).index(7) for _ in range(20)]
    check(max(last) > 20, f"sight_order: the last set is first seen by call {max(last)} at most ({last})")
    print("  statistics: medians, the wall-clock bound and the interleaving match hand-computed cases")


class FakeClock:
    """Stands in for CUDA events: every call takes `ms`; counts its syncs."""

    def __init__(self, ms):
        self.ms = ms
        self.syncs = 0

    class Event:
        def __init__(self, enable_timing=True):
            pass

    def record(self, event):
        pass

    def synchronize(self):
        self.syncs += 1

    def elapsed_time(self, start, end):
        return self.ms


def test_loops():
    pool = [[torch.full((4,), float(p))] for p in range(3)]
    bufs = [loader.clone_inputs(pool[0]), loader.clone_inputs(pool[0])]
    seen, kept = [], []

    def call(args):
        seen.append((id(args[0]), float(args[0][0])))
        return args[0] * 2

    clock = FakeClock(0.25)
    times = timing.timed_batch(call, pool, [0, 1, 2, 1], 1, bufs, timing.Flusher(torch.device("cpu")), clock,
                               lambda i, out: kept.append((i, float(out[0]))))
    check(times == [0.25, 0.25, 0.25] and clock.syncs == 4, f"timed_batch: times {times}, syncs {clock.syncs}")
    check([v for _, v in seen] == [0.0, 1.0, 2.0, 1.0], f"timed_batch: inputs {seen}")
    check([i for i, _ in seen] == [id(bufs[0][0]), id(bufs[1][0])] * 2, "timed_batch: the two buffers alternate")
    check(kept == [(1, 2.0), (2, 4.0), (3, 2.0)], f"timed_batch: kept {kept}")
    n = timing.warm_until(call, pool, bufs, timing.Flusher(torch.device("cpu")), clock, 0.0, 3, 100)
    check(n == 3, f"warm_until: {n} calls for min_calls 3")
    n = timing.warm_until(call, pool, bufs, timing.Flusher(torch.device("cpu")), clock, 1e9, 0, 7)
    check(n == 7, f"warm_until: {n} calls for max_calls 7")
    t0 = time.perf_counter()
    n = timing.warm_until(lambda a: time.sleep(0.002), pool, bufs, timing.Flusher(torch.device("cpu")), clock,
                          30.0, 1, 10000)
    took = (time.perf_counter() - t0) * 1000.0
    check(took >= 30.0 and n < 10000, f"warm_until: stopped after {took:.1f} ms, {n} calls (30 ms asked)")
    print("  loops: timed_batch and warm_until")


class FakeCandidate:
    """The candidate's process as the judge sees it: answers time, fetch and
    release. Each timed call takes wall_ms of real time and claims event_ms;
    outputs are the reference's (so the fetched call verifies). It records
    the requests it got, in order, with the judge's reference batches
    marked between them by the test's clock."""

    def __init__(self, ev, wall_ms, event_ms, log):
        self.ev, self.wall_ms, self.event_ms, self.log = ev, wall_ms, event_ms, log
        self.outs = {}
        self.on_first_time = None  # called at its first timed batch
        self.first_ms = None  # a memoizer: this long on an input first seen, event_ms after
        self.seen = set()
        self.warm_seeds = None  # the seeds of its first batch (the warm-up)
        self.slow_start = None  # (calls, ms): an honest slow start of its first timed batch
        self.batches = 0
        self.sizes = []  # calls per batch, the warm-up's first

    def request(self, header):
        op = header["op"]
        if header.get("null"):
            raise AssertionError("the judge asked the candidate's process for an empty batch")
        self.log.append(op)
        if op == "time":
            if self.on_first_time is not None:
                self.on_first_time()
                self.on_first_time = None
            order, warmup = header["order"], header["warmup"]
            if self.warm_seeds is None:
                self.warm_seeds = list(header["seeds"])
            t0 = time.perf_counter()
            digests, events, wall = {}, [], 0.0
            self.batches += 1
            self.sizes.append(len(order))
            for i in range(len(order)):
                seed = header["seeds"][order[i]]
                ms = self.event_ms if self.first_ms is None or seed in self.seen else self.first_ms
                if self.slow_start and self.batches == 2 and i < self.slow_start[0]:
                    ms = self.slow_start[1]
                self.seen.add(seed)
                wall += ms
                if i >= warmup:
                    events.append(ms)
            for i in range(warmup, len(order)):
                out = self.ev.pool_refs[order[i]].clone()
                blobs = []
                wire.encode_value(out, blobs)
                self.outs[i] = out
                digests[str(i)] = str(wire.digest(blobs))
            # the batch takes wall_ms a call in all, its own work included
            if self.first_ms is None:
                wall = self.wall_ms * len(order)
            time.sleep(max(0.0, wall / 1000.0 - (time.perf_counter() - t0)))
            return {"times_ms": events, "digests": digests}, []
        if op == "fetch":
            blobs = []
            value = wire.encode_value(self.outs[header["call"]], blobs)
            return {"out": value}, blobs
        if op == "release":
            self.outs = {}
            return {"ok": True}, []
        if op == "pool":  # the inputs drawn before any clock starts
            assert header["seeds"] == self.ev.pool_seeds, header
            self.seen = set()
            return {"ok": True}, []
        raise AssertionError(f"the judge asked the candidate's process for {op!r}")


class JudgeClock(FakeClock):
    """The judge's clock: its reference calls take ref_ms, its empty calls
    0; logs each batch it times as "ref" or "null"."""

    def __init__(self, ref_ms, log, ev):
        super().__init__(ref_ms)
        self.log, self.ev = log, ev


def timed_run(wall_ms, event_ms, ref_ms, calls=8, warmup=1, clean_ref_ms=None, one_off_ms=0.0, first_ms=None,
              sets=3, slow_start=None, clean_given=None):
    """Runs Evaluation._clean_baseline then _timed_sequence on the CPU with
    the stand-ins; returns (result, request log, reference calls made).
    clean_ref_ms: the reference's time in the baseline, before the
    candidate's process ran anything (default ref_ms). one_off_ms: what its
    first request for calls costs once (a fresh process's first batch).
    first_ms: a memoizing candidate, first_ms on an input set it has not
    seen, event_ms on one it has. sets: the pool's input sets. slow_start:
    (k, ms), an honest candidate whose first k timed calls take ms.
    clean_given: a clean baseline handed to the judge (the server's cache)."""
    task = loader.load_module("kg_task_timing", corpus.task_source("row_sum"), tempfile.mkdtemp(prefix="kg-timing-"))
    ev = evaluate.Evaluation.__new__(evaluate.Evaluation)
    ev.opts = protocol.resolve_options({"perf_trials": calls, "warmup": warmup})
    ev.res = protocol.new_result("timing")
    ev.res["launches"] = {"eval": 1, "train": 0, "kernels": {}}
    ev.job = {} if clean_given is None else {"clean_baseline": clean_given}
    ev.phases = ev.res["phases_ms"]
    ev.patched, ev.strict = [], False
    ev.device = torch.device("cpu")
    ev.task = task
    torch.manual_seed(0)
    ev.ref_model = task.Model(*task.get_init_inputs())
    ev.pool_seeds = [101 + i for i in range(sets)]
    ev.pool_n = sets
    with torch.no_grad():
        ev.pool_refs = {p: ev.ref_model(*loader.inputs_from(task, s, ev.device)) for p, s in enumerate(ev.pool_seeds)}
    ev.ref_outs = {"train": [ev.pool_refs[0]]}
    ev.out_bytes = timing.output_bytes(ev.pool_refs[0])
    ev.atol = ev.rtol = 1e-4
    log = []
    ev.remote = FakeCandidate(ev, wall_ms, event_ms, log)
    ev.remote.first_ms = first_ms
    ev.remote.slow_start = slow_start
    calls_made = {"ref": 0, "null": 0}
    real_ref = ev.ref_model

    def counted_ref(*args):
        calls_made["ref"] += 1
        if not log or log[-1] != "ref":
            log.append("ref")
        return real_ref(*args)

    ev.ref_model = counted_ref
    ev.ref_model.train = lambda mode: None
    clock = JudgeClock(ref_ms, log, ev)
    saved = judge_timing.guards.Timers
    judge_timing.guards.Timers = lambda: clock
    clock.ms = ref_ms if clean_ref_ms is None else clean_ref_ms

    def sequence_starts():
        clock.ms = ref_ms
        time.sleep(one_off_ms / 1000.0)

    ev.remote.on_first_time = sequence_starts
    # the judge's random choices (the calls' input sets, the call fetched)
    # from a seeded source: the same run every time
    saved_rb = judge_timing.secrets.randbelow
    judge_timing.secrets.randbelow = random.Random(3).randrange
    try:
        ev._clean_baseline()
        log.clear()
        ev._timed_sequence(calls, warmup, probe_at=-1)
    finally:
        judge_timing.guards.Timers = saved
        judge_timing.secrets.randbelow = saved_rb
    ev.res["warm_seeds"] = ev.remote.warm_seeds
    ev.res["batch_sizes"] = ev.remote.sizes
    return ev.res, log, calls_made


def test_sequence():
    # honest: 20 ms of wall a call, 20 ms of events; the reference takes 10 ms
    res, log, made = timed_run(20.0, 20.0, 10.0)
    check(not res["hack"]["detected"] and res["timing_available"], f"sequence: honest flagged {res['hack']}")
    check(res.get("reference_interleaved") and res["speedup"] == 0.5,
          f"sequence: speedup {res.get('speedup')} (10 ms / 20 ms = 0.5 expected)")
    check(res["ref_runtime_ms"]["trials"] == 8 and res["runtime_ms"]["trials"] == 8,
          f"sequence: trials {res['ref_runtime_ms']} {res['runtime_ms']}")
    # reference before the first batch, after the second, before the third ...
    # the first "time" is the warm-up batch: no output fetched after it
    times = [i for i, op in enumerate(log) if op == "time"]
    check(len(times) == 5 and log[times[0] + 1] == "release", f"sequence: warm-up batch in {log}")
    times = times[1:]
    refs = [i for i, op in enumerate(log) if op == "ref"]
    check(len(times) == 4 and log.count("fetch") == 4, f"sequence: requests {log}")
    firsts = [any(times[b - 1] < r < times[b] if b else r < times[b] for r in refs) for b in range(len(times))]
    check(firsts == [True, False, True, False], f"sequence: reference-first per batch {firsts} in {log}")
    tc = res.get("timing_check") or {}
    check(tc.get("steady_warm_calls", 0) >= 1 and made["ref"] >= 8 + 1 + tc.get("steady_warm_calls", 0),
          f"sequence: the reference ran {made['ref']} calls, warm-up {tc.get('steady_warm_calls')}")
    # the sleep makes 20 ms a lower bound; a loaded machine adds to it
    check(tc.get("wall_per_call_ms", 0) >= 19.5 and tc.get("null_per_call_ms", 1) < 5.0,
          f"sequence: wall {tc.get('wall_per_call_ms')} / empty {tc.get('null_per_call_ms')} ms a call")
    print(f"  sequence: honest ok, speedup {res['speedup']}, wall {tc['wall_per_call_ms']:.2f} ms a call, "
          f"empty batch {tc['null_per_call_ms']:.3f} ms a call (in the judge), order {log}")
    # a fresh process: its first batch pays 300 ms once, then 2 ms of wall
    # and events a call. In the warm-up batch that cost is outside every
    # wall clock; inside the first timed batch it would be 37.5 ms a call
    # against 2 ms of events.
    res, log, _ = timed_run(2.0, 2.0, 1.0, one_off_ms=300.0)
    tc = res.get("timing_check") or {}
    check(not res["hack"]["detected"] and res["timing_available"] and tc.get("wall_per_call_ms", 99) < 10.0,
          f"sequence: a one-off cost in the first batch flagged {res['hack']} {tc}")
    print(f"  sequence: 300 ms once in the first batch -> ok, wall {tc.get('wall_per_call_ms', 0):.2f} ms a call")
    check(not set(res["warm_seeds"]) & {101, 102, 103}, f"sequence: warm-up seeds {res['warm_seeds']} are pool seeds")
    # as many warm-up calls as the largest timed batch (8 calls in 4
    # batches of 2; warmup 1): the allocator grows before the clock
    sizes = res["batch_sizes"]
    check(sizes[0] == max(sizes[1:]) == 2, f"sequence: batch sizes {sizes} (warm-up first)")
    # a memoizer: 8 calls cycle over 3 input sets; 20 ms on a set it has not
    # seen, 1 ms on one it has (median 1 ms: a 10x speedup if believed)
    res, log, _ = timed_run(None, 1.0, 10.0, first_ms=20.0)
    tc = res.get("timing_check") or {}
    check(res["hack"]["detected"] and "runtime:input_memoized" in res["hack"]["reasons"] and not res["timing_available"]
          and tc.get("first_sight_calls") == 3, f"sequence: memoizer not caught: {res['hack']} {tc}")
    print(f"  sequence: memoizer (20 ms first sight, 1 ms again) -> {res['hack']['reasons']}")
    # honest, but its first 5 timed calls are 3x slower (clocks still
    # rising): 8 input sets over 40 calls. Taken in turn, 5 of the 8 first
    # sights would be slow calls; first seen at random points, few are
    res, log, _ = timed_run(2.0, 2.0, 1.0, calls=40, sets=8, slow_start=(5, 6.0))
    tc = res.get("timing_check") or {}
    check(not res["hack"]["detected"] and res["timing_available"] and tc.get("first_sight_calls") == 8,
          f"sequence: a slow start read as memoized answers: {res['hack']} {tc}")
    print(f"  sequence: slow start (5 calls at 3x) -> ok, first sight {tc.get('first_sight_median_ms')} ms, "
          f"again {tc.get('seen_again_median_ms')} ms")
    # forged: 20 ms of wall a call, events claim 0.1 ms: 0.1 < 0.5 * 20 - 1
    res, log, _ = timed_run(20.0, 0.1, 10.0)
    check(res["hack"]["detected"] and "runtime:timing_mismatch" in res["hack"]["reasons"] and not res["timing_available"],
          f"sequence: forged events not caught: {res['hack']} {res.get('timing_check')}")
    print(f"  sequence: forged events -> {res['hack']['reasons']}")
    # the reference ran at 10 ms before the candidate's process ran anything,
    # 15 ms beside it: the interleaved reference was slowed from outside, the
    # clean one counts (10 / 20), not the interleaved one (15 / 20)
    res, log, _ = timed_run(20.0, 20.0, 15.0, clean_ref_ms=10.0)
    tc = res.get("timing_check") or {}
    check(res["timing_available"] and res["speedup"] == 0.5 and tc.get("reference_slowed")
          and tc.get("ref_interleaved_median_ms") == 15.0 and tc.get("ref_clean_median_ms") == 10.0,
          f"sequence: slowed reference gave speedup {res['speedup']} {tc}")
    # within the share: the interleaved reference counts (10.25 / 20)
    res, _, _ = timed_run(20.0, 20.0, 10.25, clean_ref_ms=10.0)
    check(res["timing_available"] and abs(res["speedup"] - 10.25 / 20.0) < 1e-12
          and not res["timing_check"].get("reference_slowed"), f"sequence: 2.5% slower interleaved reference gave {res['speedup']}")
    print("  sequence: a reference slowed beside the candidate -> the clean one counts (speedup 0.5, not 0.75)")
    # the server's cached baseline (10 ms) stands in for the judge's own:
    # nothing is timed before the candidate's process starts (the judge's
    # reference would take 12 ms here), and the slowed interleaved one
    # (15 ms) is replaced by the cached one
    res, log, made = timed_run(20.0, 20.0, 15.0, clean_ref_ms=12.0,
                               clean_given={"ref": [10.0] * 20, "null_per_call": 0.01})
    tc = res.get("timing_check") or {}
    check(res["timing_available"] and res["speedup"] == 0.5 and tc.get("clean_cached")
          and tc.get("ref_clean_median_ms") == 10.0 and "clean_baseline" not in res
          and "time_clean" not in res["phases_ms"], f"sequence: cached clean baseline: {res['speedup']} {tc}")
    # a malformed one is not used: the judge measures its own (12 ms)
    res, _, _ = timed_run(20.0, 20.0, 15.0, clean_ref_ms=12.0, clean_given={"ref": [-1.0], "null_per_call": 0.01})
    tc = res.get("timing_check") or {}
    check(not tc.get("clean_cached") and tc.get("ref_clean_median_ms") == 12.0 and "clean_baseline" in res,
          f"sequence: a malformed cached baseline was used: {tc}")
    print("  sequence: a cached clean baseline replaces the judge's own; a malformed one does not")


def test_clean_cache():
    """The server's cache of clean baselines: kept from a judge's result,
    handed to later jobs of the same task while fresh, never taken from the
    job itself."""
    srv = server.Server.__new__(server.Server)
    srv.clean, srv.profiles = {}, {}
    srv.clean_cache_s = server.CLEAN_CACHE_S
    opts = protocol.resolve_options({})
    job = {"task_source": "task A", "device": "cuda", "gpu": 0, "clean_baseline": {"ref": [0.001], "null_per_call": 0}}
    other = dict(job, task_source="task B")
    key, other_key = srv.clean_key(job, opts), srv.clean_key(other, opts)
    check("clean_baseline" not in srv.clean_for(job, key), "clean cache: a job's own baseline was passed on")
    good = {"ref": [0.5, 0.6], "null_per_call": 0.02}
    res = {"clean_baseline": dict(good)}
    srv.keep_clean(key, res)
    check("clean_baseline" not in res, "clean cache: the baseline stayed in the result")
    check(srv.clean_for(job, key).get("clean_baseline") == good, "clean cache: not handed to the same task")
    check("clean_baseline" not in srv.clean_for(other, other_key), "clean cache: handed to another task")
    check("clean_baseline" not in srv.clean_for(job, srv.clean_key(job, dict(opts, seed=opts["seed"] + 1))),
          "clean cache: handed across seeds")
    for bad in ({"ref": [float("nan")], "null_per_call": 0.0}, {"ref": "x", "null_per_call": 0.0}, {"ref": []}):
        srv.keep_clean(other_key, {"clean_baseline": bad})
        check("clean_baseline" not in srv.clean_for(other, other_key), f"clean cache: kept a malformed {bad}")
    srv.clean[key] = (time.monotonic() - server.CLEAN_CACHE_S - 1.0, good)
    check("clean_baseline" not in srv.clean_for(job, key), "clean cache: a stale baseline was handed on")
    print("  clean cache: kept per task and options, stale and malformed ones dropped, a job's own ignored")
    # The reference's op profile: kept from the judge that measured it,
    # never from a job or a judge that was handed one.
    prof = [{"name": "aten::addmm", "share": 0.75}, {"name": "aten::relu", "share": 0.25}]
    check("reference_profile" not in srv.clean_for(dict(job, reference_profile=prof), key),
          "profile cache: a job's own profile was passed on")
    res = {"reference_profile": list(prof)}
    srv.keep_clean(key, res)
    check(srv.clean_for(job, key).get("reference_profile") == prof and res.get("reference_profile") == prof,
          "profile cache: not kept from the judge that measured it")
    check("reference_profile" not in srv.clean_for(other, other_key), "profile cache: handed to another task")
    handed = {"reference_profile": [{"name": "aten::mm", "share": 1.0}], "reference_profile_given": True}
    srv.keep_clean(other_key, handed)
    check("reference_profile" not in srv.clean_for(other, other_key) and "reference_profile_given" not in handed,
          "profile cache: kept a profile the judge was handed")
    for bad in ([{"name": "x", "share": 2.0}], [{"name": 3, "share": 0.5}], "aten::mm",
                [{"name": "x", "share": 0.1}] * 9, [{"name": "x", "share": 0.5, "extra": 1}]):
        srv.keep_clean(other_key, {"reference_profile": bad})
        check("reference_profile" not in srv.clean_for(other, other_key), f"profile cache: kept a malformed {bad}")
    srv.profiles[key] = (time.monotonic() - server.CLEAN_CACHE_S - 1.0, prof)
    check("reference_profile" not in srv.clean_for(job, key), "profile cache: a stale profile was handed on")
    print("  profile cache: the measuring judge's profile kept per task; handed, malformed and stale ones not")


def main():
    test_statistics()
    test_loops()
    test_sequence()
    test_clean_cache()
    test_reserve()
    print(f"kernelgym timing: {len(failures)} failures")
    return 1 if failures else 0


def test_reserve():
    check(timing.parse_reserve_mb(None) == timing.RESERVE_MB, "unset DK_KG_RESERVE_MB: the default")
    check(timing.parse_reserve_mb(" ") == timing.RESERVE_MB, "empty DK_KG_RESERVE_MB: the default")
    check(timing.parse_reserve_mb("0") == 0, "DK_KG_RESERVE_MB=0 turns the reservation off")
    check(timing.parse_reserve_mb("512") == 512, "DK_KG_RESERVE_MB=512")
    for bad in ("2GB", "-1", "1.5"):
        try:
            timing.parse_reserve_mb(bad)
            check(False, f"DK_KG_RESERVE_MB={bad!r} was accepted")
        except ValueError as e:
            check("DK_KG_RESERVE_MB" in str(e) and repr(bad) in str(e), f"the error names the variable: {e}")
    check(timing.reserve_memory(torch.device("cpu"), 512) == 0, "nothing is reserved on the CPU")
    asked = []
    real = timing.reserve_memory
    saved = (timing.RESERVE_MB, evaluate.GPU_MEMORY_CAP_GB)
    try:
        timing.reserve_memory = lambda device, mb: asked.append(mb) or mb
        timing.RESERVE_MB = 2048
        evaluate.GPU_MEMORY_CAP_GB = 0.0
        evaluate.reserve_memory(torch.device("cuda", 0))
        # 8 GB for a job: 4 GB a process, a quarter of it reserved
        evaluate.GPU_MEMORY_CAP_GB = 8.0
        evaluate.reserve_memory(torch.device("cuda", 0))
        evaluate.GPU_MEMORY_CAP_GB = 40.0
        evaluate.reserve_memory(torch.device("cuda", 0))
    finally:
        timing.reserve_memory = real
        timing.RESERVE_MB, evaluate.GPU_MEMORY_CAP_GB = saved
    check(asked == [2048, 1000, 2048], f"reservations under DK_KG_GPU_MEMORY_GB: {asked}, expected [2048, 1000, 2048]")


if __name__ == "__main__":
    sys.exit(main())
