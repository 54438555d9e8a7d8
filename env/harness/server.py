"""The warm KernelGym evaluation server.

    python -m env.harness.server        (cwd or PYTHONPATH = the source root)

Imports torch and triton once (a fresh `import torch, triton` costs seconds;
a fork of this process costs milliseconds), never touches CUDA itself, and
answers jobs read one JSON object per line from stdin, in order, one at a
time. Each job is evaluated in a sandboxed judge (env.harness.sandbox,
env.harness.evaluate) forked from here, with the candidate's process forked
from the judge, so every job gets fresh CUDA contexts. Results go, one
JSON object per line, to fd 3 (the C worker's private pipe), or to stdout
when fd 3 is not open; logs go to stderr. The first line written is
{"ready": true, ...}. EOF on stdin ends the server with exit code 0.

Line kinds: a job (see env.harness.protocol), {"kind": "ping"} answered
{"pong": true}, {"kind": "gpu_check", "gpu": N} answered {"gpu_ok": ...},
{"kind": "status"} answered {"spare_pids": [PID, ...]} and "spare_pid" (the
first or null) (see DK_KG_PREFORK).

Environment: DK_KG_CACHE (cache dir, default ~/.cache/drkernel/kernelgym:
reference timings, Triton and CUDA compile caches; the candidate's process
sees none of it, only a copy of the Triton cache the server pre-built),
DK_KG_TMP (where job directories are made, default the system temp dir),
DK_KG_HIDE (colon-separated folders the candidate's process must not see,
besides the temp dirs, /dev/shm, /run and the cache), DK_KGPROF_LIB / DK_BUILD
(where libkgprof.so is), DK_KG_GPU_MEMORY_GB (> 0: a job's judge and candidate's process may
together hold at most this much GPU memory, half each, so a worker beside
the trainer cannot push it out of memory), DK_KG_PYPROFILE (N > 0: each result carries the
child's N costliest Python calls in "pyprofile"), DK_KG_PREFORK (how many
children are forked ahead of their jobs, sandbox and CUDA contexts ready,
default 3; 0 forks each child when its job arrives), DK_KG_RESERVE_MB (GPU
memory each process of a job takes into its allocator before its job,
default 2048; 0: none), DK_KG_GATE (1: a job
waits, before its timed calls, for the setup of the child forked during it;
default off), DK_KG_CLEAN_CACHE_S (how long a
task's clean timing baseline is handed to later judges, default 600; 0:
every judge times its own).
"""

import functools
import hashlib
import importlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time

import torch
import torch._dynamo  # noqa: F401  here once, not in every child (guards.py says why it is needed)
import triton

from env.harness import (candidate_sandbox, error_budget, evaluate, forker, guards, judge_timing, kernel_cache,
                         op_profile, profiler, protocol, reference, sandbox, timing)

GPU_CHECK_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 120.0
RECHECK_SLOWDOWN = 0.5   # the strict re-run must keep at least this share of the speedup
RECHECK_RUNS = 2         # strict re-runs at most: a slowdown must repeat to count
# Besides every speedup above recheck_speedup, this share of all other
# reward-bearing speedups (above 1) is re-measured, drawn from os.urandom:
# no speedup is safe from the re-run.
RECHECK_SAMPLE = 0.25
JUDGE_RETRIES = 1        # re-runs of a job whose judge died
# A judge's clean baseline (judge_timing.JudgeTiming._clean_baseline: the
# reference and the empty batch timed before any candidate code ran) is
# kept per task, GPU and options and handed to the next judges of the same
# task for this long, then measured again; at most CLEAN_CACHE_MAX tasks.
# The reference's op profile is kept the same way.
CLEAN_CACHE_S = 600.0
CLEAN_CACHE_MAX = 512
PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
              "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH", "NCCL_NVLS_ENABLE",
              "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def speedup_of(ref, cand):
    """Reference median over candidate median, from two runtime summaries
    (timing.summarize); None when either is missing or not positive."""
    if not ref or not cand or not cand.get("median") or cand["median"] <= 0:
        return None
    return ref["median"] / cand["median"]


def _keep(cache, key, value):
    """cache[key] = (now, value), the oldest entry dropped at CLEAN_CACHE_MAX."""
    if key not in cache and len(cache) >= CLEAN_CACHE_MAX:
        cache.pop(min(cache, key=lambda k: cache[k][0]))
    cache[key] = (time.monotonic(), value)


def recheck_drawn():
    """True for a RECHECK_SAMPLE share of calls, unpredictably."""
    return int.from_bytes(os.urandom(4), "little") < RECHECK_SAMPLE * (1 << 32)


def log(msg):
    sys.stderr.write(f"[kernelgym-harness {os.getpid()}] {msg}\n")
    sys.stderr.flush()


