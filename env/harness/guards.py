"""Runtime guards installed in the sandboxed child before the candidate is
imported: a counter on every Triton launch, a snapshot of the functions the
harness and the reference rely on, and private copies of the timers.

Because they are in place before the candidate's first line runs, the
candidate can only tamper with them by replacing them, and both the launch
wrapper and the snapshot are checked for replacement afterwards.
"""

import builtins
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def _triton_launch_classes():
    """Imported here, not at module level: on the CPU device the child
    re-imports Triton in interpreter mode (loader.use_triton_interpreter), and
    the guards must wrap the classes the candidate will actually use."""
    from triton.runtime.jit import JITFunction

    classes = {"JITFunction": JITFunction}
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes["InterpretedFunction"] = InterpretedFunction
    except ImportError:  # a Triton without the interpreter
        pass
    return classes


class LaunchCounter:
    """Counts Triton launches (per kernel name) by wrapping the class-level
    `run` of JITFunction and of the interpreter's InterpretedFunction, which
    every launch path (`kernel[grid](...)`, autotune, heuristics) goes
    through. With `disabled` set, launches are swallowed: the candidate's
    output must then change, or its kernels did no real work."""

    def __init__(self, candidate_module):
        self.candidate_module = candidate_module
        self.total = 0
        self.candidate = 0
        self.per_kernel = {}
        self.disabled = False
        # (push, pop) called around each of the candidate's launches while
        # the profiler attributes kernels by identity (profiler.py)
        self.around = None
        self._installed = []

    def install(self):
        counter = self
        for cls in _triton_launch_classes().values():
            original = cls.__dict__["run"]

            def run(fn_self, *args, _original=original, **kwargs):
                around = None
                if not kwargs.get("warmup", False):
                    if counter._note(fn_self):
                        around = counter.around
                    if counter.disabled:
                        return None
                if around is None:
                    return _original(fn_self, *args, **kwargs)
                around[0]()
                try:
                    return _original(fn_self, *args, **kwargs)
                finally:
                    around[1]()

            run.__name__ = "run"
            run.__qualname__ = cls.__name__ + ".run"
            cls.run = run
            self._installed.append((cls, run))

    def _note(self, fn_self):
        fn = getattr(fn_self, "fn", None)
        name = getattr(fn, "__name__", "?")
        module = getattr(fn, "__module__", "") or ""
        self.total += 1
        if module == self.candidate_module:
            self.candidate += 1
            self.per_kernel[name] = self.per_kernel.get(name, 0) + 1
            return True
        return False

    def intact(self):
        return all(cls.__dict__.get("run") is run for cls, run in self._installed)

    def kernel_names(self):
        return sorted(self.per_kernel)


def _guarded_namespaces():
    """The objects whose attributes must not change under the candidate:
    torch's functional and tensor APIs, the module call path, the timers, the
    comparison helpers and Triton's launch path."""
    import triton
    # Importing dynamo rebinds torch.manual_seed (and a few others) to wrappers
    # that keep dynamo from tracing them. Whatever imports it later in the
    # candidate's process (torch.profiler, a lazy import on the GPU path)
    # would otherwise look like the candidate replacing torch's functions, so
    # it is imported before the snapshot is taken.
    import torch._dynamo  # noqa: F401

    spaces = {
        "torch": torch,
        "torch.nn": nn,
        "torch.nn.functional": F,
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.nn.Module": nn.Module,
        "torch.nn.Linear": nn.Linear,
        "torch.nn.Conv2d": nn.Conv2d,
        "torch.testing": torch.testing,
        "torch.cuda": torch.cuda,
        "torch.cuda.Event": torch.cuda.Event,
        "time": time,
        "math": math,
        "builtins": builtins,
        "triton": triton,
    }
    for name, cls in _triton_launch_classes().items():
        spaces["triton." + name] = cls
    return spaces


def _is_guarded_value(v):
    return callable(v) or isinstance(v, (staticmethod, classmethod, property))


class FunctionSnapshot:
    """Holds the guarded callables by reference (not by id, which a freed
    object could hand to its replacement) and reports any that changed."""

    def __init__(self):
        self.saved = {}
        for name, space in _guarded_namespaces().items():
            self.saved[name] = (space, {k: v for k, v in vars(space).items() if _is_guarded_value(v)})

    def changed(self):
        out = []
        missing = object()
        for name, (space, entries) in self.saved.items():
            now = vars(space)
            for key, old in entries.items():
                if now.get(key, missing) is not old:
                    out.append(f"{name}.{key}")
        return out


class Timers:
    """Private references to everything timing uses, taken before the
    candidate can touch them."""

    def __init__(self):
        self.perf_counter = time.perf_counter
        self.Event = torch.cuda.Event
        self.record = torch.cuda.Event.record
        self.elapsed_time = torch.cuda.Event.elapsed_time
        self.synchronize = torch.cuda.synchronize
        self.sleep = getattr(torch.cuda, "_sleep", None)
