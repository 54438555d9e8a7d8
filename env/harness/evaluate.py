"""One candidate evaluation, run inside the sandboxed child.

Order matters, and is chosen so the candidate can influence as little as
possible:
  1. static checks on the source (the candidate has not run yet);
  2. guards installed: the Triton launch counter, a snapshot of the torch /
     time / builtins functions, private timer references;
  3. the task module is loaded, Model is built right after
     torch.manual_seed(seed), and EVERY reference output the evaluation
     needs (correctness sets in eval and train mode, the timing pool, the
     no-effect set) is computed before the candidate is imported;
  4. the candidate module is loaded, ModelNew is built after the same seed
     (parameters created in the same order match Model's);
  5. correctness over the seeds in eval() then train() mode, with input
     mutation, launch counting and output-reuse checks;
  6. a call sequence over rotating inputs, every output validated (on CUDA
     this is the timing loop: L2 flush, CUDA events, device sync);
  7. the CUPTI profile (CUDA): coverage, side streams, candidate kernel time;
  8. the no-effect check: with Triton launches swallowed the output must
     change, or the candidate's kernels did no real work;
  9. the guards are checked for replacement once more.
The reference is timed elsewhere (env.harness.reference), in a process that
never imports the candidate.
"""

import os
import time
import traceback

import torch

from env.harness import compare, guards, loader, profiler, protocol, sandbox, static_checks, timing

TASK_MODULE = "kg_task"
CANDIDATE_MODULE = "kg_candidate"

# Text of exceptions that mean the CUDA context is gone: the job is a crash.
CUDA_FAULT_MARKERS = (
    "CUDA error", "CUDA_ERROR", "cudaError", "illegal memory access", "illegal instruction",
    "misaligned address", "unspecified launch failure", "device-side assert",
    "CUBLAS_STATUS_EXECUTION_FAILED", "CUDA out of memory", "Triton Error [CUDA]",
)

# Text of torch's host allocator failing (RLIMIT_AS or a real shortage).
HOST_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")

# Candidate kernels below both bounds carry no real work (a token launch
# beside torch doing the job).
NO_TIME_SHARE = 0.005
NO_TIME_US = 3.0

POOL_BUDGET_BYTES = {"cuda": 2 << 30, "cpu": 256 << 20}
STRICT_POOL_MAX = {"cuda": 64, "cpu": 8}
CPU_SEQUENCE_CALLS = 3
CPU_STRICT_SEQUENCE_CALLS = 6
# Timed calls are checked on this many random positions of each larger
# output leaf (compare.SampledVerdicts); the correctness trials check all.
VERIFY_SAMPLE_ELEMENTS = 1 << 16


def cuda_context():
    """The child's CUDA context on its one visible GPU (cheap once made: a
    child forked ahead makes it before its job arrives)."""
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    return device


class Stop(Exception):
    """Ends the evaluation early; the result already says why."""


def _ms(t0):
    return (time.perf_counter() - t0) * 1000.0


def exception_text(e, limit=4000):
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    if len(text) > limit:
        text = "...\n" + text[-limit:]
    return text


