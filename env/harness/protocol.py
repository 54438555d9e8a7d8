"""KernelGym wire format: job options with their defaults, the result skeleton
and the status names.

The C worker writes one job per line on the server's stdin and reads one
result per line from fd 3 (the layout is fixed by the KernelGym contract, the
result is the JSON of docs/DESIGN.md §11 without the fields the C side adds:
reward, feedback, worker). Everything that validates or fills a job lives
here so the server, the sandboxed child and the tests agree on it.
"""

import copy

STATUSES = ("ok", "compile_error", "incorrect", "hack", "timeout", "crash", "error")

# The result's `correct_rule`: which rule accepted the outputs (the task's
# atol/rtol against the reference in its own dtype, or the error budget
# against its fp64 evaluation: env/harness/error_budget.py), or none.
CORRECT_RULES = ("tolerance", "fp64_budget", "none")

# Option name -> (default, accepted python types). None in the types tuple
# means the option may be null.
OPTION_SPECS = {
    "timeout_s": (120.0, (int, float)),
    "correctness_trials": (5, (int,)),
    "perf_trials": (100, (int,)),
    "warmup": (3, (int,)),
    "atol": (None, (int, float, type(None))),
    "rtol": (None, (int, float, type(None))),
    "reference_mode": ("eager", (str,)),
    "profile": (True, (bool,)),
    "strict": (False, (bool,)),
    "max_source_bytes": (1_000_000, (int,)),
    "memory_limit_gb": (32.0, (int, float)),
    "cpu_time_s": (600, (int, float)),
    # K of the fp64 error budget (env/harness/error_budget.py).
    "budget_k": (8.0, (int, float)),
    # Beyond the contract's list: the static layer can be switched off so the
    # runtime layer and the sandbox can be exercised on their own; the seed
    # of the first correctness trial; the number of rotating input sets used
    # while timing; the process cap of the sandbox; the speedup above which
    # a stricter re-run is made.
    "static_checks": (True, (bool,)),
    "seed": (42, (int,)),
    "input_sets": (8, (int,)),
    "max_procs": (64, (int,)),
    "recheck_speedup": (10.0, (int, float)),
}

# The options above that only the harness knows: the C side (env/job.c) sends
# every other one, with the same defaults (tests/unit/test_kg_protocol.py).
HARNESS_ONLY_OPTIONS = ("static_checks", "seed", "input_sets", "max_procs", "recheck_speedup")

# Bounds keep a malformed job from asking for absurd work.
OPTION_BOUNDS = {
    "timeout_s": (1, 3600),
    "correctness_trials": (1, 100),
    "perf_trials": (1, 10000),
    "warmup": (0, 1000),
    "max_source_bytes": (1, 100_000_000),
    "memory_limit_gb": (0.5, 4096),
    "cpu_time_s": (1, 86400),
    "budget_k": (1, 1e6),
    "input_sets": (1, 256),
    "max_procs": (4, 4096),
    "recheck_speedup": (1.0, 1e9),
}

# Default tolerances by output dtype (KernelBench's fp32 / half rules).
DEFAULT_TOL_FP32 = 1e-4
DEFAULT_TOL_HALF = 1e-2


class JobError(Exception):
    """A job line that cannot be evaluated (bad field, bad option)."""


def resolve_options(raw):
    """Returns the job's options with defaults filled in, or raises JobError
    naming the offending option."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise JobError("options must be a JSON object")
    opts = {}
    for name, (default, types) in OPTION_SPECS.items():
        value = raw.get(name, default)
        if value is None and type(None) not in types:
            value = default
        if isinstance(value, bool) and bool not in types:
            raise JobError(f"option {name} must be a number, got {value!r}")
        # JSON writers (cJSON among them) may print an integer option as 5.0.
        if isinstance(value, float) and int in types and float not in types and value.is_integer():
            value = int(value)
        if not isinstance(value, types):
            raise JobError(f"option {name} has the wrong type: {value!r}")
        if name in OPTION_BOUNDS and value is not None:
            lo, hi = OPTION_BOUNDS[name]
            if not lo <= value <= hi:
                raise JobError(f"option {name}={value!r} is outside [{lo}, {hi}]")
        opts[name] = value
    if opts["reference_mode"] not in ("eager", "compile"):
        raise JobError(f"option reference_mode must be eager or compile, got {opts['reference_mode']!r}")
    for name in ("atol", "rtol"):
        if opts[name] is not None and opts[name] < 0:
            raise JobError(f"option {name} must be >= 0")
    return opts


def new_result(job_id):
    """The result skeleton: every contract field present with its empty value."""
    return {
        "id": job_id,
        "status": "error",
        "compiled": False,
        "correct": False,
        "hack": {"detected": False, "reasons": []},
        "max_abs_diff": None,
        "runtime_ms": None,
        "ref_runtime_ms": None,
        "speedup": None,
        "profile": None,
        "error": "",
        "phases_ms": {},
        "timing_available": False,
        "correct_rule": "none",
        "error_ratio": None,
    }


def error_result(job_id, message):
    res = new_result(job_id)
    res["status"] = "error"
    res["error"] = message
    return res


def add_hack(result, reason, detail=None):
    """Records a hack reason once; the status becomes hack."""
    hack = result["hack"]
    if reason not in hack["reasons"]:
        hack["reasons"].append(reason)
    hack["detected"] = True
    if detail:
        result.setdefault("hack_details", []).append({"reason": reason, "detail": detail})
    result["status"] = "hack"


def merge_child_result(base, child):
    """Copies the child's fields over the skeleton, keeping the skeleton's
    types for anything the child left out."""
    out = copy.deepcopy(base)
    for key, value in child.items():
        out[key] = value
    return out
