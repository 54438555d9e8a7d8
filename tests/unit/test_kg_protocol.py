"""KernelGym's wire contract has two sides: the C client builds jobs
(env/job.c: option defaults and ranges; env/result.c: status names) and the
Python harness reads them (env/harness/protocol.py). This test prints the C
tables (build/tests/kg_protocol_dump) and fails where the two disagree: an
option one side lacks, a different default, a different range, a status
name only one side knows. A default job from C must also resolve, through
the harness's own resolve_options, to exactly the harness's defaults."""

import json
import os
import subprocess
import sys

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DK_BUILD") or os.path.join(ROOT, "build")
sys.path.insert(0, ROOT)

from env.harness import protocol  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def same(a, b):
    """Equal values of the same JSON kind: 120 and 120.0 match, True and 1 do not."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    return a == b


dump = os.path.join(BUILD, "tests", "kg_protocol_dump")
if not os.path.exists(dump):
    print(f"FAIL {dump} is not built")
    sys.exit(1)
c = json.loads(subprocess.run([dump], check=True, capture_output=True, text=True).stdout)

# Options: the C side sends every option except the harness-only ones.
c_opts = c["options"]
py_defaults = {name: spec[0] for name, spec in protocol.OPTION_SPECS.items()}
wire_names = set(py_defaults) - set(protocol.HARNESS_ONLY_OPTIONS)
check(set(protocol.HARNESS_ONLY_OPTIONS) <= set(py_defaults),
      f"harness-only options without a spec: {set(protocol.HARNESS_ONLY_OPTIONS) - set(py_defaults)}")
check(set(c_opts) == wire_names,
      f"options only in C: {sorted(set(c_opts) - wire_names)}; only in protocol.py: {sorted(wire_names - set(c_opts))}")
for name in sorted(set(c_opts) & wire_names):
    check(same(c_opts[name], py_defaults[name]),
          f"option {name}: C default {c_opts[name]!r}, protocol.py default {py_defaults[name]!r}")

# The C job, as the harness resolves it, is the harness's default job.
try:
    resolved = protocol.resolve_options(c_opts)
    check(resolved == protocol.resolve_options({}), f"C defaults resolve to {resolved}")
except protocol.JobError as e:
    check(False, f"the harness rejects the C default options: {e}")

# Ranges: the same options are bounded, by the same numbers.
c_ranges = {name: tuple(lh) for name, lh in c["ranges"].items()}
py_ranges = {name: tuple(lh) for name, lh in protocol.OPTION_BOUNDS.items() if name in wire_names}
check(set(c_ranges) == set(py_ranges),
      f"ranges only in C: {sorted(set(c_ranges) - set(py_ranges))}; "
      f"only in protocol.py: {sorted(set(py_ranges) - set(c_ranges))}")
for name in sorted(set(c_ranges) & set(py_ranges)):
    check(c_ranges[name] == py_ranges[name], f"range of {name}: C {c_ranges[name]}, protocol.py {py_ranges[name]}")
    lo, hi = c_ranges[name]
    check(lo <= c_opts[name] <= hi, f"C default of {name} = {c_opts[name]} is outside its range [{lo}, {hi}]")

# Statuses: the same names, each once.
c_st, py_st = c["statuses"], list(protocol.STATUSES)
check(len(set(c_st)) == len(c_st) and len(set(py_st)) == len(py_st), f"repeated status: C {c_st}, python {py_st}")
check(set(c_st) == set(py_st),
      f"statuses only in C: {sorted(set(c_st) - set(py_st))}; only in protocol.py: {sorted(set(py_st) - set(c_st))}")

# The result's correct_rule: the same names on both sides.
c_rules, py_rules = c["correct_rules"], list(protocol.CORRECT_RULES)
check(sorted(c_rules) == sorted(py_rules), f"correct_rule values: C {c_rules}, protocol.py {py_rules}")
check(protocol.new_result("x")["correct_rule"] in py_rules, "the result skeleton's correct_rule is not a rule name")

print(f"{len(c_opts)} options, {len(c_ranges)} ranges, {len(c_st)} statuses: C and protocol.py "
      + ("agree" if not failures else f"disagree ({len(failures)})"))
sys.exit(1 if failures else 0)
