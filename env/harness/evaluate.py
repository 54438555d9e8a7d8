"""One candidate evaluation: the judge.

The judge is a sandboxed child of the server that never executes candidate
code. The candidate runs in its own process (env.harness.candidate_proc),
forked before the judge saw the job, reached through env.harness.remote;
it receives the seeds of its inputs at the moment of each call and returns
its outputs as bytes. The judge:
  1. runs the static checks on the source (a filter: nothing decides on them
     alone that the later layers would let through);
  2. loads the task, builds Model after torch.manual_seed(seed), and draws
     every input set from seeds taken from os.urandom for this job, so no
     input can be known before the job runs; it computes every reference
     output itself;
  3. has the candidate's process build ModelNew after the same seed;
  4. checks correctness over the trials in eval() then train() mode: each
     output is rebuilt from its bytes in a plain tensor and checked for
     dtype, shape, a dense layout and values;
  5. runs the call sequence; on CUDA the candidate's process times batches
     of calls with events, the judge times the reference's batches itself
     in between (same job, same input sets, same loop), holds its wall
     clock around each candidate batch, runs an empty batch of the same
     length itself and checks the events against the difference, then
     verifies the output of a call of each batch chosen after the batch
     ran, which must match the digest the batch sent for it; the
     statistics (medians, the speedup) are computed here;
  6. takes the CUPTI profile (CUDA) and, at a random point of the sequence,
     the no-effect probe (Triton launches swallowed: the output must change);
  7. adds what the candidate's process reported its guards saw (patched
     torch / timer / launch functions) and writes the verdict.
The reference is timed here, beside the candidate, with reference_mode
"eager"; a compiled reference is timed elsewhere (env.harness.reference, a
process that never imports the candidate) and cached.
"""

import os
import secrets
import time
import traceback

import torch

from env.harness import (compare, error_budget, kernel_cache, loader, op_profile, protocol, remote, sandbox,
                         static_checks, timing, wire)
from env.harness.judge_timing import JudgeTiming

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
# The correctness trials run in eval() mode, then in train() mode.
CORRECTNESS_MODES = ("eval", "train")
CPU_STRICT_SEQUENCE_CALLS = 6
# Timed calls are checked on this many random positions of each larger
# output leaf (compare.SampledVerdicts); the correctness trials check all.
VERIFY_SAMPLE_ELEMENTS = 1 << 16


GPU_MEMORY_CAP_GB = 0.0  # the server sets it from DK_KG_GPU_MEMORY_GB; forked children inherit it


def cuda_context():
    """The child's CUDA context on its one visible GPU (cheap once made: a
    child forked ahead makes it before its job arrives)."""
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    if GPU_MEMORY_CAP_GB > 0:
        # The caching allocator raises OutOfMemoryError past a process's
        # share (a crash verdict), before the trainer sharing the GPU is
        # pushed out.
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, process_cap_bytes() / total), device)
    return device


def process_cap_bytes():
    """A process's share of DK_KG_GPU_MEMORY_GB: half the worker's cap for
    each of a job's two processes (0: no cap)."""
    return GPU_MEMORY_CAP_GB * 0.5e9


def reserve_memory(device):
    """timing.reserve_memory for one of a job's processes: DK_KG_RESERVE_MB
    (timing.RESERVE_MB), at most a quarter of its share of
    DK_KG_GPU_MEMORY_GB."""
    mb = timing.RESERVE_MB
    if GPU_MEMORY_CAP_GB > 0:
        mb = min(mb, int(process_cap_bytes() / 1e6 / 4))
    return timing.reserve_memory(device, mb)


# What a judge forked ahead spent on its setup before its job arrived (ms by
# step; the server's _prepare_child fills it), copied into phases_ms.
AHEAD_MS = {}


class Stop(Exception):
    """Ends the evaluation early; the result already says why."""


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
    """The seed of input set p of the reference timing (the reference's
    inputs are not secret: no candidate code runs beside it)."""
    return opts["seed"] + 1000 + p


