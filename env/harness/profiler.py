"""Per-kernel profile of the candidate's forward.

The first choice is libkgprof (env/cupti/kgprof.c), a CUPTI activity
recorder loaded with ctypes: every kernel with its name, stream, start and
end. Without it, torch.profiler's CUDA activities give names and times but no
streams (side_streams is then null). The result says which source it used.

A kernel counts as the candidate's by identity: the launch counter wraps each
of the candidate's own Triton launches in kgprof_push_candidate / kgprof_pop,
and CUPTI ties the kernels launched in between to that mark through their
correlation ids, so a library or Inductor kernel whose name looks like the
candidate's is never credited to it ("attribution": "correlation"). Where
that is unavailable (torch.profiler, a CUPTI without external correlation) a
kernel counts when its name is one of the Triton kernels the counter saw
launched ("attribution": "name"). coverage = candidate kernel time / all
kernel time in the profiled forwards.
"""

import ctypes
import os

import torch

_NAME_LEN = 512


class _Record(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * _NAME_LEN),
        ("stream_id", ctypes.c_uint32),
        ("correlation", ctypes.c_uint32),
        ("device", ctypes.c_uint32),
        ("candidate", ctypes.c_uint32),
        ("start_ns", ctypes.c_uint64),
        ("end_ns", ctypes.c_uint64),
    ]


