"""KernelGym's strict re-measurement of a speedup (env/harness/server.py,
Server.recheck), on scripted re-runs: a re-run that keeps the speedup
confirms it and its figures count; one that fails (a hack, a crash) fails
the job at once; one that only loses more than half the speedup runs again
in fresh processes, and only a slowdown that repeats RECHECK_RUNS times is
runtime:implausible_speedup_failed_recheck. An honest forward bound by its
launches can draw a slow host path in one fresh process (on the H200 a
conv2d at 1.1x measured 0.18x once); a hack that needs predictable inputs
is slow in every strict re-run.

Also the retry of a job whose judge died (Server.run_judge_once and
run_candidate), on stubs: a judge forked for a job that dies before it
reads the job (killed from outside, the OOM killer) is an infrastructure
fault like a judge killed mid-job, not an internal error of the server;
its working directory is removed, and the job runs again in a fresh judge
up to JUDGE_RETRIES times, the retries counted in the result.
"""

import os
import sys
import tempfile
from types import SimpleNamespace

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from env.harness import protocol, sandbox, server  # noqa: E402

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


def stub_server():
    srv = server.Server.__new__(server.Server)
    srv.spares = []
    srv.drop_spares = lambda keep_key=None: None
    return srv


def judge_not_taking():
    """run_judge_once with a forked judge that is gone before its job."""
    srv = stub_server()
    dirs = []

    def fork_judge(key, limits, device, gpu, workdir=None, env=None):
        dirs.append(tempfile.mkdtemp(prefix="dk-judge-retry-"))
        return SimpleNamespace(workdir=dirs[-1], pid=-1)

    srv.fork_judge = fork_judge
    real = sandbox.send_job
    sandbox.send_job = lambda child, payload: False
    try:
        res, died = srv.run_judge_once({"id": "j", "device": "cpu", "candidate_source": ""},
                                       protocol.resolve_options({}))
    finally:
        sandbox.send_job = real
    check(died, "a judge that never took its job must count as a dead judge")
    check(res["status"] == "error" and "did not take it" in res.get("error", ""),
          f"its result: {res['status']} {res.get('error')!r}")
    check(len(dirs) == 1 and not os.path.exists(dirs[0]), "its working directory must be removed")


def retried(script):
    """run_candidate over scripted (result, died) judges: the result and
    the judges it asked for."""
    srv = stub_server()
    made = []

    def run_judge(job, opts):
        made.append(1)
        return script[len(made) - 1]

    srv.run_judge = run_judge
    return srv.run_candidate({"id": "j"}, protocol.resolve_options({})), len(made)


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
    judge_not_taking()
    gone = (protocol.error_result("j", "a judge forked for the job did not take it"), True)
    ok = protocol.new_result("j")
    ok["status"] = "ok"
    res, made = retried([gone, (ok, False)])
    check(made == 2 and res["status"] == "ok" and res.get("infra_retries") == 1,
          f"a judge gone before its job, then a good one -> {res['status']}, {made} judges, "
          f"infra_retries {res.get('infra_retries')}")
    n = server.JUDGE_RETRIES
    res, made = retried([gone] * (n + 1))
    check(made == n + 1 and res["status"] == "error" and res.get("infra_retries") == n,
          f"judges gone every time -> {res['status']} after {made} judges (retries allowed: {n})")
    print(f"kernelgym recheck: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