def sanitize(x):
    """JSON without NaN/Infinity: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: sanitize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sanitize(v) for v in x]
    return x


def warm_triton():
    """Work every child would repeat on its first Triton launch that needs no
    GPU, done once here so forked children inherit the results: Triton's
    compile-cache key hashes its whole native library (about 0.3 s for 500
    MB) and its CUDA backend looks for libcuda with `ldconfig -p`. Both are
    memoised functions; neither touches the driver."""
    done = []
    calls = [("triton.runtime.cache", "triton_key", ()), ("triton.compiler.compiler", "triton_key", ()),
             ("triton.backends.nvidia.driver", "libcuda_dirs", ())]
    # The backend's hash runs `ptxas --version` per architecture (Hopper and
    # Blackwell share a ptxas; older parts use another).
    calls += [("triton.backends.nvidia.compiler", "get_ptxas_version", (arch,)) for arch in (80, 90)]
    for module, name, args in calls:
        try:
            getattr(importlib.import_module(module), name)(*args)
            done.append(f"{module}.{name}{args if args else ''}")
        except Exception:  # an older or newer Triton, or no libcuda / ptxas here
            pass
    try:
        from triton.backends.nvidia import compiler as nv

        nv.file_hash(os.path.join(os.path.dirname(nv.__file__), "lib", "libdevice.10.bc"))
        done.append("libdevice hash")
    except Exception:
        pass
    return done


def _probe_target(isolation):
    info = {"isolation": isolation, "cuda": False, "gpus": []}
    try:
        if torch.cuda.is_available():
            info["cuda"] = True
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {e}"
    return info


def _gpu_check_target(isolation):
    try:
        x = torch.arange(1024, dtype=torch.float32, device="cuda")
        s = float(x.sum())
        torch.cuda.synchronize()
        if s != 523776.0:
            return {"gpu_ok": False, "error": f"a reduction on the GPU gave {s}, expected 523776"}
        return {"gpu_ok": True, "error": ""}
    except Exception as e:
        return {"gpu_ok": False, "error": f"{type(e).__name__}: {e}"}


KGPROF_PROBE_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def kgprof_probe_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)
"""


def _kgprof_probe_target(isolation):
    """Runs libkgprof once around a torch kernel and a Triton kernel: the
    records must name the Triton kernel as the launch counter knows it."""
    from env.harness import loader

    try:
        prof, why = profiler.load_kgprof()
        if prof is None:
            return {"ok": False, "error": why}
        mod = loader.load_module("kg_kgprof_probe", KGPROF_PROBE_KERNEL, os.getcwd())
        x = torch.zeros(4096, device="cuda")
        mod.kgprof_probe_kernel[(4,)](x, 4096, BLOCK=1024)
        torch.cuda.synchronize()
        prof.start()
        identity = prof.attribution()
        x.add_(1)
        if identity:
            prof.push()
        mod.kgprof_probe_kernel[(4,)](x, 4096, BLOCK=1024)
        if identity:
            prof.pop()
        torch.cuda.synchronize()
        prof.stop()
        recs = prof.records()
        names = [r[0] for r in recs]
        ok = len(recs) >= 2 and any(profiler.is_candidate_kernel(n, ["kgprof_probe_kernel"]) for n in names)
        # By identity, exactly the marked launch's kernel is the candidate's.
        marked = [r[0] for r in recs if r[4]]
        identity_ok = identity and len(marked) == 1 and profiler.is_candidate_kernel(marked[0], ["kgprof_probe_kernel"])
        return {"ok": ok, "records": [[r[0][:80], r[1], r[3] - r[2], r[4]] for r in recs],
                "attribution": "correlation" if identity_ok else "name",
                "error": "" if ok else f"unexpected records {names}"}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


