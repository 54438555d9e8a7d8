"""Loading task and candidate sources as separate Python modules.

Each source is written into the job's private directory, so Triton can read
a kernel's source (it needs inspect.getsource) and tracebacks name real
lines, and is compiled from the very text the static checks read: compile()
of a str ignores any coding declaration, so no declared encoding can make
Python run other text than the one that was checked.
"""

import functools
import importlib.util
import linecache
import os
import sys


class SourceLoadError(Exception):
    """The module raised while it was being imported; the message holds the
    exception text and the tail of the traceback."""


def load_module(name, source, directory):
    path = os.path.join(directory, name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    # inspect.getsource (Triton reads its kernels' text through it) goes
    # through linecache, which would decode the file by its coding
    # declaration: it is given the checked text itself.
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    code = compile(source, path, "exec", dont_inherit=True)
    exec(code, module.__dict__)
    return module


def use_triton_interpreter():
    """Makes Triton run kernels through its interpreter in this process.

    Triton picks the interpreter when a function is decorated (triton.jit
    reads knobs.runtime.interpret, i.e. TRITON_INTERPRET, at that moment),
    and triton.language's own helpers (tl.zeros, tl.sum, ...) are decorated
    when triton.language is imported. The warm server imported Triton in
    compiled mode, so the child drops every Triton module except the native
    extension (triton._C, which cannot be loaded twice) and imports Triton
    again with TRITON_INTERPRET=1: about 0.1 s."""
    os.environ["TRITON_INTERPRET"] = "1"
    for name in list(sys.modules):
        if (name == "triton" or name.startswith("triton.")) and not name.startswith("triton._C"):
            del sys.modules[name]
    import triton.language
    from triton.runtime.interpreter import InterpretedFunction

    _autotune_without_timing()
    return isinstance(triton.language.zeros, InterpretedFunction)


def _no_bench(kernel_call, quantiles=None):
    return [0.0] * len(quantiles) if quantiles else 0.0


def _autotune_without_timing():
    """@triton.autotune with several configs times them through the GPU
    driver, which the interpreter has not: every honest autotuned kernel
    failed on the CPU device ("0 active drivers"). There the configs are
    given equal times, so the first one runs (nothing is timed on the CPU
    device anyway)."""
    try:
        from triton.runtime import autotuner
    except ImportError:
        return
    if isinstance(autotuner.Autotuner.__dict__.get("do_bench"), (property, functools.cached_property)):
        autotuner.Autotuner.do_bench = property(lambda self: _no_bench)


def fresh_seed():
    """An input seed nobody can know before the job runs."""
    return int.from_bytes(os.urandom(6), "little")


def seed_all(seed):
    """What torch.manual_seed(seed) does for the generators a job uses: the
    CPU's and, once CUDA is set up in this process, every GPU's. It draws
    the same numbers. torch.manual_seed also queues a seeding call, with a
    formatted stack trace, for each device kind this process never set up
    (xpu, mtia): about 1 ms a call, and a job seeds some fifty times."""
    import torch

    seed = int(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
    torch.default_generator.manual_seed(seed)


def inputs_from(task, seed, device):
    """Calls get_inputs() right after seed_all(seed) and moves the
    tensors to the device (non-tensor inputs are passed as they are).

    On CUDA, get_inputs() runs with the GPU as the default device, so its
    torch.rand/randn calls draw on the GPU: the same distributions, without
    generating hundreds of MB on the host for every input set (the reference
    process draws its sets the same way)."""
    import torch

    seed_all(seed)
    if getattr(device, "type", device) == "cuda":
        with torch.device(device):
            raw = task.get_inputs()
    else:
        raw = task.get_inputs()
    if not isinstance(raw, (list, tuple)):
        raise TypeError(f"get_inputs() must return a list, got {type(raw).__name__}")
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in raw]


def clone_inputs(inputs):
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