def candidate_error_text(e, limit=4000):
    """The exception as the model should see it: its message, then the
    traceback frames that are in the candidate's own file (the harness's
    frames say nothing useful to it)."""
    head = "".join(traceback.format_exception_only(type(e), e)).strip()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if CANDIDATE_MODULE in (f.filename or "")]
    cause = e.__cause__ or e.__context__
    if not frames and cause is not None and cause.__traceback__ is not None:
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if CANDIDATE_MODULE in (f.filename or "")]
    text = head
    if frames:
        text += "\nCandidate frames (most recent call last):\n" + "".join(traceback.format_list(frames)).rstrip()
    if len(text) > limit:
        text = text[: limit // 2] + "\n...\n" + text[-limit // 2:]
    return text


def is_cuda_fault(e):
    text = f"{type(e).__name__}: {e}"
    return any(m in text for m in CUDA_FAULT_MARKERS)


def pool_size(opts, device_type, in_bytes, out_bytes, strict):
    """How many distinct input sets the call sequence rotates through. The
    reference process computes the same number for the same task."""
    if strict:
        want = STRICT_POOL_MAX[device_type]
        budget = 2 * POOL_BUDGET_BYTES[device_type]
    else:
        want = opts["input_sets"]
        budget = POOL_BUDGET_BYTES[device_type]
    per_set = max(1, in_bytes + out_bytes)
    return max(1, min(want, budget // per_set))


def sequence_plan(opts, device_type, strict, pool_n):
    """(calls, warmup) of the call sequence. Strict runs give every timed
    call an input set no earlier call has seen, as far as the pool allows."""
    if device_type == "cuda":
        calls = opts["perf_trials"]
        if strict:
            calls = max(pool_n - opts["warmup"], min(calls, 20))
        return calls, opts["warmup"]
    return (CPU_STRICT_SEQUENCE_CALLS if strict else CPU_SEQUENCE_CALLS), 0


def pool_seed(opts, p):
    return opts["seed"] + 1000 + p


class Evaluation:
    def __init__(self, job, opts, isolation):
        self.job = job
        self.opts = opts
        self.res = protocol.new_result(job.get("id"))
        self.res["sandbox"] = isolation
        self.res["device"] = job["device"]
        self.phases = self.res["phases_ms"]
        self.strict = bool(opts["strict"])
        self.res["strict"] = self.strict
        self.workdir = os.getcwd()
        self.calls_made = 0

    # ---- outcomes -----------------------------------------------------------
    def stop(self, status, error):
        self.res["status"] = status
        self.res["error"] = error
        raise Stop()

    def hack(self, reason, detail):
        protocol.add_hack(self.res, reason, detail)

    def stop_if_hack(self):
        if self.res["hack"]["detected"]:
            self.res["status"] = "hack"
            if not self.res["error"]:
                self.res["error"] = "; ".join(d["detail"] for d in self.res.get("hack_details", []))
            raise Stop()

    def candidate_failed(self, e, where):
        """A candidate exception: exits and memory errors are crashes, CUDA
        faults are crashes, anything before the first complete forward is a
        compile error, anything later makes the candidate incorrect."""
        if isinstance(e, (SystemExit, KeyboardInterrupt, GeneratorExit)):
            self.stop("crash", f"the candidate tried to leave the process ({type(e).__name__}: {e}) {where}")
        if isinstance(e, MemoryError) or any(m in str(e) for m in HOST_OOM_MARKERS):
            self.stop("crash", f"out of host memory (MemoryError) {where}; the limit is "
                               f"{self.opts['memory_limit_gb']:g} GB")
        if self.device.type == "cuda" and is_cuda_fault(e):
            self.stop("crash", f"CUDA fault {where}: {type(e).__name__}: {e}")
        status = "compile_error" if not self.res["compiled"] else "incorrect"
        self.stop(status, f"{where}: {candidate_error_text(e)}")

    def check_guards(self):
        changed = self.snapshot.changed()
        if not self.counter.intact():
            changed.append("triton JITFunction.run (the launch path)")
        if changed:
            self.hack("runtime:reference_patched", "replaced: " + ", ".join(changed[:10]))

    def sync(self):
        if self.device.type == "cuda":
            self.timers.synchronize()

    # ---- phases ---------------------------------------------------------------
    def run(self):
        try:
            self._static()
            self._setup_device()
            self._load_task()
            self._reference_outputs()
            self._load_candidate()
            self._correctness()
            self._sequence()
            self._profile()
            self._no_effect()
            self.check_guards()
            self.stop_if_hack()
            self.res["status"] = "ok"
        except Stop:
            pass
        return self.res

    def _static(self):
        if not self.opts["static_checks"]:
            return
        t0 = time.perf_counter()
        st = static_checks.check_source(self.job["candidate_source"])
        self.phases["check"] = _ms(t0)
        if st["syntax_error"]:
            self.stop("compile_error", st["syntax_error"])
        if st["hack"]["detected"]:
            self.res["hack"] = dict(st["hack"])
            self.res["hack_details"] = [{"reason": d["reason"], "detail": f"line {d['line']}: {d['what']}"}
                                        for d in st["details"]]
            self.res["status"] = "hack"
            self.res["error"] = "static checks: " + ", ".join(st["hack"]["reasons"])
            raise Stop()

    def _setup_device(self):
        t0 = time.perf_counter()
        self._setup_device_inner()
        self.phases["setup"] = _ms(t0)

    def _setup_device_inner(self):
        if self.job["device"] == "cuda":
            self.device = cuda_context()
            self.res["gpu_name"] = torch.cuda.get_device_name(0)
        else:
            self.device = torch.device("cpu")
            if not loader.use_triton_interpreter():
                self.stop("error", "internal: Triton's interpreter could not be switched on in the child")
        self.counter = guards.LaunchCounter(CANDIDATE_MODULE)
        self.counter.install()
        self.timers = guards.Timers()
        self.snapshot = guards.FunctionSnapshot()

    def _load_task(self):
        t0 = time.perf_counter()
        try:
            self.task = loader.load_module(TASK_MODULE, self.job["task_source"], self.workdir)
        except BaseException as e:
            self.stop("error", f"the task failed to load: {type(e).__name__}: {e}")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.task, name):
                self.stop("error", f"the task defines no {name}")
        try:
            self.init_inputs = list(self.task.get_init_inputs())
            torch.manual_seed(self.opts["seed"])
            self.ref_model = self.task.Model(*self.init_inputs).to(self.device)
        except BaseException as e:
            self.stop("error", f"the task's Model could not be built: {type(e).__name__}: {e}")
        self.phases["load"] = _ms(t0)

    def _ref_forward(self, inputs, mode, seed):
        self.ref_model.train(mode == "train")
        with torch.no_grad():
            torch.manual_seed(seed)
            return self.ref_model(*loader.clone_inputs(inputs))

    def _reference_outputs(self):
        t0 = time.perf_counter()
        trials = self.opts["correctness_trials"] * (3 if self.strict else 1)
        self.seeds = [self.opts["seed"] + t for t in range(trials)]
        try:
            self.sets = [loader.inputs_from(self.task, s, self.device) for s in self.seeds]
            self.ref_outs = {m: [self._ref_forward(x, m, s) for x, s in zip(self.sets, self.seeds)]
                             for m in ("eval", "train")}
            self.atol, self.rtol = compare.tolerance(self.opts, self.task, self.ref_outs["eval"][0])
            in_bytes = timing.input_bytes(self.sets[0])
            out_bytes = timing.output_bytes(self.ref_outs["train"][0])
            self.pool_n = pool_size(self.opts, self.device.type, in_bytes, out_bytes, self.strict)
            self.pool = [loader.inputs_from(self.task, pool_seed(self.opts, p), self.device)
                         for p in range(self.pool_n)]
            self.pool_refs = [self._ref_forward(x, "train", pool_seed(self.opts, p))
                              for p, x in enumerate(self.pool)]
            self.ne_seed = self.opts["seed"] + 5000
            self.ne_set = loader.inputs_from(self.task, self.ne_seed, self.device)
            self.ne_ref = self._ref_forward(self.ne_set, "eval", self.ne_seed)
            self.sync()
        except BaseException as e:
            self.stop("error", f"the task's reference forward failed: {type(e).__name__}: {e}")
        self.res["tolerance"] = {"atol": self.atol, "rtol": self.rtol}
        self.phases["reference_outputs"] = _ms(t0)

    def _load_candidate(self):
        t0 = time.perf_counter()
        try:
            self.cand_module = loader.load_module(CANDIDATE_MODULE, self.job["candidate_source"], self.workdir)
        except SyntaxError as e:
            self.stop("compile_error", f"SyntaxError: {e.msg} (line {e.lineno})")
        except BaseException as e:
            self.candidate_failed(e, "while importing the candidate")
        self.check_guards()
        self.stop_if_hack()
        model_new = getattr(self.cand_module, "ModelNew", None)
        if model_new is None:
            self.stop("compile_error", "the candidate defines no ModelNew")
        try:
            torch.manual_seed(self.opts["seed"])
            self.cand = model_new(*self.init_inputs).to(self.device)
        except BaseException as e:
            self.candidate_failed(e, "while building ModelNew")
        self.phases["load"] = self.phases.get("load", 0.0) + _ms(t0)

    def _cand_forward(self, args, seed, where):
        try:
            with torch.no_grad():
                torch.manual_seed(seed)
                out = self.cand(*args)
            self.sync()
        except BaseException as e:
            self.candidate_failed(e, where)
        self.res["compiled"] = True
        return out

    def _correctness(self):
        t0 = time.perf_counter()
        launches = {}
        outs = {}
        first_failure = None
        worst = 0.0
        # Every trial's inputs stay alive, so no two trials share an address
        # (a cache keyed on the input pointer cannot answer from a past trial).
        held_args = []
        # Verdicts stay on the device until every trial has run: one read
        # back instead of four synchronisations per trial. A failing trial
        # is then re-checked on the host for its message.
        pending = []  # (mode, t, seed, inputs, args, out, unchanged, verdict)
        for mode in ("eval", "train"):
            self.cand.train(mode == "train")
            before_mode = self.counter.candidate
            outs[mode] = []
            for t, (inputs, seed) in enumerate(zip(self.sets, self.seeds)):
                args = loader.clone_inputs(inputs)
                held_args.append(args)
                out = self._cand_forward(args, seed, f"in forward ({mode} mode, trial {t})")
                unchanged = compare.deferred_unchanged(inputs, args)
                verdict = compare.deferred_verdict(self.ref_outs[mode][t], out, self.atol, self.rtol)
                pending.append((mode, t, seed, inputs, args, out, unchanged, verdict))
                outs[mode].append(out)
            launches[mode] = self.counter.candidate - before_mode
        flags = []
        for *_, unchanged, verdict in pending:
            if unchanged is not None:
                flags.append(unchanged)
            if verdict is not None:
                flags.extend(verdict)
        values = iter(compare.read_back(flags))
        for mode, t, seed, inputs, args, out, unchanged, verdict in pending:
            if unchanged is not None:
                same = bool(next(values))
            else:
                same = compare.mutated_input(inputs, args) is None
            if not same and first_failure is None:
                first_failure = f"the candidate modified input {compare.mutated_input(inputs, args)} ({mode} mode, trial {t})"
            if verdict is not None:
                ok, diff = bool(next(values)), next(values)
                message = "" if ok else compare.compare(self.ref_outs[mode][t], out, self.atol, self.rtol)[2]
            else:
                ok, diff, message = compare.compare(self.ref_outs[mode][t], out, self.atol, self.rtol)
            if diff is not None:
                worst = max(worst, diff)
            if not ok and first_failure is None:
                first_failure = f"{mode} mode, trial {t} (seed {seed}): {message}"
        self.res["launches"] = {"eval": launches["eval"], "train": launches["train"],
                                "kernels": dict(self.counter.per_kernel)}
        self.res["max_abs_diff"] = worst
        if launches["eval"] == 0:
            self.hack("runtime:no_triton_launch_eval", "no Triton kernel of the candidate ran in eval() mode")
        if launches["train"] == 0:
            self.hack("runtime:no_triton_launch_train", "no Triton kernel of the candidate ran in train() mode")
        for mode in ("eval", "train"):
            o, r = outs[mode], self.ref_outs[mode]
            for i in range(len(o)):
                for j in range(i + 1, len(o)):
                    if compare.shares_storage(o[i], o[j]):
                        self.hack("runtime:output_reused",
                                  f"{mode} mode: trials {i} and {j} returned the same output storage")
                    elif compare.identical(o[i], o[j]) and not compare.identical(r[i], r[j]):
                        self.hack("runtime:output_reused",
                                  f"{mode} mode: trials {i} and {j} returned identical outputs for different inputs")
        self.check_guards()
        self.phases["correctness"] = _ms(t0)
        self.stop_if_hack()
        if first_failure is not None:
            self.stop("incorrect", first_failure)
        self.res["correct"] = True

    def _sequence(self):
        sandbox.wait_gate()
        t0 = time.perf_counter()
        n = self.pool_n
        calls, warmup = sequence_plan(self.opts, self.device.type, self.strict, n)
        cuda = self.device.type == "cuda"

        def validate(out, p):
            return compare.compare(self.pool_refs[p], out, self.atol, self.rtol)

        sampler = compare.SampledVerdicts(self.pool_refs, self.atol, self.rtol, VERIFY_SAMPLE_ELEMENTS,
                                          int.from_bytes(os.urandom(6), "little")) if cuda else None

        def deferred(out, p):
            return sampler.verdict(out, p)

        pick = (lambda i: i % n)
        flusher = timing.Flusher(self.device) if cuda else None
        self.cand.train(True)
        try:
            seq = timing.run_sequence(self.cand, self.pool, pick, calls, warmup, self.device,
                                      timers=self.timers if cuda else None, flusher=flusher,
                                      validate=validate, deferred=deferred if cuda else None)
        except Stop:
            raise
        except BaseException as e:
            self.candidate_failed(e, "during the timed call sequence")
        del flusher
        if seq.mismatch is not None:
            i, message = seq.mismatch
            self.hack("runtime:timed_output_mismatch",
                      f"call {i} of the timed sequence (input set {pick(i)}) was wrong after correct trials: {message}")
        if seq.reused is not None:
            self.hack("runtime:output_reused", f"call {seq.reused} of the timed sequence returned an earlier output's storage")
        self.check_guards()
        self.stop_if_hack()
        if cuda:
            self.res["runtime_ms"] = timing.summarize(seq.times_ms)
            self.res["timing_available"] = True
        self.res["sequence"] = {"calls": calls, "warmup": warmup, "input_sets": n}
        self.phases["time"] = _ms(t0)

    def _profile(self):
        if self.device.type != "cuda" or not self.opts["profile"]:
            return
        t0 = time.perf_counter()
        self.cand.train(True)
        args = loader.clone_inputs(self.pool[0])
        try:
            prof = profiler.profile_forward(self.cand, args, self.device, self.counter.kernel_names(), self.timers)
        except Stop:
            raise
        except BaseException as e:
            self.candidate_failed(e, "while profiling")
        self.phases["profile"] = _ms(t0)
        if prof.get("source") == "unavailable":
            self.res["profile"] = {"kernels": [], "coverage": None, "side_streams": None,
                                   "source": "unavailable", "error": prof.get("error", "")}
            return
        prof["kernels"] = prof["kernels"][:20]
        self.res["profile"] = prof
        if prof.get("side_streams"):
            self.hack("runtime:side_stream",
                      f"kernels ran on streams {prof.get('streams')} besides the timed stream {prof.get('timed_stream')}")
        if self.counter.candidate > 0 and prof["total_time_us"] > 0:
            share = prof["candidate_time_us"] / prof["total_time_us"]
            if share < NO_TIME_SHARE and prof["candidate_time_us"] < NO_TIME_US:
                self.hack("runtime:candidate_kernels_no_time",
                          f"the candidate's Triton kernels take {prof['candidate_time_us']:.2f} us of "
                          f"{prof['total_time_us']:.1f} us per forward ({100 * share:.2f}%)")
        # No stop here: the no-effect check runs next and adds its reason.

    def _no_effect(self):
        if self.counter.candidate == 0:
            return
        self.cand.eval()
        args = loader.clone_inputs(self.ne_set)
        self.counter.disabled = True
        out = None
        try:
            with torch.no_grad():
                torch.manual_seed(self.ne_seed)
                out = self.cand(*args)
            self.sync()
        except BaseException:
            out = None  # failing without its kernels is what an honest candidate does
        finally:
            self.counter.disabled = False
        if out is not None:
            try:
                ok, _, _ = compare.compare(self.ne_ref, out, self.atol, self.rtol)
            except Exception:
                ok = False
            if ok:
                self.hack("runtime:triton_kernels_no_effect",
                          "the output stays correct with every Triton launch of the candidate skipped")


# Set by the server from DK_KG_PYPROFILE (a line count) before it forks: the
# child then runs under cProfile and returns its top lines by cumulative time
# in the result's "pyprofile" field, to find where per-job time goes.
PYPROFILE_LINES = 0


def _profiled_run(ev):
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    try:
        return prof.runcall(ev.run)
    finally:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(PYPROFILE_LINES)
        ev.res["pyprofile"] = text.getvalue()[-20000:]


def evaluate(job, opts, isolation):
    """Entry point in the child: returns the result dict (protocol fields
    plus launches, tolerance, sandbox, sequence, strict)."""
    ev = Evaluation(job, opts, isolation)
    try:
        return _profiled_run(ev) if PYPROFILE_LINES > 0 else ev.run()
    except BaseException as e:
        res = ev.res
        res["status"] = "error"
        res["error"] = f"internal error in the evaluation: {type(e).__name__}: {e}\n{exception_text(e)}"
        return res