WARM_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
"""

WARM_CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def warm_relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        warm_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""


def _warm_job_target(isolation):
    """One whole evaluation of a tiny honest job, reporting the modules its
    judge and its candidate's process imported that the server had not:
    children run with bytecode writing off, so each such module is compiled
    from source in every job (about 0.1 s in all) unless the server imports
    it first."""
    before = set(sys.modules)
    job = {"id": "warm-up", "device": "cuda", "task_source": WARM_TASK, "candidate_source": WARM_CANDIDATE}
    opts = protocol.resolve_options({"perf_trials": 20})
    res = evaluate.evaluate(job, opts, isolation, want_modules=True)
    return {"status": res.get("status"), "error": res.get("error", "")[:300],
            "modules": sorted(m for m in set(sys.modules) - before if not m.startswith("kg_")),
            "candidate_modules": [m for m in res.get("candidate_modules", []) if not m.startswith("kg_")]}


def _seed_cache_target(isolation):
    """Builds, in the server's Triton cache, what every job's first launch
    needs (the driver's utility module, the launcher of a common signature):
    the candidate's process copies this cache into its own at its start.
    Only this trusted kernel ever writes it."""
    from env.harness import loader

    try:
        mod = loader.load_module("kg_seed_candidate", WARM_CANDIDATE, os.getcwd())
        x = torch.randn(4096, device="cuda")
        y = mod.ModelNew()(x)
        torch.cuda.synchronize()
        return {"ok": bool(torch.equal(y, torch.relu(x)))}
    except Exception as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def _prepare_child(device):
    """prepare_child for device, in a form the fork server is sent."""
    return functools.partial(prepare_child, device)


def prepare_child(device, isolation):
    """The setup a child forked ahead does before its job: the CUDA context,
    then cuBLAS and cuDNN handles (the first matmul or convolution of a
    process costs tens of ms more), best effort."""
    if device != "cuda":
        return
    t0 = time.perf_counter()
    evaluate.cuda_context()
    evaluate.AHEAD_MS["ahead_context"] = timing.ms_since(t0)
    t0 = time.perf_counter()
    try:
        a = torch.ones(8, 8, device="cuda")
        a @ a
        x = torch.ones(1, 1, 4, 4, device="cuda")
        torch.nn.functional.conv2d(x, torch.ones(1, 1, 3, 3, device="cuda"))
        torch.cuda.synchronize()
    except Exception:  # the job will meet the same problem and report it
        pass
    # the timed loop's own buffers and kernels (timing.prewarm)
    evaluate.AHEAD_MS["ahead_handles"] = timing.ms_since(t0)
    t0 = time.perf_counter()
    timing.prewarm(torch.device("cuda"), guards.Timers())
    evaluate.AHEAD_MS["ahead_prewarm"] = timing.ms_since(t0)
    # the judge's own rule on the outputs (error_budget.prewarm)
    t0 = time.perf_counter()
    error_budget.prewarm(torch.device("cuda"))
    evaluate.AHEAD_MS["ahead_judge"] = timing.ms_since(t0)
    # memory for the job's tensors, taken from the driver now
    # (timing.reserve_memory), and the first free-memory query (its first
    # call in a process costs tens of ms; error_budget.fp64_device asks)
    t0 = time.perf_counter()
    evaluate.reserve_memory(torch.device("cuda"))
    try:
        torch.cuda.mem_get_info()
    except Exception:
        pass
    evaluate.AHEAD_MS["ahead_reserve"] = timing.ms_since(t0)


def prefork_depth(value):
    """DK_KG_PREFORK: how many children are forked ahead of their jobs (0:
    none, each job forks its own when it arrives). Unset: 3. A child's
    setup (its sandbox, its candidate's process, both CUDA contexts, the
    handles and the judge's prewarm: about 1.0 s on an H200) then has
    three jobs' time to finish. In one call on an H100
    (tools/bench/bench_kernelgym.py --jobs 20 --runs 3), 12 of 60 jobs
    waited for their child with two (median 123 ms), none with three; the
    median overhead was the same (0.71 and 0.70 s). The memory reservation
    (timing.reserve_memory) later made jobs shorter and setups longer: 0 to
    5 of 60 jobs wait with three."""
    if value is None or value.strip() == "":
        return 3
    try:
        n = int(value)
    except ValueError:
        raise SystemExit(f"DK_KG_PREFORK={value!r}: expected a whole number of children (0, 1, 2, ...)")
    if not 0 <= n <= 8:
        raise SystemExit(f"DK_KG_PREFORK={value!r}: expected 0 to 8 children")
    return n


def setup_wait_ms(payload):
    """How long a job, handed over at payload's sent_at (the server's
    monotonic clock), waited for its judge's setup ahead (prepare_child),
    finished at ready_at (the judge's, the same CLOCK_MONOTONIC): 0 when
    the judge was ready first; None without both times."""
    sent, ready = payload.get("sent_at"), payload.get("ready_at")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in (sent, ready)):
        return None
    return max(0.0, ready - sent) * 1000.0


def _run_job(payload, isolation):
    wait = setup_wait_ms(payload)
    if wait is not None:
        evaluate.AHEAD_MS["setup_wait"] = wait
    return evaluate.evaluate(payload["job"], payload["opts"], isolation)


def warm_imports(names):
    """Imports the modules a GPU child needed; returns how many loaded."""
    n = 0
    for name in names:
        try:
            importlib.import_module(name)
            n += 1
        except BaseException:  # a module that only loads inside a CUDA child
            pass
    return n


class Server:
    def __init__(self):
        self.forker = None  # made at the end of start()
        self.cache_dir = os.environ.get("DK_KG_CACHE") or os.path.join(
            os.path.expanduser("~"), ".cache", "drkernel", "kernelgym")
        self.compile_dirs = {name: os.path.join(self.cache_dir, name) for name in ("triton", "nv", "inductor")}
        self.writable_dirs = list(self.compile_dirs.values())  # besides the job's own directory
        # Kernels kept per candidate source (env.harness.kernel_cache): judges
        # read it, only the server writes it.
        self.kernel_store = os.path.join(self.cache_dir, "kernels")
        for d in list(self.compile_dirs.values()) + [os.path.join(self.cache_dir, "ref"), self.kernel_store]:
            os.makedirs(d, exist_ok=True)
        base = os.environ.get("DK_KG_TMP") or tempfile.gettempdir()
        self.tmp_base = os.path.join(base, f"dk-kernelgym-{os.getpid()}")
        os.makedirs(self.tmp_base, exist_ok=True)
        self.visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.kgprof = profiler.kgprof_path()
        self.versions = {"torch": torch.__version__, "triton": triton.__version__}
        self.cuda = False
        self.gpus = []
        self.prefork = prefork_depth(os.environ.get("DK_KG_PREFORK"))
        self.spares = []  # children forked ahead, oldest first
        self.isolation = {}
        self.clean = {}  # clean_key -> (monotonic time, baseline)
        self.profiles = {}  # clean_key -> (monotonic time, the reference's op profile)
        self.clean_cache_s = CLEAN_CACHE_S  # main() sets DK_KG_CLEAN_CACHE_S's
        try:
            os.fstat(3)
            self.out = os.fdopen(3, "w", buffering=1, encoding="utf-8")
        except OSError:
            self.out = sys.stdout

    # ---- plumbing -------------------------------------------------------------
    def write(self, obj):
        self.out.write(json.dumps(sanitize(obj), allow_nan=False) + "\n")
        self.out.flush()

    def child_env(self, workdir, device, gpu):
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update({
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TRITON_CACHE_DIR": self.compile_dirs["triton"],
            "CUDA_CACHE_PATH": self.compile_dirs["nv"],
            "TORCHINDUCTOR_CACHE_DIR": self.compile_dirs["inductor"],
        })
        # Children find libkgprof only through this variable, so a library
        # that failed the startup self-test is really switched off.
        env["DK_KGPROF_LIB"] = self.kgprof or ""
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif device == "cuda":
            if self.visible:
                ids = [v.strip() for v in self.visible.split(",") if v.strip()]
                env["CUDA_VISIBLE_DEVICES"] = ids[gpu] if gpu < len(ids) else str(gpu)
            else:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        elif self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        return env

    def start_child(self, target, device, gpu, limits, judge=False):
        """A sandboxed child calling target(isolation) in a new job directory;
        a judge (see candidate_spec) forks its candidate's process first."""
        workdir = tempfile.mkdtemp(prefix="job-", dir=self.tmp_base)
        env = self.child_env(workdir, device, gpu)
        if judge:
            return sandbox.start(target, limits, workdir, env, [], candidate=self.candidate_spec(env, device))
        return sandbox.start(target, limits, workdir, env, self.writable_dirs)

    def candidate_spec(self, env, device):
        """The candidate's process: the child's environment, and hidden from
        it the server's caches, job directories and DK_KG_HIDE (a
        colon-separated list of more directories, e.g. where credentials
        live)."""
        hidden = [self.cache_dir, self.tmp_base]
        hidden += [d for d in os.environ.get("DK_KG_HIDE", "").split(":") if d]
        seed = self.compile_dirs["triton"] if device == "cuda" else None
        return candidate_sandbox.CandidateSpec(device, env, hidden, seed_cache=seed)

    @staticmethod
    def finish_child(child, next_spare=None, keep=None):
        """Supervises a child to its end (sandbox.finish); its job directory
        goes with it, after keep(workdir) when given."""
        try:
            return sandbox.finish(child, next_spare=next_spare)
        finally:
            if keep is not None:
                try:
                    keep(child.workdir)
                except OSError as e:
                    log(f"keeping a job's files failed: {e}")
            shutil.rmtree(child.workdir, ignore_errors=True)

    def run_child(self, target, device, gpu, limits, judge=False):
        return self.finish_child(self.start_child(target, device, gpu, limits, judge))

    @staticmethod
    def limits(opts, device, timeout_s=None):
        return sandbox.Limits(timeout_s=timeout_s or opts["timeout_s"], cpu_time_s=opts["cpu_time_s"],
                              memory_limit_gb=opts["memory_limit_gb"], max_procs=opts["max_procs"],
                              device=device)

    # ---- startup ---------------------------------------------------------------
    def start(self):
        sandbox.server_setup()
        self.warmed = warm_triton()
        opts = protocol.resolve_options({})
        out = self.run_child(_probe_target, "probe", 0, self.limits(opts, "cuda", PROBE_TIMEOUT_S))
        if out.kind == "message":
            self.cuda = bool(out.message.get("cuda"))
            self.gpus = out.message.get("gpus", [])
            self.isolation = out.message.get("isolation", {})
            if out.message.get("error"):
                log(f"CUDA probe: {out.message['error']}")
        else:
            log(f"the startup probe failed ({out.kind}: {out.detail}); assuming no GPU")
        for note in self.isolation.get("notes", []):
            log(f"sandbox: {note}")
        if self.cuda:
            self.warm_child_imports(opts)
        self.kgprof_error = None
        if self.cuda and self.kgprof:
            out = self.run_child(_kgprof_probe_target, "cuda", 0, self.limits(opts, "cuda", PROBE_TIMEOUT_S))
            if out.kind != "message" or not out.message.get("ok"):
                self.kgprof_error = (out.message or {}).get("error") if out.kind == "message" else f"{out.kind}: {out.detail}"
                log(f"libkgprof failed its self-test ({self.kgprof_error}); profiles fall back to torch.profiler")
                self.kgprof = None
            else:
                self.kgprof_records = out.message.get("records")
                self.kgprof_attribution = out.message.get("attribution")
                if self.kgprof_attribution != "correlation":
                    log("libkgprof cannot tie kernels to the launches that made them here; "
                        "profiles attribute kernels by name")
        # Every judge from here on is forked by the fork server, made now,
        # before the first job (env/harness/forker.py says why).
        self.forker = forker.Forker()
        self.write({"ready": True, "pid": os.getpid(), "torch": torch.__version__, "triton": triton.__version__,
                    "python": sys.version.split()[0], "cuda": self.cuda, "gpus": self.gpus,
                    "isolation": {k: self.isolation.get(k, False)
                                  for k in ("network", "filesystem", "capabilities_dropped")},
                    "kgprof": self.kgprof, "kgprof_error": self.kgprof_error,
                    "kgprof_probe": getattr(self, "kgprof_records", None),
                    "kgprof_attribution": getattr(self, "kgprof_attribution", None), "warmed": self.warmed})

    def warm_child_imports(self, opts):
        """Runs a warm-up job, imports here what its child imported, then
        checks that a child still gets a working GPU: an import that started
        the CUDA driver in this process would break every later fork."""
        t0 = time.monotonic()
        out = self.run_child(_warm_job_target, "cuda", 0, self.limits(opts, "cuda", PROBE_TIMEOUT_S), judge=True)
        if out.kind != "message" or out.message.get("status") != "ok":
            why = out.message.get("error") if out.kind == "message" else f"{out.kind}: {out.detail}"
            log(f"the warm-up job failed ({why}); children import their modules themselves")
            return
        n = warm_imports(out.message.get("modules", []) + out.message.get("candidate_modules", []))
        seeded = self.run_child(_seed_cache_target, "cuda", 0, self.limits(opts, "cuda", PROBE_TIMEOUT_S))
        if seeded.kind != "message" or not seeded.message.get("ok"):
            log(f"pre-building the Triton cache failed ({seeded.message if seeded.kind == 'message' else seeded.detail}); "
                "each job builds Triton's launchers itself")
        check = self.run_child(_gpu_check_target, "cuda", 0, self.limits(opts, "cuda", GPU_CHECK_TIMEOUT_S))
        if check.kind != "message" or not check.message.get("gpu_ok"):
            raise RuntimeError("after importing the warm-up job's modules, a child no longer gets a working GPU "
                               f"({check.message.get('error') if check.kind == 'message' else check.detail})")
        self.warmed.append(f"{n} child modules ({time.monotonic() - t0:.1f} s)")

    # ---- jobs ------------------------------------------------------------------
    def validate(self, job, opts):
        """Returns an error message for a job that cannot be evaluated."""
        for field in ("task_source", "candidate_source"):
            src = job.get(field)
            who = "task" if field == "task_source" else "candidate"
            if not isinstance(src, str):
                return f"the job has no {field} string"
            if len(src) > opts["max_source_bytes"]:
                return f"the {who} is over the size limit of {opts['max_source_bytes']} bytes ({len(src)} characters)"
            try:
                n = len(src.encode("utf-8"))
            except UnicodeEncodeError as e:
                return f"the {who} is not valid UTF-8 (undecodable byte at character {e.start})"
            if n > opts["max_source_bytes"]:
                return f"the {who} is {n} bytes, over the size limit of {opts['max_source_bytes']} bytes"
            if not src.strip():
                return f"the {who} is empty"
            if "\x00" in src:
                return f"the {who} contains NUL bytes"
        device = job["device"]
        if device not in ("cuda", "cpu"):
            return f"unknown device {device!r} (cuda or cpu)"
        gpu = job.get("gpu", 0)
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            return f"gpu must be a GPU index, got {gpu!r}"
        if device == "cuda":
            if not self.cuda:
                return "device cuda was asked for but this server sees no GPU"
            if gpu >= len(self.gpus):
                return f"gpu {gpu} does not exist (this server sees {len(self.gpus)})"
        return None

    def outcome_result(self, job_id, out):
        if out.kind == "message":
            res = protocol.merge_child_result(protocol.new_result(job_id), out.message)
            res["id"] = job_id
            return res
        res = protocol.new_result(job_id)
        res["status"] = "timeout" if out.kind == "timeout" else "crash"
        err = out.detail
        tail = out.stderr_tail.strip()
        if tail and out.kind in ("died", "no_message"):
            err += "\nstderr tail:\n" + tail[-1500:]
        res["error"] = err
        return res

    def spawn_spare(self, key, limits, device, gpu):
        """Forks a later job's child now, while fewer than DK_KG_PREFORK
        are waiting, so that its sandbox and CUDA contexts are ready when
        that job arrives; it joins self.spares. Returns it, or None."""
        if len(self.spares) >= self.prefork:
            return None
        workdir = tempfile.mkdtemp(prefix="job-", dir=self.tmp_base)
        env = self.child_env(workdir, device, gpu)
        try:
            child = self.fork_judge(key, limits, device, gpu, workdir, env)
        except forker.ForkerGone:
            raise
        except OSError as e:
            shutil.rmtree(workdir, ignore_errors=True)
            log(f"cannot fork a child ahead ({e}); jobs start their own")
            return None
        self.spares.append(child)
        return child

    def fork_judge(self, key, limits, device, gpu, workdir=None, env=None):
        """A judge forked by the fork server, waiting for its job (sent with
        sandbox.send_job). Raises OSError when it cannot be forked, and
        ForkerGone when the fork server is gone."""
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="job-", dir=self.tmp_base)
            env = self.child_env(workdir, device, gpu)
        try:
            return sandbox.spawn_ahead(_prepare_child(device), _run_job, limits, workdir, env, [], key,
                                       candidate=self.candidate_spec(env, device), forker=self.forker)
        except OSError:
            shutil.rmtree(workdir, ignore_errors=True)
            raise

    def drop_spares(self, keep_key=None):
        """Discards the children forked ahead, or those whose key is not
        keep_key."""
        kept = []
        for spare in self.spares:
            if keep_key is not None and spare.key == keep_key:
                kept.append(spare)
                continue
            sandbox.discard(spare)
            shutil.rmtree(spare.workdir, ignore_errors=True)
        self.spares = kept

    def run_candidate(self, job, opts):
        """Runs the job in a judge. A judge that dies without a verdict (it
        never runs candidate code, and the candidate's process cannot see
        or signal it) is an infrastructure fault: the job runs again in a
        fresh judge, up to JUDGE_RETRIES times, before it is a crash."""
        for attempt in range(JUDGE_RETRIES + 1):
            res, judge_died = self.run_judge(job, opts)
            if not judge_died:
                break
            log(f"job {job.get('id')}: the judge died ({res['error'][:200]}); "
                f"{'running it again' if attempt < JUDGE_RETRIES else 'giving up'}")
        if attempt:
            res["infra_retries"] = attempt
        return res

    @staticmethod
    def clean_key(job, opts):
        digest = hashlib.sha256(job["task_source"].encode("utf-8", errors="surrogateescape")).hexdigest()
        return (digest, job["device"], job.get("gpu", 0), opts["seed"], opts["reference_mode"], opts["warmup"])

    def clean_for(self, job, key):
        """The job as its judge gets it: with the clean baseline an earlier
        judge of the same task (clean_key) measured, while it is fresh
        (never one the job itself carries: only the server's own figures
        count)."""
        job = dict(job)
        job.pop("clean_baseline", None)
        job.pop("reference_profile", None)
        hit = self.clean.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.clean_cache_s:
            job["clean_baseline"] = hit[1]
        hit = self.profiles.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.clean_cache_s:
            job["reference_profile"] = hit[1]
        return job

    def keep_clean(self, key, res):
        """Takes the clean baseline a judge measured out of its result, and
        keeps the reference's op profile it measured, for the next judges of
        the task."""
        clean = res.pop("clean_baseline", None)
        if judge_timing.valid_clean_baseline(clean):
            _keep(self.clean, key, clean)
        # The reference's op profile (the feedback's bottleneck line) is the
        # task's, not the candidate's: measured once, then handed on.
        if not res.pop("reference_profile_given", False) and op_profile.valid_profile(res.get("reference_profile")):
            _keep(self.profiles, key, res["reference_profile"])

    def run_judge(self, job, opts):
        key = self.clean_key(job, opts)
        res, died = self.run_judge_once(self.clean_for(job, key), opts)
        self.keep_clean(key, res)
        return res, died

    def run_judge_once(self, job, opts):
        device, gpu = job["device"], job.get("gpu", 0)
        limits = self.limits(opts, device)
        key = (device, gpu, limits.timeout_s, limits.cpu_time_s, limits.memory_bytes, limits.max_procs)
        child, ahead = None, False
        self.drop_spares(keep_key=key)
        while child is None and self.spares:
            spare = self.spares.pop(0)
            if sandbox.send_job(spare, {"job": job, "opts": opts}):
                child, ahead = spare, True
            else:
                shutil.rmtree(spare.workdir, ignore_errors=True)
        if child is None:
            # forked now by the fork server, given its job through its pipe
            child = self.fork_judge(key, limits, device, gpu)
            if not sandbox.send_job(child, {"job": job, "opts": opts}):
                # It died (or hung) before it read the job: no candidate
                # code ran, so this is an infrastructure fault like a judge
                # killed mid-job, and run_candidate runs the job again.
                shutil.rmtree(child.workdir, ignore_errors=True)
                return protocol.error_result(job.get("id"), "a judge forked for the job did not take it"), True
        # One child is forked ahead per job, at its start; the depth is
        # reached one child at a time (below), so no two set up at once
        # beside a job's timed calls.
        nxt = self.spawn_spare(key, limits, device, gpu)
        source = job["candidate_source"]
        out = self.finish_child(child, next_spare=nxt, keep=lambda workdir: kernel_cache.publish(
            self.kernel_store, source, os.path.join(workdir, kernel_cache.HARVEST_DIR)))
        res = self.outcome_result(job.get("id"), out)
        if res["status"] in ("crash", "timeout"):
            # After a crash or a kill the next job gets a process forked
            # after the GPU check, not one that was set up beside the fault.
            self.drop_spares()
        else:
            # below the depth (the first jobs): one more, after this job's
            # timed calls, ready for the job after next
            self.spawn_spare(key, limits, device, gpu)
        res["phases_ms"]["child_wall"] = out.wall_s * 1000.0
        if nxt is not None and nxt.ready_at is not None:
            # how long the next job's child took to set up, beside this job
            res["phases_ms"]["spare_ready"] = (nxt.ready_at - nxt.t0) * 1000.0
        res["forked_ahead"] = ahead
        return res, out.kind in ("died", "no_message")

    def reference_timing(self, job, opts, gpu_name):
        """(ref_runtime_ms or None, cached, error)."""
        key = reference.cache_key(job["task_source"], gpu_name, opts, self.versions)
        cached = reference.cache_read(self.cache_dir, key)
        if cached:
            return cached, True, ""
        timeout = opts["timeout_s"] if opts["reference_mode"] == "eager" else max(opts["timeout_s"], 600)
        out = self.run_child(lambda iso: reference.time_reference(job, opts, iso), "cuda", job.get("gpu", 0),
                             self.limits(opts, "cuda", timeout))
        if out.kind != "message":
            return None, False, f"reference timing {out.kind}: {out.detail}"
        msg = out.message
        if msg.get("status") != "ok" or not msg.get("ref_runtime_ms"):
            return None, False, msg.get("error", "reference timing failed")
        try:
            reference.cache_write(self.cache_dir, key, gpu_name, msg["ref_runtime_ms"])
        except OSError as e:
            log(f"cannot write the reference cache: {e}")
        return msg["ref_runtime_ms"], False, ""

    def eval_job(self, job):
        t0 = time.monotonic()
        job_id = job.get("id")
        try:
            opts = protocol.resolve_options(job.get("options"))
        except protocol.JobError as e:
            return protocol.error_result(job_id, f"bad job: {e}")
        job = dict(job)
        job["device"] = job.get("device") or ("cuda" if self.cuda else "cpu")
        job["kernel_store"] = self.kernel_store
        problem = self.validate(job, opts)
        if problem:
            return protocol.error_result(job_id, problem)
        res = self.run_candidate(job, opts)
        if res["status"] == "ok" and res.get("timing_available") and res.get("runtime_ms"):
            if not (res.get("reference_interleaved") and res.get("ref_runtime_ms")):
                # A compiled reference: timed in its own child, cached per
                # task, GPU model and options (env.harness.reference).
                t1 = time.monotonic()
                ref, cached, err = self.reference_timing(job, opts, res.get("gpu_name", "gpu"))
                res["phases_ms"]["reference"] = (time.monotonic() - t1) * 1000.0
                res["reference_cached"] = cached
                res["ref_runtime_ms"] = ref
                res["speedup"] = speedup_of(ref, res["runtime_ms"])
                if ref is None:
                    res["error"] = err
            if res["speedup"] is not None and not opts["strict"] and (
                    res["speedup"] > opts["recheck_speedup"]
                    or (res["speedup"] > 1.0 and recheck_drawn())):
                self.recheck(job, opts, res)
        res["task_name"] = job.get("task_name")
        res["phases_ms"]["total"] = (time.monotonic() - t0) * 1000.0
        return res

    def recheck(self, job, opts, res):
        """A speedup above the threshold, or one drawn at random
        (RECHECK_SAMPLE), is re-measured in strict mode in a fresh judge and
        candidate's process (more seeds, fresh inputs for every timed call);
        failing it is a hack, and so is losing more than half the speedup in
        RECHECK_RUNS re-runs in a row."""
        strict = dict(opts, strict=True)
        claimed = res["speedup"]
        slow = []  # speedups of re-runs that lost more than half
        for runs in range(1, RECHECK_RUNS + 1):
            r2 = self.run_candidate(job, strict)
            again = None
            if r2["status"] == "ok" and r2.get("runtime_ms"):
                # The re-run's own reference when it timed one beside it,
                # else the first run's (a compiled reference, from the cache).
                again = r2.get("speedup") if r2.get("reference_interleaved") else \
                    speedup_of(res["ref_runtime_ms"], r2["runtime_ms"])
            # Only a slowdown with nothing else wrong runs again: a fresh
            # process's timing can draw a slow host path (a forward bound
            # by its launches), and a slowdown that repeats is the candidate's.
            if r2["status"] != "ok" or again is None or again >= RECHECK_SLOWDOWN * claimed:
                break
            slow.append(again)
        res["recheck"] = {"status": r2["status"], "speedup": again, "runtime_ms": r2.get("runtime_ms"),
                          "hack_reasons": r2["hack"]["reasons"], "error": r2.get("error", "")[:1000],
                          "runs": runs}
        if slow:
            res["recheck"]["slow_speedups"] = slow
        if r2["status"] != "ok":
            for reason in r2["hack"]["reasons"]:
                protocol.add_hack(res, reason)
            protocol.add_hack(res, "runtime:implausible_speedup_failed_recheck",
                              f"speedup {claimed:.1f}x; the strict re-run ended {r2['status']}: {r2.get('error', '')[:300]}")
        elif again is None:
            res["recheck"]["error"] = "the re-run measured no speedup: " + res["recheck"]["error"]
        elif again < RECHECK_SLOWDOWN * claimed:
            protocol.add_hack(res, "runtime:implausible_speedup_failed_recheck",
                              f"speedup {claimed:.1f}x fell to " + ", ".join(f"{x:.2f}x" for x in slow)
                              + f" in {runs} strict re-runs with fresh inputs on every call")
        else:
            res["runtime_ms"] = r2["runtime_ms"]
            if r2.get("reference_interleaved"):
                res["ref_runtime_ms"] = r2["ref_runtime_ms"]
            res["speedup"] = again
            if r2.get("profile"):
                res["profile"] = r2["profile"]
        if res["hack"]["detected"]:
            res["status"] = "hack"
            res["error"] = "; ".join(d["detail"] for d in res.get("hack_details", []))

    def gpu_check(self, job):
        gpu = job.get("gpu", 0)
        ans = {"gpu_ok": False, "error": "", "gpu": gpu}
        if "id" in job:
            ans["id"] = job["id"]
        if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
            ans["error"] = f"gpu must be a GPU index, got {gpu!r}"
            return ans
        if not self.cuda:
            ans["error"] = "this server sees no GPU"
            return ans
        opts = protocol.resolve_options({})
        out = self.run_child(_gpu_check_target, "cuda", gpu, self.limits(opts, "cuda", GPU_CHECK_TIMEOUT_S))
        if out.kind == "message":
            ans["gpu_ok"] = bool(out.message.get("gpu_ok"))
            ans["error"] = out.message.get("error", "")
        else:
            ans["error"] = f"gpu check {out.kind}: {out.detail}"
        return ans

    def handle(self, raw):
        try:
            job = json.loads(raw.decode("utf-8", errors="surrogateescape"))
            if not isinstance(job, dict):
                raise ValueError("a job line must be a JSON object")
        except ValueError as e:
            return protocol.error_result(None, f"bad job line: {e}")
        kind = job.get("kind")
        if kind == "ping":
            ans = {"pong": True}
            if "id" in job:
                ans["id"] = job["id"]
            return ans
        if kind == "gpu_check":
            return self.gpu_check(job)
        if kind == "status":  # the child forked ahead, for tests that count processes
            return {"spare_pid": self.spares[0].pid if self.spares else None,
                    "spare_pids": [c.pid for c in self.spares], "id": job.get("id"),
                    "forker_pid": self.forker.pid if self.forker else None}
        if kind not in (None, "eval", "job"):
            return protocol.error_result(job.get("id"), f"unknown line kind {kind!r}")
        try:
            return self.eval_job(job)
        except forker.ForkerGone as e:
            # No judge can be forked safely any more (a new fork server would
            # be a fork of this server, which has seen jobs): exit without an
            # answer, and the worker restarts the server and runs the job again.
            log(f"{e}; exiting")
            raise SystemExit(3)
        except Exception as e:
            return protocol.error_result(job.get("id"), f"internal error in the server: {type(e).__name__}: {e}")

    def serve(self):
        stdin = sys.stdin.buffer
        while True:
            raw = stdin.readline()
            if not raw:
                return 0
            if not raw.strip():
                continue
            self.write(self.handle(raw))

    def close(self):
        self.drop_spares()
        if getattr(self, "forker", None) is not None:
            self.forker.close()
        sandbox.kill_all_descendants(spares_too=True)
        shutil.rmtree(self.tmp_base, ignore_errors=True)


def _terminate(signum, frame):
    raise SystemExit(0)


def main():
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        evaluate.PYPROFILE_LINES = int(os.environ.get("DK_KG_PYPROFILE", "0") or 0)
    except ValueError:
        log(f"DK_KG_PYPROFILE must be a line count, got {os.environ['DK_KG_PYPROFILE']!r}; profiling stays off")
    cap = os.environ.get("DK_KG_GPU_MEMORY_GB", "")
    if cap:
        try:
            evaluate.GPU_MEMORY_CAP_GB = float(cap)
            if not (evaluate.GPU_MEMORY_CAP_GB >= 0.0):
                raise ValueError
        except ValueError:
            log(f"DK_KG_GPU_MEMORY_GB must be a size in GB (0: no cap), got {cap!r}")
            return 2
    try:
        timing.RESERVE_MB = timing.parse_reserve_mb(os.environ.get("DK_KG_RESERVE_MB"))
    except ValueError as e:
        log(str(e))
        return 2
    kept = os.environ.get("DK_KG_CLEAN_CACHE_S", "")
    clean_cache_s = CLEAN_CACHE_S
    if kept:
        try:
            clean_cache_s = float(kept)
            if not (0.0 <= clean_cache_s < float("inf")):
                raise ValueError
        except ValueError:
            log(f"DK_KG_CLEAN_CACHE_S must be a number of seconds (0: every judge times its own clean baseline), "
                f"got {kept!r}")
            return 2
    server = Server()
    server.clean_cache_s = clean_cache_s
    try:
        server.start()
        return server.serve()
    except BrokenPipeError:
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
