"""KernelGym's strict re-measurement of a speedup (env/harness/server.py,
Server.recheck), on scripted re-runs: a re-run that keeps the speedup
confirms it and its figures count; one that fails (a hack, a crash) fails
the job at once; one that only loses more than half the speedup runs again
in fresh processes, and only a slowdown that repeats RECHECK_RUNS times is
runtime:implausible_speedup_failed_recheck. An honest forward bound by its
launches can draw a slow host path in one fresh process (on the H200 a
conv2d at 1.1x measured 0.18x once); a hack that needs predictable inputs
is slow in every strict re-run.
"""

import os
import sys

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from env.harness import protocol, server  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL " + what)


def first_run(speedup):
    """An ok first run with an interleaved reference."""
    res = protocol.new_result("job")
    res.update(status="ok", speedup=speedup, runtime_ms={"median": 1.0 / speedup}, ref_runtime_ms={"median": 1.0},
               reference_interleaved=True, timing_available=True)
    return res


def rerun(speedup=None, status="ok", reasons=()):
    """A strict re-run's result: ok with this speedup, or another status
    with these hack reasons."""
    r = protocol.new_result("job")
    r["status"] = status
    for why in reasons:
        protocol.add_hack(r, why, "scripted")
    if status == "ok":
        r.update(speedup=speedup, runtime_ms={"median": 1.0 / speedup}, ref_runtime_ms={"median": 1.0},
                 reference_interleaved=True)
    else:
        r["error"] = f"scripted {status}"
    return r


def recheck(claimed, script):
    """(result, re-runs made) after Server.recheck with the re-runs
    returning script's results in turn."""
    srv = server.Server.__new__(server.Server)
    made = []

    def run_candidate(job, opts):
        check(opts["strict"], "recheck: a re-run was not strict")
        made.append(opts)
        return script[len(made) - 1]

    srv.run_candidate = run_candidate
    res = first_run(claimed)
    srv.recheck({"id": "job"}, protocol.resolve_options({}), res)
    return res, len(made)


def main():
    n = server.RECHECK_RUNS
    check(n >= 2, f"RECHECK_RUNS is {n}: a single slow re-run would decide")
    # confirmed at once: the re-run's figures count
    res, made = recheck(4.0, [rerun(3.0)])
    check(made == 1 and res["status"] == "ok" and res["speedup"] == 3.0 and res["recheck"]["runs"] == 1,
          f"recheck: confirmed at once -> {res['status']} {res['speedup']} after {made} re-runs")
    # one slow re-run (0.18x of 1.1x), then one that keeps it: ok, with the
    # second's figures and the slow one recorded
    res, made = recheck(1.1, [rerun(0.18), rerun(1.0)] + [rerun(1.0)] * n)
    check(made == 2 and res["status"] == "ok" and res["speedup"] == 1.0
          and res["recheck"]["slow_speedups"] == [0.18] and not res["hack"]["detected"],
          f"recheck: one slow re-run -> {res['status']} {res['speedup']} {res['recheck']} after {made} re-runs")
    # slow in every re-run: the candidate's
    res, made = recheck(8.0, [rerun(1.0)] * n)
    check(made == n and res["status"] == "hack"
          and "runtime:implausible_speedup_failed_recheck" in res["hack"]["reasons"]
          and res["recheck"]["slow_speedups"] == [1.0] * n,
          f"recheck: slow every time -> {res['status']} {res['hack']} after {made} re-runs")
    # a re-run that finds a hack ends it: no second chance
    res, made = recheck(8.0, [rerun(status="hack", reasons=["runtime:timed_output_mismatch"]), rerun(8.0)])
    check(made == 1 and res["status"] == "hack" and "runtime:timed_output_mismatch" in res["hack"]["reasons"]
          and "runtime:implausible_speedup_failed_recheck" in res["hack"]["reasons"],
          f"recheck: a hack in the re-run -> {res['status']} {res['hack']} after {made} re-runs")
    # exactly half kept is enough
    res, made = recheck(2.0, [rerun(1.0)])
    check(made == 1 and res["status"] == "ok", f"recheck: half kept -> {res['status']} after {made} re-runs")
    print(f"kernelgym recheck: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
