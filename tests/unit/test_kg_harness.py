"""KernelGym harness end to end on the CPU device (Triton's interpreter): the
warm server (python -m env.harness.server) is driven through its stdin / fd 3
protocol over the test corpus in tests/kernelgym.

  honest candidates  (candidates/ and honest_styles/)
                     -> ok, correct, no hack, max diff within tolerance or,
                        where the task is ill-conditioned, within the fp64
                        error budget (correct_rule fp64_budget, ratio <= 1)
  hacks              -> status hack with the expected reason
  faults             -> the expected status, and the next honest job is fine
  bad input          -> a clear status and message, and the server goes on

Also: the ready line, ping, gpu_check without a GPU, setup_wait (hand-computed
cases, and within each job's time in its judge), a forged result on the
candidate's stdout, the sandbox's file system and network isolation (checked
from outside), no process left behind, exit code 0 on EOF.
"""

import json
import os
import socket
import sys
import threading
import time

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import corpus  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402

# Light settings so the interpreter runs each job in about a second.
BASE = {"correctness_trials": 2, "timeout_s": 60, "memory_limit_gb": 4}
HONEST_PROBE = ("row_sum", os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))

failures = []
notes = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def descendants_of(pid):
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            if fields[0] != b"Z":
                kids.setdefault(int(fields[1]), []).append(int(name))
    out, stack = [], list(kids.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


# By default (DK_KG_PREFORK unset or 1) each job's child is forked during the
# job before it, and most jobs must really run in such a child; with
# DK_KG_PREFORK=0 (tests/unit/test_kg_harness_noprefork.sh) none may. The
# verdicts must be the same either way.
PREFORK = os.environ.get("DK_KG_PREFORK", "1") != "0"
jobs_run = {"all": 0, "ahead": 0, "setup_wait": 0}


def run(server, task, candidate, options=None, job_id="job", gpu_task=False):
    opts = dict(BASE)
    opts.update(options or {})
    res = server.evaluate(corpus.task_source(task, gpu_task), candidate, "cpu", opts, job_id)
    jobs_run["all"] += 1
    jobs_run["ahead"] += bool(res.get("forked_ahead"))
    ph = res.get("phases_ms") or {}
    if "setup_wait" in ph:
        # the wait for the judge's setup lies inside the job's time in its judge
        jobs_run["setup_wait"] += 1
        check(isinstance(ph["setup_wait"], float) and 0.0 <= ph["setup_wait"] <= ph.get("child_wall", 0.0) + 5.0,
              f"{job_id}: setup_wait {ph['setup_wait']} outside 0..child_wall {ph.get('child_wall')}")
    return res


def test_setup_wait_ms():
    # hand-computed: handed over at 10.0 s, judge ready at 10.25 s: 250 ms;
    # ready before the job came: no wait; a missing or bad time: none.
    from env.harness import server as srv
    check(abs(srv.setup_wait_ms({"sent_at": 10.0, "ready_at": 10.25}) - 250.0) < 1e-9, "setup_wait 250 ms")
    check(srv.setup_wait_ms({"sent_at": 10.25, "ready_at": 10.0}) == 0.0, "setup_wait of a ready judge")
    for p in ({"sent_at": 1.0}, {"ready_at": 1.0}, {"sent_at": True, "ready_at": 2.0},
              {"sent_at": "1", "ready_at": 2.0}, {"sent_at": float("nan"), "ready_at": 2.0}):
        check(srv.setup_wait_ms(p) is None, f"setup_wait of {p}")


def honest_probe(server, after):
    res = run(server, HONEST_PROBE[0], corpus.read(HONEST_PROBE[1]), job_id="probe")
    check(res["status"] == "ok" and res["correct"], f"honest job after {after}: {res['status']} {res['error'][:200]}")


def test_honest(server):
    diffs = []
    for path, src, m in corpus.entries("candidates") + corpus.entries("honest_styles"):
        name = os.path.basename(path)
        t0 = time.monotonic()
        res = run(server, m["task"], src, job_id=name)
        ok = check(res["status"] == "ok" and res["correct"] and not res["hack"]["detected"],
                   f"{name}: {res['status']} {res['hack']['reasons']} {res['error'][:300]}")
        if ok:
            tol = res["tolerance"]["atol"]
            if res["correct_rule"] == "fp64_budget":
                check(res["error_ratio"] is not None and res["error_ratio"] <= 1,
                      f"{name}: accepted by the fp64 budget with error ratio {res['error_ratio']}")
            else:
                check(res["correct_rule"] == "tolerance" and res["max_abs_diff"] <= tol * 10,
                      f"{name}: rule {res['correct_rule']}, max abs diff {res['max_abs_diff']}")
            check(res["launches"]["eval"] > 0 and res["launches"]["train"] > 0, f"{name}: launches {res['launches']}")
            check(res["timing_available"] is False and res["runtime_ms"] is None and res["profile"] is None,
                  f"{name}: CPU results must say timing is unavailable")
            diffs.append((name, res["max_abs_diff"], res["correct_rule"], res["error_ratio"], time.monotonic() - t0))
    for name, d, rule, ratio, t in diffs:
        ratio = float("nan") if ratio is None else ratio
        print(f"  honest {name:55s} max_abs_diff {d:.2e}  {rule:11s} fp64 error ratio {ratio:.3g}  {t:.2f} s")
    return len(diffs)


def test_hacks(server):
    caught = set()
    for path, src, m in corpus.entries("hacks"):
        name = os.path.basename(path)
        if "gpu-only" in m:
            continue
        reason = corpus.expected_reason(m, "cpu")
        res = run(server, m["task"], src, corpus.options(m, "cpu"), job_id=name)
        if check(res["status"] == "hack" and reason in res["hack"]["reasons"],
                 f"{name}: expected {reason}, got {res['status']} {res['hack']['reasons']} {res['error'][:200]}"):
            caught.add(reason)
            print(f"  hack {name:45s} -> {', '.join(res['hack']['reasons'])}")
    # The runtime layer on its own: with the static checks off, a static
    # hack that patches torch is still caught at runtime.
    for path, src, m in corpus.entries("hacks"):
        if m.get("expect-nostatic"):
            name = os.path.basename(path)
            reason = corpus.expected_reason(m, "cpu", static=False)
            res = run(server, m["task"], src, dict(corpus.options(m, "cpu"), static_checks=False), job_id=name)
            if check(res["status"] == "hack" and reason in res["hack"]["reasons"],
                     f"{name} without static checks: expected {reason}, got {res['hack']['reasons']}"):
                caught.add(reason)
                print(f"  hack {name:45s} (static off) -> {', '.join(res['hack']['reasons'])}")
    return caught


def test_faults(server, isolation):
    escape = "/tmp/kg_fault_escape_probe.txt"
    for path, src, m in corpus.entries("faults"):
        name = os.path.basename(path)
        if "gpu-only" in m:
            continue
        expect = corpus.expected_statuses(m, "cpu")
        needs = m.get("needs")
        listener = None
        received = []
        if name == "fault_write_outside.py" and os.path.exists(escape):
            os.unlink(escape)
        if name == "fault_socket.py":
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            listener.settimeout(0.2)
            src = src.replace("KG_PORT = 47391", f"KG_PORT = {listener.getsockname()[1]}")
            stop = threading.Event()

            def accept_loop():
                while not stop.is_set():
                    try:
                        conn, _ = listener.accept()
                        received.append(conn.recv(100))
                        conn.close()
                    except OSError:
                        pass

            th = threading.Thread(target=accept_loop, daemon=True)
            th.start()
        t0 = time.monotonic()
        res = run(server, m["task"], src, corpus.options(m, "cpu"), job_id=name)
        took = time.monotonic() - t0
        isolated = needs is None or isolation.get(needs)
        if isolated:
            check(res["status"] in expect, f"{name}: expected {'|'.join(expect)}, got {res['status']}: {res['error'][:300]}")
        else:
            notes.append(f"{name}: {needs} isolation unavailable here, status {res['status']}")
        if listener is not None:
            stop.set()
            th.join()
            listener.close()
            if isolation.get("network"):
                check(not received, f"{name}: the listener received {received}")
        if name == "fault_write_outside.py":
            if isolation.get("filesystem"):
                check(not os.path.exists(escape), f"{name}: {escape} was written outside the sandbox")
            elif os.path.exists(escape):
                os.unlink(escape)
        if name == "fault_fake_json.py":
            check(res["status"] == "incorrect" and res["correct"] is False,
                  f"{name}: the forged stdout result leaked into the verdict: {res['status']}")
        # The children forked ahead for the next jobs (judges, each with its
        # candidate's process) are the ones allowed.
        status = server.request({"kind": "status"})
        spares = status.get("spare_pids") or []
        forker_pid = status.get("forker_pid")

        def leftovers():
            # and the fork server (env/harness/forker.py), which no job owns
            allowed = {forker_pid} if forker_pid else set()
            for spare in spares:
                allowed |= {spare} | set(descendants_of(spare))
            return [p for p in descendants_of(server.pid) if p not in allowed]

        left = leftovers()
        # a finished child may still be exiting; give it a moment
        for _ in range(50):
            if not left:
                break
            time.sleep(0.1)
            left = leftovers()
        check(not left, f"{name}: {len(left)} processes of the job are still alive")
        print(f"  fault {name:40s} -> {res['status']:13s} {took:5.2f} s  {res['error'].splitlines()[0][:90] if res['error'] else ''}")
        honest_probe(server, name)


def test_bad_input(server):
    honest = corpus.read(HONEST_PROBE[1])
    row_sum = corpus.task_source("row_sum")
    cases = [
        ("task without Model", corpus.read(os.path.join(corpus.HERE, "bad", "task_no_model.py")), honest,
         "error", "Model"),
        ("task without get_inputs", corpus.read(os.path.join(corpus.HERE, "bad", "task_no_get_inputs.py")), honest,
         "error", "get_inputs"),
        ("candidate with a syntax error", row_sum,
         corpus.read(os.path.join(corpus.HERE, "bad", "candidate_syntax_error.py")), "compile_error", "SyntaxError"),
        ("empty candidate", row_sum, "   \n", "error", "empty"),
        ("10 MB candidate", row_sum, honest + "#" * (10 << 20), "error", "size limit"),
        ("task that raises", "raise RuntimeError('broken task')\n", honest, "error", "broken task"),
    ]
    for what, task, cand, status, text in cases:
        res = server.evaluate(task, cand, "cpu", dict(BASE), job_id=what)
        check(res["status"] == status and text in res["error"],
              f"{what}: expected {status} mentioning {text!r}, got {res['status']}: {res['error'][:200]}")
        print(f"  bad input {what:32s} -> {res['status']:13s} {res['error'].splitlines()[0][:80]}")
    # a candidate that is not UTF-8: raw bytes inside the JSON string
    line = (b'{"id": "non-utf8", "device": "cpu", "task_source": ' + json.dumps(row_sum).encode() +
            b', "candidate_source": "import torch\\n\xff\xfe\\n", "options": {}}')
    res = server.send_raw(line)
    check(res["status"] == "error" and "UTF-8" in res["error"], f"non-UTF-8 candidate: {res}")
    print(f"  bad input {'non-UTF-8 candidate':32s} -> {res['status']:13s} {res['error'][:80]}")
    res = server.send_raw(b"this is not json")
    check(res["status"] == "error" and "bad job line" in res["error"], f"bad JSON line: {res}")
    res = server.request({"id": "x", "task_source": row_sum, "candidate_source": honest, "device": "tpu"})
    check(res["status"] == "error" and "device" in res["error"], f"unknown device: {res}")
    res = server.request({"id": "x", "task_source": row_sum, "candidate_source": honest, "device": "cuda"})
    check(res["status"] == "error" and "GPU" in res["error"], f"cuda job on a CPU server: {res}")
    res = server.request({"id": "x", "task_source": row_sum, "candidate_source": honest, "device": "cpu",
                          "options": {"perf_trials": "many"}})
    check(res["status"] == "error" and "perf_trials" in res["error"], f"bad option: {res}")
    honest_probe(server, "bad input")


def main():
    t_start = time.monotonic()
    import tempfile
    cache = tempfile.mkdtemp(prefix="kg-test-cache-")
    server = HarnessServer(env={"DK_KG_CACHE": cache})
    ready = server.ready
    print(f"server ready in {time.monotonic() - t_start:.1f} s: torch {ready['torch']} triton {ready['triton']} "
          f"cuda {ready['cuda']} isolation {ready['isolation']}")
    isolation = ready["isolation"]
    for k in ("network", "filesystem"):
        if not isolation.get(k):
            notes.append(f"{k} isolation unavailable on this machine")
    check(server.request({"kind": "ping", "id": 7}) == {"pong": True, "id": 7}, "ping")
    gc = server.request({"kind": "gpu_check", "gpu": 0})
    check(gc["gpu_ok"] is False and gc["error"], f"gpu_check without a GPU: {gc}")

    test_setup_wait_ms()
    n_honest = test_honest(server)
    caught = test_hacks(server)
    test_faults(server, isolation)
    test_bad_input(server)
    code = server.close()
    check(code == 0, f"server exit code on EOF: {code}")
    if PREFORK:
        print(f"prefork: {jobs_run['ahead']} of {jobs_run['all']} jobs ran in a child forked ahead")
        check(jobs_run["ahead"] >= jobs_run["all"] // 2,
              f"only {jobs_run['ahead']} of {jobs_run['all']} jobs ran in a child forked ahead")
    else:
        check(jobs_run["ahead"] == 0, f"{jobs_run['ahead']} jobs ran in a child forked ahead with DK_KG_PREFORK off")
    # every job that reached a judge, forked ahead or not, says how long it
    # waited for that judge's setup
    print(f"setup_wait: reported by {jobs_run['setup_wait']} of {jobs_run['all']} jobs")
    check(jobs_run["setup_wait"] >= jobs_run["all"] // 2,
          f"only {jobs_run['setup_wait']} of {jobs_run['all']} jobs report setup_wait")
    import shutil
    shutil.rmtree(cache, ignore_errors=True)
    for n in notes:
        print("note:", n)
    print(f"kernelgym harness (CPU): {n_honest} honest candidates ok, {len(caught)} distinct hack reasons caught "
          f"({', '.join(sorted(caught))}); {len(failures)} failures in {time.monotonic() - t_start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
