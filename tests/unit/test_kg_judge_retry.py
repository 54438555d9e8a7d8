"""KernelGym's retry of a job whose judge died (env/harness/server.py,
Server.run_judge_once and run_candidate), on stubs: a judge forked for a
job that dies before it reads the job (killed from outside, the OOM
killer) is an infrastructure fault like a judge killed mid-job, not an
internal error of the server; its working directory is removed, and the
job runs again in a fresh judge up to JUDGE_RETRIES times, the retries
counted in the result.
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
    print(f"kernelgym judge retry: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