class Evaluation(JudgeTiming):
    def __init__(self, job, opts, isolation):
        self.job = job
        self.opts = opts
        self.res = protocol.new_result(job.get("id"))
        self.res["sandbox"] = isolation
        self.res["device"] = job["device"]
        self.phases = self.res["phases_ms"]
        self.phases.update(AHEAD_MS)
        self.strict = bool(opts["strict"])
        self.res["strict"] = self.strict
        self.workdir = os.getcwd()
        self.patched = []
        link = sandbox.candidate_link()
        self.remote = remote.Remote(link) if link is not None else None

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

    def candidate_raised(self, raised, where):
        """What the candidate's process said it raised: exits and memory
        errors are crashes, CUDA faults are crashes, anything before the
        first complete forward is a compile error, anything later makes the
        candidate incorrect."""
        if not isinstance(raised, dict):
            raised = {}
        kind = raised.get("kind")
        text = str(raised.get("text") or raised.get("message") or "an exception")[:4000]
        if kind == "exit":
            self.stop("crash", f"the candidate tried to leave the process ({raised.get('message', '')}) {where}")
        if kind == "memory":
            self.stop("crash", f"out of host memory (MemoryError) {where}; the limit is "
                               f"{self.opts['memory_limit_gb']:g} GB")
        if kind == "cuda" and self.device.type == "cuda":
            self.stop("crash", f"CUDA fault {where}: {raised.get('message', '')}")
        status = "compile_error" if not self.res["compiled"] else "incorrect"
        self.stop(status, f"{where}: {text}")

    def ask(self, header, where, sent=False):
        """One request to the candidate's process (sent: already sent with
        remote.send, only its answer is read); its death is a crash."""
        try:
            if sent:
                self.unread -= 1
                ans, blobs = self.remote.receive()
            else:
                ans, blobs = self.remote.request(header)
        except remote.CandidateGarbled as e:
            self.stop("incorrect", f"{where}: {e}")
        except remote.CandidateGone as e:
            self.stop("crash", f"{where}: {e}")
        self.patched += [p for p in remote.claimed_list(ans, "patched") if p not in self.patched]
        compiled = remote.claimed_list(ans, "compiled")
        if compiled:
            self.hack("runtime:torch_compile", f"{where}: " + "; ".join(compiled))
        if "raised" in ans:
            self.candidate_raised(ans["raised"], where)
        if "bad_output" in ans:
            self.stop("incorrect", f"{where}: {str(ans['bad_output'])[:500]}")
        return ans, blobs

    def output_of(self, ans, blobs, where):
        """The output a request returned, rebuilt on the judge's device from
        its bytes; claims about its type are checked here."""
        notes = []
        try:
            out = wire.decode_value(ans.get("out"), blobs, notes)
        except wire.WireError as e:
            self.stop("incorrect", f"{where}: the output could not be read: {e}")
        for n in notes:
            if n.get("type") != "torch.Tensor":
                self.hack("runtime:tensor_subclass",
                          f"{where}: the output is a {str(n.get('type'))[:80]}, not a plain torch.Tensor")
        for leaf in compare.raw_leaves(out):
            problem = wire.exact_layout_problem(leaf, None)
            if problem:
                self.stop("incorrect", f"{where}: {problem}")
        return _to_device(out, self.device), notes

    def check_guards(self):
        if self.patched:
            self.hack("runtime:reference_patched", "replaced: " + ", ".join(self.patched[:10]))

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # ---- phases ---------------------------------------------------------------
    def run(self):
        try:
            self._static()
            if self.remote is None:
                self.stop("error", "internal: the judge has no candidate's process")
            self._setup_device()
            self._load_task()
            if self.device.type == "cuda":
                self._clean_baseline()
            self._start_load()
            self._reference_outputs()
            self._load_candidate()
            self._correctness()
            self._sequence()
            self._profile()
            self.check_guards()
            self.stop_if_hack()
            self.res["status"] = "ok"
        except Stop:
            pass
        finally:
            self._close_candidate()
        return self.res

    def _close_candidate(self):
        """The end of the candidate's process: its kernels kept for later runs
        of its source, the modules it imported (the server's warm-up job),
        then its channel closed (it exits)."""
        if self.remote is None:
            return
        if not getattr(self, "unread", 0):  # no answer is pending
            self._harvest_kernels()
            if getattr(self, "want_modules", False):
                try:
                    ans, _ = self.remote.request({"op": "modules"})
                    self.res["candidate_modules"] = remote.claimed_list(ans, "modules")
                except remote.CandidateGone:
                    pass
        self.phases["boundary"] = self.remote.boundary_ms
        self.remote.close()

    def _static(self):
        if not self.opts["static_checks"]:
            return
        t0 = time.perf_counter()
        st = static_checks.check_source(self.job["candidate_source"])
        self.phases["check"] = timing.ms_since(t0)
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
        if self.job["device"] == "cuda":
            self.device = cuda_context()
            self.res["gpu_name"] = torch.cuda.get_device_name(0)
            if self.remote is not None:
                self.remote.blob_device = self.device
        else:
            self.device = torch.device("cpu")
        self.phases["setup"] = timing.ms_since(t0)

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
            loader.seed_all(self.opts["seed"])
            self.ref_model = self.task.Model(*self.init_inputs).to(self.device)
        except BaseException as e:
            self.stop("error", f"the task's Model could not be built: {type(e).__name__}: {e}")
        self.phases["load"] = timing.ms_since(t0)

    def _ref_forward(self, inputs, mode, seed):
        self.ref_model.train(mode == "train")
        with torch.no_grad():
            loader.seed_all(seed)
            return self.ref_model(*loader.clone_inputs(inputs))

    def _reference_outputs(self):
        t0 = time.perf_counter()
        try:
            # The fp64 copy starts from the state the first forward saw:
            # train() forwards move BatchNorm's running statistics.
            self.pristine = error_budget.snapshot(self.ref_model)
            self.sets = [loader.inputs_from(self.task, s, self.device) for s in self.seeds]
            self.ref_outs = {}
            for m in CORRECTNESS_MODES:
                self.ref_outs[m] = [self._ref_forward(x, m, s) for x, s in zip(self.sets, self.seeds)]
                if m == "eval":
                    # the first eval() input again under another seed, before
                    # train() forwards move any running statistics
                    # (_reference_random)
                    self.seed_again = self._ref_forward(self.sets[0], "eval", self.seeds[0] ^ 0x5EED5EED)
            self.atol, self.rtol = compare.tolerance(self.opts, self.task, self.ref_outs["eval"][0])
            in_bytes = timing.input_bytes(self.sets[0])
            self.out_bytes = timing.output_bytes(self.ref_outs["train"][0])
            self.pool_n = pool_size(self.opts, self.device.type, in_bytes, self.out_bytes, self.strict)
            self.pool_seeds = [loader.fresh_seed() for _ in range(self.pool_n)]
            # The pool's reference outputs are made when a check needs one
            # (pool_ref): the timed sequence verifies one call a batch.
            self.pool_refs = {}
            self.ne_seed = loader.fresh_seed()
            self.ne_ref = self._ref_forward(loader.inputs_from(self.task, self.ne_seed, self.device), "train",
                                            self.ne_seed)
            self.sync()
        except BaseException as e:
            self.stop("error", f"the task's reference forward failed: {type(e).__name__}: {e}")
        self.res["tolerance"] = {"atol": self.atol, "rtol": self.rtol}
        self.phases["reference_outputs"] = timing.ms_since(t0)
        self._reference_fp64()
        self._reference_profile()

    def pool_ref(self, p):
        """The reference's train() output on the pool's input set p, made on
        first use (from the timing kit's copy of the set when it has one)."""
        if p not in self.pool_refs:
            kit = getattr(self, "kit", None)
            try:
                x = kit["pool"][p] if kit and "pool" in kit else loader.inputs_from(self.task, self.pool_seeds[p],
                                                                                    self.device)
                self.pool_refs[p] = self._ref_forward(x, "train", self.pool_seeds[p])
            except Exception as e:
                self.stop("error", f"the task's reference forward failed: {type(e).__name__}: {e}")
        return self.pool_refs[p]

    def _reference_fp64(self):
        """The reference again in float64 on the correctness trials' inputs,
        eval() mode, once per job: self.ref64[t] (None for every trial when
        the reference cannot run in float64; the tolerance rule alone then
        decides, and the result says why). The train() trials reuse it when
        the reference's train() output equals its eval() one bit for bit."""
        t0 = time.perf_counter()
        self.budget_k = float(self.opts["budget_k"])
        self.ref64 = [None] * len(self.seeds)
        info = {"available": False, "device": None, "k": self.budget_k}
        floating = any(isinstance(t, torch.Tensor) and t.is_floating_point()
                       for t in compare.leaves(self.ref_outs["eval"][0]))
        random_why = self._reference_random() if floating and not isinstance(self.pristine, str) else None
        if not floating:
            info["reason"] = "the reference has no floating-point output"
        elif isinstance(self.pristine, str):
            info["reason"] = self.pristine
        elif random_why:
            info["reason"] = random_why
        else:
            device = self.device
            try:
                device = error_budget.fp64_device(self.ref_model, self.sets[0], self.out_bytes, self.device)
                self.ref64 = self._fp64_outputs(device)
                info.update(available=True, device=device.type)
            except torch.cuda.OutOfMemoryError:
                try:  # the estimate was wrong: the CPU has the room
                    torch.cuda.empty_cache()
                    self.ref64 = self._fp64_outputs(torch.device("cpu"))
                    info.update(available=True, device="cpu")
                except BaseException as e:
                    info["reason"] = f"{type(e).__name__}: {str(e)[:300]}"
            except BaseException as e:
                # An op without float64 support, a model that casts inside.
                self.ref64 = [None] * len(self.seeds)
                info["reason"] = f"{type(e).__name__}: {str(e)[:300]}"
        self.pristine = None
        self.res["fp64_reference"] = info
        self.phases["reference_fp64"] = timing.ms_since(t0)

    def _reference_random(self):
        """Why the fp64 rule cannot judge this task, when the reference draws
        random numbers in eval() mode (torch.randn, bernoulli, F.dropout with
        its default training=True): float64 draws other values from the same
        seed, so the gap between the reference and its fp64 copy would be the
        noise, not rounding, and the budget (K times that gap) would accept
        a candidate that skips the work. Seen as the first trial's eval()
        output changing with the seed by more than 1% of its RMS; rounding
        (a non-deterministic reduction, atomics) moves it far less. None
        when it does not."""
        again = getattr(self, "seed_again", None)
        if again is None:
            return None
        for a, b in zip(compare.leaves(self.ref_outs["eval"][0]), compare.leaves(again)):
            if not (isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()):
                continue
            a64, b64 = a.detach().to(torch.float64), b.detach().to(device=a.device, dtype=torch.float64)
            fa = torch.where(torch.isfinite(a64), a64, torch.zeros_like(a64))
            d = torch.where(torch.isfinite(a64) & torch.isfinite(b64), a64 - b64, torch.zeros_like(a64))
            if float((d * d).mean().sqrt()) > 1e-2 * float((fa * fa).mean().sqrt()) or \
                    bool((torch.isfinite(a64) != torch.isfinite(b64)).any()):
                return ("the reference draws random numbers in eval() mode (its output changes with the seed), "
                        "which float64 draws differently: the task's tolerance alone decides")
        return None

    def _fp64_outputs(self, device):
        model64 = error_budget.fp64_model(self.pristine, device)
        outs = []
        mag_rms = None  # the magnitude run's RMS, from the first trial (fp64_magnitude_floor)
        for x, s in zip(self.sets, self.seeds):
            out64 = error_budget.fp64_forward(model64, x, s, device, self.device)
            mag_rms = error_budget.fp64_magnitude_floor(model64, out64, x, s, device, mag_rms)
            outs.append(out64)
        del model64
        self.sync()
        return outs

    def _reference_profile(self):
        """The reference's time per op (env/harness/op_profile.py), for the
        feedback's bottleneck line: on CUDA only, where the server's warm-up
        job has imported what the op timer needs; a CPU judge would pay
        seconds of imports per job for it, so the CPU result says it is not
        measured. A timer that fails leaves the reason instead."""
        if not self.opts["profile"]:
            return
        if self.device.type != "cuda":
            self.res["reference_profile_error"] = "not measured on the CPU device"
            return
        given = self.job.get("reference_profile")
        if op_profile.valid_profile(given):  # an earlier judge's of the same task, from the server
            self.res["reference_profile"] = given
            self.res["reference_profile_given"] = True
            return
        t0 = time.perf_counter()
        try:
            self.res["reference_profile"] = op_profile.op_profile(
                lambda: self._ref_forward(self.sets[0], "eval", self.seeds[0]), self.device)
        except Exception as e:
            self.res["reference_profile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        self.phases["reference_profile"] = timing.ms_since(t0)

    def _start_load(self):
        """Asks the candidate's process to load the task and the candidate
        (with the kernels an earlier run of the same source compiled,
        env.harness.kernel_cache), then to run every correctness trial and
        keep its output, while the judge computes the reference outputs;
        _load_candidate and _correctness read the answers. The trials'
        input seeds are drawn here, none known before the job ran."""
        self.unread = 0
        trials = self.opts["correctness_trials"] * (3 if self.strict else 1)
        self.seeds = [loader.fresh_seed() for _ in range(trials)]
        names, datas = kernel_cache.read_tree(self._kernel_entry())
        self.res["kernels_seeded"] = len(names)
        try:
            self.remote.send({"op": "load", "task_source": self.job["task_source"],
                              "candidate_source": self.job["candidate_source"], "seed": self.opts["seed"],
                              "cache_files": names}, datas)
            self.unread += 1
            for mode in CORRECTNESS_MODES:
                for seed in self.seeds:
                    self.remote.send({"op": "forward", "input_seed": seed, "mode": mode, "seed": seed, "defer": True})
                    self.unread += 1
        except remote.CandidateGone as e:
            self.stop("crash", f"while importing the candidate: {e}")

    def _kernel_entry(self):
        """The kernel store's entry for this candidate source (the server
        names the store in the job), or None."""
        store = self.job.get("kernel_store")
        return kernel_cache.entry_dir(store, self.job["candidate_source"]) if isinstance(store, str) else None

    def _harvest_kernels(self):
        """After an ok job, when the store has no entry for its source: the candidate's process's Triton cache, checked, goes to
        the job folder, for the server to publish (kernel_cache.publish)."""
        entry = self._kernel_entry()
        if entry is None or os.path.isdir(entry) or self.res["status"] != "ok":
            return
        try:
            ans, blobs = self.remote.request({"op": "cache"})
        except remote.CandidateGone:
            return
        names = ans.get("files")
        datas = [b.cpu().numpy().tobytes() for b in blobs]
        if names and kernel_cache.valid_files(names, [len(d) for d in datas]):
            try:
                kernel_cache.write_tree(os.path.join(self.workdir, kernel_cache.HARVEST_DIR), names, datas)
                self.res["kernels_harvested"] = len(names)
            except OSError:
                pass

    def _load_candidate(self):
        t0 = time.perf_counter()  # the load's time beyond the judge's own work beside it
        ans, _ = self.ask({}, "while importing the candidate", sent=True)
        if isinstance(ans.get("ms"), (int, float)):
            self.phases["candidate_load"] = float(ans["ms"])
        if isinstance(ans.get("prepare_ms"), (int, float)):
            self.phases["candidate_prepare"] = float(ans["prepare_ms"])
        if isinstance(ans.get("isolation"), dict):
            self.res["sandbox"] = dict(self.res["sandbox"] or {}, candidate=ans["isolation"])
        if "error" in ans:
            self.stop("error", str(ans["error"])[:2000])
        if "syntax" in ans:
            self.stop("compile_error", str(ans["syntax"])[:2000])
        self.check_guards()
        self.stop_if_hack()
        if ans.get("no_model"):
            self.stop("compile_error", "the candidate defines no ModelNew")
        if not ans.get("ok"):
            self.stop("error", "the candidate's process did not confirm that ModelNew was built")
        self.phases["load"] = self.phases.get("load", 0.0) + timing.ms_since(t0)

    def _forward(self, seed, mode, where, **extra):
        """One call in the candidate's process: (output, notes, answer)."""
        ans, blobs = self.ask(dict({"op": "forward", "input_seed": seed, "mode": mode, "seed": seed}, **extra),
                              where)
        self.res["compiled"] = True
        out, notes = self.output_of(ans, blobs, where)
        return out, notes, ans

    def _judge_output(self, mode, t, out):
        """The fp64 budget rule (error_budget.py) on one trial's output."""
        ref = self.ref_outs[mode][t]
        ref64 = self.ref64[t]
        if mode == "train" and ref64 is not None and not compare.identical(ref, self.ref_outs["eval"][t]):
            ref64 = None  # the reference depends on the mode: the fp64 copy ran in eval()
        return error_budget.judge(ref, out, ref64, self.atol, self.rtol, self.budget_k), ref64

    def _trial_claims(self):
        """Reads the answers to the correctness trials _start_load sent, in
        their order: [(mode, trial, answer)], each answer saying what the
        candidate's process kept (its number) and claims about the call."""
        claims = []
        for mode in CORRECTNESS_MODES:
            for t in range(len(self.seeds)):
                where = f"in forward ({mode} mode, trial {t})"
                ans, _ = self.ask({}, where, sent=True)
                self.res["compiled"] = True
                if not isinstance(ans.get("deferred"), int) or isinstance(ans.get("deferred"), bool):
                    self.stop("incorrect", f"{where}: the candidate's process kept no output")
                claims.append((mode, t, ans))
        return claims

    def _correctness(self):
        t0 = time.perf_counter()
        claims = self._trial_claims()
        # waiting for the candidate's process to finish its trials, beyond
        # the judge's own work beside them
        self.phases["correctness_wait"] = timing.ms_since(t0)
        launches = {}
        outs, ptrs = {}, {}
        first_failure = None
        worst = 0.0
        rule, ratio = "tolerance", None
        kernels = {}
        judged = 0.0
        for mode in CORRECTNESS_MODES:
            launches[mode] = 0
            outs[mode], ptrs[mode] = [], []
        # Each trial's output is asked for before the one before it is
        # judged: the candidate's process copies it out while the judge works.
        self._ask_trial_out(claims[0][2])
        for i, (mode, t, claim) in enumerate(claims):
            where = f"in forward ({mode} mode, trial {t})"
            ans, blobs = self.ask({}, where, sent=True)
            if i + 1 < len(claims):
                self._ask_trial_out(claims[i + 1][2])
            out, notes = self.output_of(ans, blobs, where)
            launches[mode] += remote.claimed_int(claim, "launches")
            if isinstance(claim.get("kernels"), dict):
                kernels = {str(k)[:100]: v for k, v in list(claim["kernels"].items())[:50]}
            t1 = time.perf_counter()
            v, ref64 = self._judge_output(mode, t, out)
            judged += timing.ms_since(t1)
            if v["max_abs_diff"] is not None:
                worst = max(worst, v["max_abs_diff"])
            if v["ratio"] is not None:
                ratio = v["ratio"] if ratio is None else max(ratio, v["ratio"])
            if error_budget.RULE_ORDER[v["rule"]] > error_budget.RULE_ORDER[rule]:
                rule = v["rule"]
            if not v["ok"] and first_failure is None:
                first_failure = f"{mode} mode, trial {t}: {v['message']}"
                m = error_budget.mismatch_report(self.ref_outs[mode][t], out, ref64, v, self.atol, self.rtol,
                                                 self.budget_k, {"mode": mode, "trial": t})
                if m is not None:
                    self.res["mismatch"] = m
            outs[mode].append(out)
            ptrs[mode].append({n.get("ptr") for n in notes if n.get("ptr")})
        self.res["launches"] = {"eval": launches["eval"], "train": launches["train"], "kernels": kernels}
        # The result travels as JSON without NaN or infinity (a NaN output
        # makes both infinite): unknown there, the mismatch says why.
        self.res["max_abs_diff"] = error_budget.finite_or_none(worst)
        self.res["correct_rule"] = rule
        self.res["error_ratio"] = error_budget.finite_or_none(ratio)
        if launches["eval"] == 0:
            self.hack("runtime:no_triton_launch_eval", "no Triton kernel of the candidate ran in eval() mode")
        if launches["train"] == 0:
            self.hack("runtime:no_triton_launch_train", "no Triton kernel of the candidate ran in train() mode")
        self._train_eval_check(outs)
        for mode in CORRECTNESS_MODES:
            o, r, p = outs[mode], self.ref_outs[mode], ptrs[mode]
            for i in range(len(o)):
                for j in range(i + 1, len(o)):
                    if p[i] & p[j]:
                        self.hack("runtime:output_reused",
                                  f"{mode} mode: trials {i} and {j} returned the same output storage")
                    elif compare.identical(o[i], o[j]) and not compare.identical(r[i], r[j]):
                        self.hack("runtime:output_reused",
                                  f"{mode} mode: trials {i} and {j} returned identical outputs for different inputs")
        self.check_guards()
        self.phases["correctness"] = timing.ms_since(t0)
        self.phases["correctness_judge"] = judged
        self.stop_if_hack()
        if first_failure is not None:
            self.stop("incorrect", first_failure)
        self.res["correct"] = True
        if rule == "fp64_budget":
            self._widen_for_sequence()

    def _ask_trial_out(self, claim):
        try:
            self.remote.send({"op": "trial_out", "trial": claim["deferred"]})
            self.unread += 1
        except remote.CandidateGone as e:
            self.stop("crash", f"while reading a correctness trial's output: {e}")

    def _train_eval_check(self, outs):
        """The recipe's check: on the same inputs the candidate's train() and
        eval() outputs may differ only as much as the budget allows, unless
        the reference's differ too (error_budget.train_eval_divergence)."""
        for t in range(len(self.seeds)):
            why = error_budget.train_eval_divergence(outs["eval"][t], outs["train"][t], self.ref_outs["eval"][t],
                                                     self.ref_outs["train"][t], self.ref64[t], self.atol, self.rtol,
                                                     self.budget_k)
            if why:
                self.hack("runtime:train_eval_divergence", f"trial {t}: the output {why}")
                return

    def _widen_for_sequence(self):
        """A candidate accepted by the fp64 budget is off the reference by up
        to (K + 1) times the reference's own error plus the tolerance; the
        later checks of the sequence (timed calls, the no-effect probe)
        compare with the task's atol/rtol, so atol grows by that much per
        magnitude class (error_budget.sequence_allowance), with a factor 2
        for input sets whose error runs larger than the trials'."""
        tables = None
        for t, ref64 in enumerate(self.ref64):
            if ref64 is None:
                continue
            leaf_tables = []
            for r, r64 in zip(compare.leaves(self.ref_outs["eval"][t]), compare.leaves(ref64)):
                if (isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel()
                        and isinstance(r64, torch.Tensor) and tuple(r64.shape) == tuple(r.shape)):
                    leaf_tables.append(error_budget.sequence_table(r, r64))
                else:
                    leaf_tables.append(None)
            if tables is None:
                tables = leaf_tables
            elif len(tables) == len(leaf_tables):
                tables = [None if x is None or y is None else error_budget.merge_tables(x, y)
                          for x, y in zip(tables, leaf_tables)]
        if tables is None:
            return
        self.seq_tables = tables
        widest = max([float(x.max()) for x in tables if x is not None], default=0.0)
        self.res["tolerance"]["sequence_atol"] = self.atol + 2 * (self.budget_k + 1) * widest

    def seq_atol(self, ref):
        """The atol for a check of the sequence against the reference output
        ref: the task's, or per element where the trials needed the budget."""
        tables = getattr(self, "seq_tables", None)
        if tables is None:
            return self.atol
        return error_budget.sequence_allowance(ref, tables, self.atol, self.budget_k)

    def _no_effect(self):
        """With the candidate's Triton launches swallowed, its output must
        change. Made at a random point of the sequence, in the sequence's
        mode, with inputs drawn like every other call's: no call count, mode
        or input tells it apart. (A candidate that reads its own launches'
        effects can still tell; on CUDA the profile's kernel times are the
        check that does not depend on it.)"""
        if not self.res["launches"]["train"]:
            return
        refs = self.ref_outs["train"]
        if len(refs) > 1 and all(compare.identical(refs[0], r) for r in refs[1:]):
            # The task's output does not depend on its inputs (a constant,
            # such as a softmax over one element): an output left unwritten
            # can hold those values by chance (zeroed memory), so the probe
            # tells nothing.
            return
        try:
            ans, blobs = self.remote.request({"op": "forward", "input_seed": self.ne_seed, "mode": "train",
                                              "seed": self.ne_seed, "buffer": 0, "swallow": True})
        except remote.CandidateGone as e:
            self.stop("crash", f"in a call of the sequence: {e}")
        self.patched += [p for p in remote.claimed_list(ans, "patched") if p not in self.patched]
        if "out" not in ans:
            return  # failing without its kernels is what an honest candidate does
        try:
            out = _to_device(wire.decode_value(ans["out"], blobs), self.device)
            ok, _, _ = compare.compare(self.ne_ref, out, self.seq_atol(self.ne_ref), self.rtol)
        except Exception:
            ok = False
        if ok:
            self.hack("runtime:triton_kernels_no_effect",
                      "the output stays correct with every Triton launch of the candidate skipped")

    def _sequence(self):
        t0 = time.perf_counter()
        sandbox.wait_gate()
        self.phases["gate"] = timing.ms_since(t0)
        t0 = time.perf_counter()
        n = self.pool_n
        calls, warmup = sequence_plan(self.opts, self.device.type, self.strict, n)
        probe_at = secrets.randbelow(calls + 1)
        if self.device.type == "cuda":
            self._timed_sequence(calls, warmup, probe_at)
        else:
            for i in range(calls):
                if i == probe_at:
                    self._no_effect()
                p = i % n
                where = f"in call {i} of the sequence"
                out, notes, ans = self._forward(self.pool_seeds[p], "train", where, buffer=i % 2, keep=True)
                ref = self.pool_ref(p)
                ok, _, message = compare.compare(ref, out, self.seq_atol(ref), self.rtol)
                if not ok:
                    self.hack("runtime:timed_output_mismatch",
                              f"call {i} of the timed sequence (input set {p}) was wrong after correct trials: {message}")
                    break
                if ans.get("reused"):
                    self.hack("runtime:output_reused", f"call {i} of the timed sequence returned an earlier output's storage")
                    break
            if probe_at == calls:
                self._no_effect()
        self.check_guards()
        self.stop_if_hack()
        self.res["sequence"] = {"calls": calls, "warmup": warmup, "input_sets": n}
        self.phases["time"] = timing.ms_since(t0)

    def _profile(self):
        if self.device.type != "cuda" or not self.opts["profile"]:
            return
        t0 = time.perf_counter()
        # Inputs no earlier call had, drawn now: the profiled call is not one
        # the candidate's process has seen before.
        ans, _ = self.ask({"op": "profile", "input_seed": loader.fresh_seed()}, "while profiling")
        prof = ans.get("profile")
        self.phases["profile"] = timing.ms_since(t0)
        if not isinstance(prof, dict):
            self.stop("crash", "the candidate's process returned no profile")
        if prof.get("source") == "unavailable":
            self.res["profile"] = {"kernels": [], "coverage": None, "side_streams": None,
                                   "source": "unavailable", "error": str(prof.get("error", ""))[:500]}
            return
        prof["kernels"] = prof.get("kernels", [])[:20]
        self.res["profile"] = prof
        if prof.get("side_streams"):
            self.hack("runtime:side_stream",
                      f"kernels ran on streams {prof.get('streams')} besides the timed stream {prof.get('timed_stream')}")
        total, mine = prof.get("total_time_us") or 0, prof.get("candidate_time_us") or 0
        if self.res["launches"]["eval"] > 0 and total > 0:
            share = mine / total
            if share < NO_TIME_SHARE and mine < NO_TIME_US:
                self.hack("runtime:candidate_kernels_no_time",
                          f"the candidate's Triton kernels take {mine:.2f} us of {total:.1f} us per forward "
                          f"({100 * share:.2f}%)")


def _to_device(x, device):
    if isinstance(x, list):
        return [_to_device(e, device) for e in x]
    if isinstance(x, torch.Tensor):
        return x.to(device)
    return x


# Set by the server from DK_KG_PYPROFILE (a line count) before it forks: the
# child then runs under cProfile and returns its top lines by cumulative time
# in the result's "pyprofile" field, then its top lines by own time, to
# find where per-job time goes.
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
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("cumulative").print_stats(PYPROFILE_LINES)
        # and by own time: where the host waits (synchronize, pipe reads)
        stats.sort_stats("tottime").print_stats(PYPROFILE_LINES)
        ev.res["pyprofile"] = text.getvalue()[-40000:]


def evaluate(job, opts, isolation, want_modules=False):
    """Entry point in the judge: returns the result dict (protocol fields
    plus launches, tolerance, sandbox, sequence, strict). want_modules (the
    server's warm-up job) adds the modules the candidate's process imported
    since it was forked, in "candidate_modules"."""
    ev = Evaluation(job, opts, isolation)
    ev.want_modules = want_modules
    try:
        return _profiled_run(ev) if PYPROFILE_LINES > 0 else ev.run()
    except BaseException as e:
        res = ev.res
        res["status"] = "error"
        res["error"] = f"internal error in the evaluation: {type(e).__name__}: {e}\n{exception_text(e)}"
        return res
