"""The candidate's process: the only place candidate code runs.

It holds nothing of the judge: no reference output, no tolerance, no timer
state the verdict reads, no result channel. It is forked from the judge
before the judge has seen its job (candidate_sandbox.fork_candidate), sits in its own
PID and mount namespaces under its own uid, and answers the judge's requests
over a pair of pipes (env.harness.wire):

  load     {task_source, candidate_source, seed, cache_files}
           seed its Triton cache with the kernels an earlier run of the
           same source compiled (blobs), then build ModelNew (while the
           judge computes its references)
  forward  {input_seed, mode, seed, defer, buffer, swallow}
           draw the inputs from the task with the judge's seed (chosen by
           the judge from os.urandom for this job), run one forward,
           return the output as bytes; with defer (the correctness
           trials, all sent at once) keep it and answer its number
  trial_out {trial}                the output of a deferred trial, as bytes
  time     {seeds, order, warmup}  (CUDA) timed calls with L2 flush and
           events (timing.timed_batch); each timed call's output is kept
           for fetch and its digest (wire.digest) sent with the batch's
           answer
  fetch    {call}                  the output of one timed call, as bytes
  profile  {input_seed}            the CUPTI profile of one forward
  release / modules                free the kept outputs / the modules
                                   imported since the fork (warm-up only)
  cache                            the files of its Triton cache
                                   (env.harness.kernel_cache)

Everything it says (launch counts, event times, guard findings, the
exceptions it raised) is a claim: the judge checks outputs from their bytes
and times against its own wall clock. The runtime guards here (launch
counter, function snapshot) are filters that catch the plain attempts; they
decide nothing the candidate could not also forge.
"""

import os
import sys
import time

import torch

from env.harness import guards, loader, timing, wire

TASK_MODULE = "kg_task"
CANDIDATE_MODULE = "kg_candidate"


def _raised(e):
    from env.harness import evaluate

    kind = "other"
    if isinstance(e, (SystemExit, KeyboardInterrupt, GeneratorExit)):
        kind = "exit"
    elif isinstance(e, MemoryError) or any(m in str(e) for m in evaluate.HOST_OOM_MARKERS):
        kind = "memory"
    elif evaluate.is_cuda_fault(e):
        kind = "cuda"
    return {"raised": {"kind": kind, "type": type(e).__name__, "text": evaluate.candidate_error_text(e),
                       "message": f"{type(e).__name__}: {e}"[:2000]}}


