"""Per-kernel profile of the candidate's forward.

The first choice is libkgprof (env/cupti/kgprof.c), a CUPTI activity
recorder loaded with ctypes: every kernel with its name, stream, start and
end. Without it, torch.profiler's CUDA activities give names and times but no
streams (side_streams is then null). The result says which source it used.

A kernel counts as the candidate's when its name is one of the Triton kernels
the launch counter saw the candidate launch. coverage = candidate kernel
time / all kernel time in the profiled forwards.
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
        ("pad", ctypes.c_uint32),
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

    def _check(self, rc, what):
        if rc != 0:
            raise KgProfError(f"kgprof_{what}: {self.lib.kgprof_error().decode(errors='replace')}")

    def start(self):
        self._check(self.lib.kgprof_start(), "start")

    def stop(self):
        self._check(self.lib.kgprof_stop(), "stop")

    def records(self):
        out = []
        rec = _Record()
        for i in range(self.lib.kgprof_count()):
            self._check(self.lib.kgprof_get(i, ctypes.byref(rec)), "get")
            out.append((rec.name.decode(errors="replace"), rec.stream_id, rec.start_ns, rec.end_ns))
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
    """kernels: list of (name, duration_ns). Returns the profile dict fields."""
    by_name = {}
    for name, dur in kernels:
        t, n = by_name.get(name, (0, 0))
        by_name[name] = (t + dur, n + 1)
    rows = []
    total = cand = 0
    for name, (t, n) in by_name.items():
        is_cand = is_candidate_kernel(name, candidate_names)
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


def profile_forward(model, args, device, candidate_names, timers, forwards=3):
    """Profiles `forwards` calls of model(*args). Returns a profile dict with
    "source" naming the profiler, or {"source": "unavailable", "error": ...}."""
    prof, why = load_kgprof()
    try:
        if prof is not None:
            try:
                return _profile_cupti(prof, model, args, device, candidate_names, timers, forwards)
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


def _profile_cupti(prof, model, args, device, candidate_names, timers, forwards):
    marker = torch.zeros(1, device=device)
    timers.synchronize()
    prof.start()
    try:
        # A kernel launched on the timed stream first, alone: its stream id
        # is the one every forward kernel must carry.
        marker.add_(1)
        timers.synchronize()
        _forwards(model, args, forwards)
        timers.synchronize()
    finally:
        prof.stop()
    recs = sorted(prof.records(), key=lambda r: r[2])
    if not recs:
        raise KgProfError("kgprof recorded no kernels")
    timed_stream = recs[0][1]
    body = recs[1:]
    out = _table([(r[0], r[3] - r[2]) for r in body], candidate_names, forwards)
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
    out["side_streams"] = None
    out["source"] = "torch.profiler"
    return out
