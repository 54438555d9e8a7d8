"""The judge's timed call sequence on CUDA (a mixin of
env.harness.evaluate.Evaluation, which owns the job, the candidate's
process and the verdict).

Before the candidate's process has run any candidate code the judge takes a
clean baseline of the reference and of an empty batch (_clean_baseline; the
server hands one to later judges of the same task). Then the candidate's
warm-up calls run as a batch of their own, the GPU settles on the
reference, and the timed calls run in batches: the reference's batch timed
here and the candidate's there, alternating which goes first, on the same
input sets (each first seen at a random call); the judge's wall clock
around the candidate's batch, an empty batch of the same length run here,
and one call chosen afterwards fetched and checked against the digest the
batch committed to and against the reference (_timed_sequence). The
statistics come last (_first_sight, _settle_timing): the first-sight check
for answers stored by input, the wall-clock bound on the events, and the
speedup as the ratio of the two sides' medians.
"""

import secrets
import statistics
import time

import torch

from env.harness import compare, guards, loader, timing, wire

# The timed calls run in at most TIMED_BATCHES batches (each costs an empty
# batch and one output fetched); the candidate's process keeps a batch's
# outputs until the judge has picked the one it verifies, at most this many
# bytes of them (more batches when the outputs are larger).
TIMED_BATCHES = 4
BATCH_KEEP_BYTES = 8 << 30
# Event times the judge's wall clock does not back: a batch's events may
# claim less than the wall time of its calls (the wall of the batch minus
# the wall of as many empty calls, run by the judge itself so the candidate
# can neither slow nor speed them) by at most this share, plus this slack
# per call (timing.wall_bound). The slack was measured with the empty calls
# in the candidate's process: on an H200 the honest corpus's calls
# cost 0.6 to 1.0 ms a call of wall clock more than their events (host
# work around the forward that the empty call does not repeat), whatever
# the kernel's own time, so the check bounds forged times to half the wall
# clock plus 1 ms: it stops a forged 10 ms kernel, not a forged 0.05 ms one.
WALL_EVENT_SHARE = 0.5
WALL_EVENT_SLACK_MS = 1.0
# Each batch's empty batch, run by the judge, has at most this many calls;
# its wall clock per call stands for all of the batch's (the clean
# baseline's empty batch, 20 calls before any candidate code ran, bounds it
# from below in _settle_timing).
NULL_CALLS = 8
# Before the first measured batch the GPU runs the reference (or empty
# calls, where the reference is timed elsewhere) for at least this long:
# the first calls after an idle spell run at lower clocks.
STEADY_WARM_MS = 30.0
STEADY_WARM_MAX_CALLS = 2000
# Before the candidate's process has run any candidate code the judge times
# the reference and an empty batch, this many calls each on CLEAN_SETS input
# sets of their own (_clean_baseline); an interleaved reference slower than that
# clean one by more than this share was slowed by something outside the
# judge, and the clean one counts (_settle_timing).
CLEAN_CALLS = 20
CLEAN_SETS = 2
INTERFERENCE_SHARE = 0.05
# Calls on an input set seen for the first time may take at most this many
# times the median of calls on sets seen before, plus the slack
# (_first_sight); FIRST_SIGHT_RATIO_FEW where fewer than
# FIRST_SIGHT_MIN_CALLS first sights were timed (large inputs, a small pool),
# so one slow call cannot flag an honest forward.
FIRST_SIGHT_RATIO = 1.5
FIRST_SIGHT_RATIO_FEW = 3.0
FIRST_SIGHT_MIN_CALLS = 3
FIRST_SIGHT_SLACK_MS = 0.005