class Runner:
    def __init__(self, device_type):
        self.modules_at_fork = set(sys.modules)
        self.device_type = device_type
        self.device = torch.device("cpu")
        self.deferred = []
        self.bufs = [None, None]
        self.timed = {}
        self.recent = []
        self.pool = {}
        self.ready_error = None

    # ---- setup, before any job -------------------------------------------------
    def prepare(self):
        """The CUDA context (the costliest part of a job's start) or the
        Triton interpreter, made while the job before runs."""
        t0 = time.perf_counter()
        if self.device_type == "cuda":
            from env.harness import evaluate

            self.device = evaluate.cuda_context()
            try:  # cuBLAS / cuDNN handles, best effort
                a = torch.ones(8, 8, device=self.device)
                a @ a
                torch.cuda.synchronize()
            except Exception:
                pass
        elif not loader.use_triton_interpreter():
            self.ready_error = "internal: Triton's interpreter could not be switched on in the candidate's process"
        self.modules_before = set(sys.modules)
        self.counter = guards.LaunchCounter(CANDIDATE_MODULE)
        self.counter.install()
        self.timers = guards.Timers()
        timing.prewarm(self.device, self.timers)
        if self.device_type == "cuda":
            evaluate.reserve_memory(self.device)
        self.snapshot = guards.FunctionSnapshot()
        self.prepare_ms = timing.ms_since(t0)

    def patched(self):
        changed = self.snapshot.changed()
        if not self.counter.intact():
            changed.append("triton JITFunction.run (the launch path)")
        return changed[:10]

    def compiled(self):
        """What torch's compilers say they did in this process, whatever path
        reached them (torch.compile, dynamo, Inductor, a graph restored from
        a cache): the evidence, or []."""
        seen = []
        dynamo = sys.modules.get("torch._dynamo.utils")
        counters = getattr(dynamo, "counters", None) if dynamo else None
        try:
            if counters is not None:
                frames = sum(counters.get("frames", {}).values()) if "frames" in counters else 0
                graphs = counters.get("stats", {}).get("unique_graphs", 0) if "stats" in counters else 0
                if frames or graphs:
                    seen.append(f"dynamo traced {frames} frames, {graphs} graphs")
        except Exception:
            seen.append("dynamo's counters are unreadable")
        metrics = sys.modules.get("torch._inductor.metrics")
        n = getattr(metrics, "generated_kernel_count", 0) if metrics else 0
        if isinstance(n, int) and n > 0:
            seen.append(f"Inductor generated {n} kernels")
        for name in ("torch._inductor.codecache", "torch._inductor.compile_fx", "torch._functorch.aot_autograd"):
            if name in sys.modules and name not in self.modules_before:
                seen.append(f"{name} was loaded")
        return seen[:5]

    def sync(self):
        if self.device_type == "cuda":
            self.timers.synchronize()

    # ---- requests ---------------------------------------------------------------
    def op_load(self, req):
        if self.ready_error:
            return {"error": self.ready_error}
        workdir = os.getcwd()
        names = req.get("cache_files")
        if names:
            self._seed_kernels(names, self.req_blobs)
        try:
            self.task = loader.load_module(TASK_MODULE, req["task_source"], workdir)
            self.init_inputs = list(self.task.get_init_inputs())
        except BaseException as e:
            return {"error": f"the task failed to load in the candidate's process: {type(e).__name__}: {e}"}
        try:
            self.module = loader.load_module(CANDIDATE_MODULE, req["candidate_source"], workdir)
        except SyntaxError as e:
            return {"syntax": f"SyntaxError: {e.msg} (line {e.lineno})"}
        except BaseException as e:
            return dict(_raised(e), where="while importing the candidate", patched=self.patched())
        patched = self.patched()
        model_new = getattr(self.module, "ModelNew", None)
        if model_new is None:
            return {"no_model": True, "patched": patched}
        try:
            loader.seed_all(int(req["seed"]))
            self.model = model_new(*self.init_inputs).to(self.device)
        except BaseException as e:
            return dict(_raised(e), where="while building ModelNew", patched=patched)
        from env.harness import candidate_sandbox

        return {"ok": True, "patched": self.patched(), "isolation": candidate_sandbox.candidate_isolation,
                "prepare_ms": getattr(self, "prepare_ms", None)}

    def _seed_kernels(self, names, blobs):
        """Writes the kernels compiled by an earlier run of this very source
        (env.harness.kernel_cache) into this process's own Triton cache."""
        from env.harness import kernel_cache

        datas = [b.numpy().tobytes() for b in blobs]
        root = os.environ.get("TRITON_CACHE_DIR")
        if root and kernel_cache.valid_files(names, [len(d) for d in datas]):
            try:
                kernel_cache.write_tree(root, names, datas)
            except OSError:
                pass

    def op_cache(self, req):
        """The files of this process's Triton cache, for the judge to keep
        for later runs of the same source (env.harness.kernel_cache)."""
        from env.harness import kernel_cache

        names, datas = kernel_cache.read_tree(os.environ.get("TRITON_CACHE_DIR"))
        return {"files": names}, datas

    def _inputs(self, seed):
        return loader.inputs_from(self.task, int(seed), self.device)

    def op_forward(self, req):
        inputs = self._inputs(req["input_seed"])
        buffer = req.get("buffer")
        if buffer is not None:
            if self.bufs[buffer] is None or not timing.copy_into(self.bufs[buffer], inputs):
                self.bufs[buffer] = loader.clone_inputs(inputs)
            args = self.bufs[buffer]
        else:
            args = inputs
        self.model.train(req["mode"] == "train")
        before, total_before = self.counter.candidate, self.counter.total
        self.counter.disabled = bool(req.get("swallow"))
        try:
            with torch.no_grad():
                loader.seed_all(req["seed"])
                out = self.model(*args)
            self.sync()
        except BaseException as e:
            return dict(_raised(e), launches=self.counter.candidate - before, patched=self.patched())
        finally:
            self.counter.disabled = False
        reused = False
        if req.get("defer"):
            # A correctness trial: the output stays here (alive, so no two
            # trials share an address) until the judge asks for it by the
            # number answered now (op_trial_out); the judge sends every
            # trial's request at once and computes its references meanwhile.
            self.deferred.append((args, out))
            return {"deferred": len(self.deferred) - 1, "launches": self.counter.candidate - before,
                    "launches_all": self.counter.total - total_before,
                    "kernels": dict(self.counter.per_kernel), "patched": self.patched()}
        if req.get("keep"):
            from env.harness import compare

            mine = compare.storage_ptrs(out) - compare.storage_ptrs(args)
            reused = any(mine & compare.storage_ptrs(h) for h in self.recent)
            self.recent = (self.recent + [out])[-2:]
        blobs = []
        try:
            value = wire.encode_value(out, blobs)
        except wire.WireError as e:
            return {"bad_output": str(e), "patched": self.patched()}
        except BaseException as e:
            return dict(_raised(e), patched=self.patched())
        return {"out": value, "reused": reused, "launches": self.counter.candidate - before,
                "launches_all": self.counter.total - total_before,
                "kernels": dict(self.counter.per_kernel), "patched": self.patched()}, blobs

    def op_trial_out(self, req):
        """The output of a deferred correctness trial (op_forward), as bytes."""
        i = req.get("trial")
        if not isinstance(i, int) or not 0 <= i < len(self.deferred):
            return {"bad_output": f"no output was kept for correctness trial {i}"}
        blobs = []
        try:
            value = wire.encode_value(self.deferred[i][1], blobs)
        except wire.WireError as e:
            return {"bad_output": str(e), "patched": self.patched()}
        except BaseException as e:
            return dict(_raised(e), patched=self.patched())
        return {"out": value, "patched": self.patched()}, blobs

    def op_pool(self, req):
        """Draws the timed calls' input sets from the judge's seeds ahead of
        the first timed batch, so their making is outside the judge's wall
        clock around it (a strict re-run draws a fresh set for every call)."""
        try:
            for s in [int(x) for x in req["seeds"]]:
                if s not in self.pool:
                    self.pool[s] = self._inputs(s)
            self.sync()
        except BaseException as e:
            return dict(_raised(e), patched=self.patched())
        return {"ok": True, "patched": self.patched()}

    def op_time(self, req):
        """Timed calls over the pool drawn from the judge's seeds
        (timing.timed_batch): inputs copied into one of two fixed buffers,
        L2 flush, events around the forward, device sync, then (outside
        the events, inside the judge's wall clock) the output's digest,
        queued on the device and read with the others at the batch's end. The
        outputs are kept for fetch. The judge times its empty batch itself,
        so nothing here can make the harness's own cost look larger."""
        seeds = [int(s) for s in req["seeds"]]
        for s in seeds:
            if s not in self.pool:
                self.pool[s] = self._inputs(s)
        if not hasattr(self, "flusher"):
            self.flusher = timing.Flusher(self.device)
        self.timed = {}
        self.model.train(True)
        pool = [self.pool[s] for s in seeds]
        bufs = [loader.clone_inputs(pool[0]), loader.clone_inputs(pool[0])]
        pending = {}

        def keep(i, out):
            self.timed[i] = out
            pending[str(i)] = wire.value_digest_tensor(out)

        order, warmup = [int(i) for i in req["order"]], int(req["warmup"])
        before = self.counter.candidate
        try:
            times = timing.timed_batch(lambda args: self.model(*args), pool, order, warmup, bufs, self.flusher,
                                       self.timers, keep)
            digests = wire.read_digests(pending)
        except BaseException as e:
            return dict(_raised(e), patched=self.patched())
        return {"times_ms": times, "digests": digests, "launches": self.counter.candidate - before,
                "patched": self.patched()}

    def op_fetch(self, req):
        out = self.timed.get(int(req["call"]))
        if out is None:
            return {"bad_output": f"no output was kept for timed call {req['call']}"}
        blobs = []
        try:
            value = wire.encode_value(out, blobs)
        except wire.WireError as e:
            return {"bad_output": str(e)}
        return {"out": value, "patched": self.patched()}, blobs

    def op_modules(self, req):
        """The modules imported here since the fork (for the server's
        warm-up, which imports them so later forks inherit them)."""
        return {"modules": sorted(set(sys.modules) - self.modules_at_fork)}

    def op_release(self, req):
        self.timed = {}
        return {"ok": True}

    def op_profile(self, req):
        from env.harness import profiler

        self.model.train(True)
        args = self._inputs(req["input_seed"])
        try:
            prof = profiler.profile_forward(self.model, args, self.device, self.counter.kernel_names(), self.timers,
                                            counter=self.counter)
        except BaseException as e:
            return dict(_raised(e), patched=self.patched())
        return {"profile": prof, "patched": self.patched()}