def kgprof_path():
    """DK_KGPROF_LIB, else $DK_BUILD/env/cupti/libkgprof.so, else the
    default build folder of the source tree."""
    explicit = os.environ.get("DK_KGPROF_LIB")
    if explicit is not None:
        # Set but empty: profiling through libkgprof is switched off.
        return explicit or None
    candidates = []
    build = os.environ.get("DK_BUILD")
    if build:
        candidates.append(os.path.join(build, "env", "cupti", "libkgprof.so"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates.append(os.path.join(root, "build", "env", "cupti", "libkgprof.so"))
    for c in candidates:
        if os.path.exists(c):
            return c
    return None


class KgProfError(RuntimeError):
    """libkgprof itself failed (not the profiled model)."""


class _ForwardError(Exception):
    """Carries an exception raised by the profiled model out of the
    profiler's own error handling: the candidate's failures must surface."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


def _forwards(model, args, n):
    try:
        with torch.no_grad():
            for _ in range(n):
                model(*args)
    except BaseException as e:
        raise _ForwardError(e) from e


class KgProf:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.kgprof_start.restype = ctypes.c_int
        self.lib.kgprof_stop.restype = ctypes.c_int
        self.lib.kgprof_count.restype = ctypes.c_int
        self.lib.kgprof_get.restype = ctypes.c_int
        self.lib.kgprof_get.argtypes = [ctypes.c_int, ctypes.POINTER(_Record)]
        self.lib.kgprof_error.restype = ctypes.c_char_p
        self.lib.kgprof_dropped.restype = ctypes.c_uint64
        self.by_identity = hasattr(self.lib, "kgprof_push_candidate")

    def _check(self, rc, what):
        if rc != 0:
            raise KgProfError(f"kgprof_{what}: {self.lib.kgprof_error().decode(errors='replace')}")

    def start(self):
        self._check(self.lib.kgprof_start(), "start")

    def stop(self):
        self._check(self.lib.kgprof_stop(), "stop")

    def push(self):
        self._check(self.lib.kgprof_push_candidate(), "push_candidate")

    def pop(self):
        self._check(self.lib.kgprof_pop(), "pop")

    def attribution(self):
        return bool(self.by_identity and self.lib.kgprof_attribution())

    def records(self):
        """(name, stream, start ns, end ns, launched by the candidate)."""
        out = []
        rec = _Record()
        for i in range(self.lib.kgprof_count()):
            self._check(self.lib.kgprof_get(i, ctypes.byref(rec)), "get")
            out.append((rec.name.decode(errors="replace"), rec.stream_id, rec.start_ns, rec.end_ns,
                        bool(rec.candidate)))
        return out


_kgprof = None
_kgprof_error = None


def load_kgprof():
    """Loads libkgprof once per process; returns (KgProf or None, why not)."""
    global _kgprof, _kgprof_error
    if _kgprof is None and _kgprof_error is None:
        path = kgprof_path()
        if path is None:
            _kgprof_error = "libkgprof.so not found (set DK_KGPROF_LIB or DK_BUILD)"
        else:
            try:
                _kgprof = KgProf(path)
            except OSError as e:
                _kgprof_error = f"cannot load {path}: {e}"
    return _kgprof, _kgprof_error


def is_candidate_kernel(name, candidate_names):
    return any(name == c or name.startswith(c + "_") or name.startswith(c + ".") for c in candidate_names)


def _table(kernels, candidate_names, forwards):
    """kernels: list of (name, duration_ns) or (name, duration_ns, the
    candidate's by identity). Returns the profile dict fields."""
    by_name = {}
    for k in kernels:
        name, dur = k[0], k[1]
        mine = k[2] if len(k) > 2 else is_candidate_kernel(name, candidate_names)
        key = (name, mine)
        t, n = by_name.get(key, (0, 0))
        by_name[key] = (t + dur, n + 1)
    rows = []
    total = cand = 0
    for (name, is_cand), (t, n) in by_name.items():
        total += t
        cand += t if is_cand else 0
        rows.append({"name": name, "time_us": t / 1e3 / forwards, "calls": n // forwards if n % forwards == 0 else n / forwards,
                     "candidate": is_cand})
    rows.sort(key=lambda r: -r["time_us"])
    return {
        "kernels": rows,
        "coverage": (cand / total) if total > 0 else 0.0,
        "candidate_time_us": cand / 1e3 / forwards,
        "total_time_us": total / 1e3 / forwards,
        "forwards": forwards,
    }


def profile_forward(model, args, device, candidate_names, timers, forwards=3, counter=None):
    """Profiles `forwards` calls of model(*args). Returns a profile dict with
    "source" naming the profiler, or {"source": "unavailable", "error": ...}.
    counter (guards.LaunchCounter) marks the candidate's own launches for
    attribution by identity."""
    prof, why = load_kgprof()
    try:
        if prof is not None:
            try:
                return _profile_cupti(prof, model, args, device, candidate_names, timers, forwards, counter)
            except KgProfError as e:
                why = str(e)
        try:
            out = _profile_torch(model, args, candidate_names, timers, forwards)
            out["kgprof_error"] = why
            return out
        except _ForwardError:
            raise
        except Exception as e:  # the fallback profiler is optional
            return {"source": "unavailable", "error": f"{why}; torch.profiler failed: {e}"}
    except _ForwardError as e:
        raise e.error


def _profile_cupti(prof, model, args, device, candidate_names, timers, forwards, counter=None):
    marker = torch.zeros(1, device=device)
    timers.synchronize()
    prof.start()
    by_identity = counter is not None and prof.attribution()
    if by_identity:
        counter.around = (prof.push, prof.pop)
    try:
        # A kernel launched on the timed stream first, alone: its stream id
        # is the one every forward kernel must carry.
        marker.add_(1)
        timers.synchronize()
        _forwards(model, args, forwards)
        timers.synchronize()
    finally:
        if counter is not None:
            counter.around = None
        prof.stop()
    recs = sorted(prof.records(), key=lambda r: r[2])
    if not recs:
        raise KgProfError("kgprof recorded no kernels")
    timed_stream = recs[0][1]
    body = recs[1:]
    if by_identity and any(r[4] for r in body):
        out = _table([(r[0], r[3] - r[2], r[4]) for r in body], candidate_names, forwards)
        out["attribution"] = "correlation"
    else:
        out = _table([(r[0], r[3] - r[2]) for r in body], candidate_names, forwards)
        out["attribution"] = "name"
    streams = sorted({r[1] for r in body})
    out["side_streams"] = any(s != timed_stream for s in streams)
    out["streams"] = streams
    out["timed_stream"] = timed_stream
    out["source"] = "cupti"
    out["dropped"] = int(prof.lib.kgprof_dropped())
    return out


def _profile_torch(model, args, candidate_names, timers, forwards):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    timers.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        _forwards(model, args, forwards)
        timers.synchronize()
    kernels = []
    for e in p.events():
        if e.device_type == DeviceType.CUDA:
            kernels.append((e.name, int(e.time_range.elapsed_us() * 1000)))
    out = _table(kernels, candidate_names, forwards)
    out["attribution"] = "name"
    out["side_streams"] = None
    out["source"] = "torch.profiler"
    return out