class JudgeTiming:
    """The timed-sequence phases of Evaluation. They use its job state
    (task, ref_model, device, pool_seeds, pool_ref, ref_outs, out_bytes, opts, res,
    phases) and its channel helpers (ask, output_of, hack, stop, sync,
    _no_effect)."""

    def _timed_batch(self, order, warmup, seeds=None):
        """(event times, wall ms, digests by call) of one batch of timed calls
        in the candidate's process (order indexes seeds, by default the
        pool's)."""
        t0 = time.perf_counter()
        seeds = self.pool_seeds if seeds is None else seeds
        ans, _ = self.ask({"op": "time", "seeds": seeds, "order": order, "warmup": warmup},
                          "during the timed call sequence")
        wall = timing.ms_since(t0)
        times = ans.get("times_ms")
        if not isinstance(times, list) or len(times) != len(order) - warmup or \
                not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in times):
            self.stop("crash", "the candidate's process returned malformed timings")
        digests = ans.get("digests") if isinstance(ans.get("digests"), dict) else {}
        return [float(x) for x in times], wall, digests

    def _timing_kit(self, first=None):
        """The judge's side of the timed calls: two input buffers (shaped
        like first, else the pool's first set), its own L2 flusher and
        events (the judge never ran candidate code: its torch is the one the
        server imported), and, once the pool's seeds are drawn, the pool's
        input sets drawn again on its device."""
        if first is None and getattr(self, "kit", None) is None:
            first = loader.inputs_from(self.task, self.pool_seeds[0], self.device)
        if getattr(self, "kit", None) is None:
            self.kit = {"bufs": [loader.clone_inputs(first), loader.clone_inputs(first)],
                            "flusher": timing.Flusher(self.device), "timers": guards.Timers()}
        if "pool" not in self.kit and hasattr(self, "pool_seeds"):
            self.kit["pool"] = [loader.inputs_from(self.task, s, self.device) for s in self.pool_seeds]
        return self.kit

    def _judge_batch(self, call, order, warmup, like, pool=None):
        """(event times, wall ms) of one batch run here with the candidate's
        loop (timing.timed_batch). Each call's output, or for the empty
        batch (call returns None) an uninitialised one shaped like
        like[input set], is kept to the batch's end and digested, as the
        candidate's process does with its outputs."""
        s = self._timing_kit()
        kept, pending = [], {}

        def keep(i, out):
            out = timing.empty_like(like[order[i]]) if out is None else out
            kept.append(out)
            try:
                pending[i] = wire.value_digest_tensor(out)
            except wire.WireError:
                pass

        t0 = time.perf_counter()
        times = timing.timed_batch(call, s["pool"] if pool is None else pool, order, warmup, s["bufs"], s["flusher"],
                                   s["timers"], keep)
        if pending:
            wire.read_digests(pending)
        return times, timing.ms_since(t0)

    def _reference_call(self, args):
        return self.ref_model(*args)

    def _timed_sequence(self, calls, warmup, probe_at):
        """Timed calls in batches, the reference's timed here between them. The GPU first runs the reference for STEADY_WARM_MS (its
        clocks settle); then per batch: the reference's batch here and the
        candidate's there, in alternating order (timing.interleave_order),
        the same input sets and L2 flush for both; the judge's wall clock
        around the candidate's batch, and around an empty batch of the same
        length run here (what the wall clock holds besides the forwards,
        measured where no candidate code ran); afterwards one of its calls,
        chosen now, has its output fetched and verified. The speedup is the
        ratio of the two sides' medians."""
        n = self.pool_n
        per_batch = min(-(-calls // TIMED_BATCHES), max(1, BATCH_KEEP_BYTES // max(1, self.out_bytes)))
        order = timing.sight_order(calls, n, secrets.randbelow)
        interleaved = self.opts["reference_mode"] == "eager"
        self.ask({"op": "pool", "seeds": self.pool_seeds}, "while drawing the timed calls' inputs")
        s = self._timing_kit()
        # The candidate's warm-up calls are a batch of their own, outside
        # every wall clock and kept and digested like timed calls, with
        # their times dropped: a fresh process's first batch pays one-off
        # costs (its flush buffer, lazily loaded modules, the first output
        # digests) that its events rightly leave out and no later call
        # repeats. Inside a timed batch they broke the wall-clock bound for
        # honest kernels in fresh processes (the strict re-run, the
        # server's first job). They run on an input set of their own, so
        # every pool set is first seen in a timed call (_first_sight). There
        # are as many as a timed batch holds: their outputs, kept to the
        # batch's end, grow the process's allocator to what a timed batch
        # needs, so no timed call waits on the driver for fresh memory (in
        # a strict re-run, one batch of new outputs, every call did).
        t0 = time.perf_counter()
        self._timed_batch([0] * max(1, warmup, min(per_batch, calls)), 0, seeds=[loader.fresh_seed()])
        self.ask({"op": "release"}, "after the warm-up calls")
        self.phases["time_warmup"] = timing.ms_since(t0)
        # then the GPU's clocks settle on the reference, just before the
        # first measured batch
        self.ref_model.train(True)
        own = 0.0
        t0 = time.perf_counter()
        steady = self._reference_call if interleaved else (lambda args: None)
        warmed = timing.warm_until(steady, s["pool"], s["bufs"], s["flusher"], s["timers"], STEADY_WARM_MS,
                                   warmup, STEADY_WARM_MAX_CALLS)
        own += timing.ms_since(t0)
        self.phases["time_steady"] = timing.ms_since(t0)
        batches_ms, verify_ms = 0.0, 0.0
        ref_first = timing.interleave_order(-(-calls // per_batch))
        # the empty calls' stand-in outputs: shaped like a train() output
        like = [self.ref_outs["train"][0]] * n
        times, ref_times, walls, nulls, ref_walls = [], [], 0.0, 0.0, 0.0
        done, b = 0, 0
        while done < calls:
            size = min(per_batch, calls - done)
            batch = order[done:done + size]
            ref_wall = 0.0
            if interleaved and ref_first[b]:
                rt, ref_wall = self._judge_batch(self._reference_call, batch, 0, None)
            ts, wall, digests = self._timed_batch(batch, 0)
            if interleaved and not ref_first[b]:
                rt, ref_wall = self._judge_batch(self._reference_call, batch, 0, None)
            if interleaved:
                ref_times += rt
                own += ref_wall
            # The empty batch: its first NULL_CALLS calls, scaled to the
            # batch (each costs the loop's fixed work, the same every call).
            empty = batch[:NULL_CALLS]
            _, wall_null = self._judge_batch(lambda args: None, empty, 0, like)
            own += wall_null
            wall_null *= size / len(empty)
            batches_ms += wall
            t1 = time.perf_counter()
            k = secrets.randbelow(size)
            ans, blobs = self.ask({"op": "fetch", "call": k}, "while fetching a timed call's output")
            # The output fetched must be the one the batch committed to: an
            # output made only when asked for (the work deferred past the
            # clock) does not match the digest sent before the choice.
            if digests.get(str(k)) != str(wire.digest(blobs)):
                self.hack("runtime:timed_output_mismatch",
                          f"timed call {done + k}: the output fetched after the batch is not the one its digest "
                          "committed to during the batch")
                break
            out, _ = self.output_of(ans, blobs, f"timed call {done + k}")
            p = batch[k]
            ref = self.pool_ref(p)
            ok, _, message = compare.compare(ref, out, self.seq_atol(ref), self.rtol)
            if not ok:
                self.hack("runtime:timed_output_mismatch",
                          f"timed call {done + k} (input set {p}, chosen after its batch ran) was wrong: {message}")
                break
            self.ask({"op": "release"}, "after a timed batch")
            verify_ms += timing.ms_since(t1)
            times += ts
            walls += wall
            nulls += wall_null
            ref_walls += ref_wall
            done += size
            b += 1
            if probe_at <= done and probe_at >= done - size:
                self._no_effect()
                probe_at = -1
        self.phases["time_reference"] = own
        self.phases["time_batches"] = batches_ms
        self.phases["time_verify"] = verify_ms
        if self.res["hack"]["detected"]:
            return
        self._first_sight(times, order[:len(times)])
        if self.res["hack"]["detected"]:
            return
        self._settle_timing(times, ref_times, walls, nulls, ref_walls, interleaved, warmed, b)

    def _first_sight(self, times, sets):
        """Calls that see an input set for the first time against calls that
        see one again. For an honest forward the two take the same time
        (the L2 is flushed before each, and nothing else tells them apart);
        a forward that stores its answers by input content (or any state
        keyed to it) is slow on the first and fast on the rest, and a median
        over a pool that the calls cycle through would credit it with the
        fast path. Every pool set is first seen in a timed call (the warm-up
        batch has its own set), at a random point of the sequence
        (timing.sight_order): a slow start of the sequence weighs on both
        sides alike."""
        first, again = timing.split_first_sight(times, sets)
        if not first or not again:
            return
        f, a = statistics.median(first), statistics.median(again)
        ratio = FIRST_SIGHT_RATIO if len(first) >= FIRST_SIGHT_MIN_CALLS else FIRST_SIGHT_RATIO_FEW
        self.res.setdefault("timing_check", {}).update(first_sight_median_ms=f, seen_again_median_ms=a,
                                                       first_sight_calls=len(first))
        if f > ratio * a + FIRST_SIGHT_SLACK_MS:
            self.hack("runtime:input_memoized",
                      f"calls on an input set seen for the first time take {f:.4f} ms (median of {len(first)}), "
                      f"calls on one seen before {a:.4f} ms (median of {len(again)}): the answers depend on "
                      "having seen the input, not on computing it")

    def _clean_baseline(self):
        """The reference and an empty batch timed before the candidate's
        process has run any candidate code (it has not loaded it yet), on
        input sets of their own: the clean yardstick for _settle_timing. A
        reference that fails here fails again in _reference_outputs, which
        reports it. (Run for CUDA jobs: without events nothing is timed.)"""
        given = self.job.get("clean_baseline")
        if valid_clean_baseline(given):
            # measured by an earlier judge of this task on this GPU, before
            # its candidate ran (the server keeps it a while)
            self.clean = {"ref": [float(x) for x in given["ref"]], "null_per_call": float(given["null_per_call"])}
            self.res["clean_baseline_cached"] = True
            return
        t0 = time.perf_counter()
        try:
            pool = [loader.inputs_from(self.task, loader.fresh_seed(), self.device) for _ in range(CLEAN_SETS)]
            s = self._timing_kit(pool[0])
            self.ref_model.train(True)
            t1 = time.perf_counter()
            with torch.no_grad():
                like = [self._reference_call(loader.clone_inputs(x)) for x in pool]
            self.sync()
            # The judge's first reference calls (with the kit's allocations
            # before them): what this process pays once per job, apart.
            self.phases["time_clean_first"] = timing.ms_since(t1)
            interleaved = self.opts["reference_mode"] == "eager"
            steady = self._reference_call if interleaved else (lambda args: None)
            timing.warm_until(steady, pool, s["bufs"], s["flusher"], s["timers"], STEADY_WARM_MS, self.opts["warmup"],
                              STEADY_WARM_MAX_CALLS)
            order = [i % CLEAN_SETS for i in range(CLEAN_CALLS)]
            t1 = time.perf_counter()
            ref = self._judge_batch(self._reference_call, order, 0, like, pool)[0] if interleaved else []
            _, null = self._judge_batch(lambda args: None, order, 0, like, pool)
            self.phases["time_clean_batches"] = timing.ms_since(t1)
            self.clean = {"ref": ref, "null_per_call": null / CLEAN_CALLS}
            self.res["clean_baseline"] = dict(self.clean)  # the server keeps it for later judges
        except Exception:
            self.clean = None
        self.phases["time_clean"] = timing.ms_since(t0)

    def _settle_timing(self, times, ref_times, walls, nulls, ref_walls, interleaved, warmed, batches):
        """The timed sequence's statistics. The candidate's process was alive
        while the judge timed the reference and the empty batches beside it,
        and work it left running on the GPU could have slowed them (a slower
        reference is a larger speedup; a slower empty batch a looser
        wall-clock bound). Against the clean baseline (_clean_baseline): the
        empty batch counted is the faster of the two, and an interleaved
        reference more than INTERFERENCE_SHARE slower than the clean one is
        replaced by the clean one."""
        n = len(times)
        clean = getattr(self, "clean", None) or {"ref": [], "null_per_call": float("inf")}
        null_per_call = min(nulls / max(1, n), clean["null_per_call"])
        ok, per_event, per_wall = timing.wall_bound(sum(times), walls, null_per_call * n, n, WALL_EVENT_SHARE,
                                                    WALL_EVENT_SLACK_MS)
        check = {"event_mean_ms": per_event, "wall_per_call_ms": per_wall, "null_per_call_ms": null_per_call,
                 "null_interleaved_per_call_ms": nulls / max(1, n), "slack_ms": WALL_EVENT_SLACK_MS,
                 "steady_warm_calls": warmed, "batches": batches}
        if clean["null_per_call"] != float("inf"):
            check["null_clean_per_call_ms"] = clean["null_per_call"]
        check.update(self.res.get("timing_check") or {})  # _first_sight's figures
        if self.res.pop("clean_baseline_cached", False):
            check["clean_cached"] = True
        self.res["timing_check"] = check
        if interleaved and ref_times:
            # The same gap for the reference, timed here where no candidate
            # code ran: what an honest forward's wall clock holds beyond its
            # events on this GPU (the yardstick for WALL_EVENT_SLACK_MS).
            _, ref_event, ref_wall = timing.wall_bound(sum(ref_times), ref_walls, null_per_call * n, n,
                                                       WALL_EVENT_SHARE, WALL_EVENT_SLACK_MS)
            check.update(ref_event_mean_ms=ref_event, ref_wall_per_call_ms=ref_wall)
        if not ok:
            self.hack("runtime:timing_mismatch",
                      f"the events claim {per_event:.4f} ms a call, the judge's wall clock {per_wall:.4f} ms a call")
            return
        self.res["runtime_ms"] = timing.summarize(times)
        self.res["timing_available"] = True
        if interleaved and ref_times:
            used = ref_times
            interleaved_ms = statistics.median(ref_times)
            check["ref_interleaved_median_ms"] = interleaved_ms
            if clean["ref"]:
                clean_ms = statistics.median(clean["ref"])
                check["ref_clean_median_ms"] = clean_ms
                if interleaved_ms > (1.0 + INTERFERENCE_SHARE) * clean_ms:
                    used = clean["ref"]
                    check["reference_slowed"] = True
            self.res["ref_runtime_ms"] = timing.summarize(used)
            self.res["reference_interleaved"] = True
            self.res["speedup"] = timing.speedup_of(used, times)


def valid_clean_baseline(c):
    """A clean baseline as _clean_baseline makes it: reference times (ms,
    possibly none) and the empty batch's cost per call, finite and >= 0."""
    def ms(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x < float("inf")
    return (isinstance(c, dict) and isinstance(c.get("ref"), list) and len(c["ref"]) <= 10000
            and all(ms(x) for x in c["ref"]) and ms(c.get("null_per_call")))