def serve(rfd, wfd, device_type, shm=None):
    """The request loop; returns when the judge closes the channel."""
    runner = Runner(device_type)
    try:
        runner.prepare()
    except BaseException as e:
        runner.ready_error = f"internal: the candidate's process could not be set up: {type(e).__name__}: {e}"
    ops = {"load": runner.op_load, "forward": runner.op_forward, "time": runner.op_time,
           "fetch": runner.op_fetch, "trial_out": runner.op_trial_out, "release": runner.op_release, "profile": runner.op_profile,
           "modules": runner.op_modules, "cache": runner.op_cache, "pool": runner.op_pool}
    while True:
        try:
            req, runner.req_blobs = wire.recv(rfd)
        except (EOFError, wire.WireError, OSError):
            return
        op = ops.get(req.get("op"))
        if op is None:
            return
        t0 = time.perf_counter()
        try:
            ans = op(req)
        except BaseException as e:
            ans = dict(_raised(e), internal=True)
        blobs = ()
        if isinstance(ans, tuple):
            ans, blobs = ans
        ans["ms"] = timing.ms_since(t0)
        if hasattr(runner, "modules_before"):
            ans["compiled"] = runner.compiled()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            wire.send(wfd, ans, blobs, shm)
        except (OSError, ValueError):
            return
