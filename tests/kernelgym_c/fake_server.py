"""A stand-in for env.harness.server that speaks the same line protocol (the
KernelGym contract) but judges nothing: the C worker's tests use it to drive
every path of the worker (hangs, deaths, garbage, GPU checks) in milliseconds
and without torch. Run it through the worker with KERNELGYM_SERVER set to this
file's path.

The verdict comes from comment lines in the candidate source:
    # fake-result: {"status": "ok", "speedup": 1.5, ...}   merged into the result
    # fake-action: hang | die | die-once:FILE | garbage | wrong-id | stdout | sleep:SECONDS
Environment: DK_FAKE_CUDA=1 reports a GPU in the ready line; DK_FAKE_GPU_BROKEN=PATH
makes gpu_check fail while PATH exists; DK_FAKE_SERVER_LOG=PATH appends, first,
the names of the variables in its environment (a line "env: A B ..."), then
every request line it reads.
"""

import json
import os
import sys
import time


def out_stream():
    try:
        os.fstat(3)
        return os.fdopen(3, "w", buffering=1)
    except OSError:
        return sys.stdout


OUT = out_stream()


def send(obj):
    OUT.write(json.dumps(obj) + "\n")
    OUT.flush()


def base_result(job_id, device):
    timed = device == "cuda"
    return {
        "id": job_id, "status": "ok", "compiled": True, "correct": True,
        "hack": {"detected": False, "reasons": []},
        "max_abs_diff": 0.0,
        "runtime_ms": {"mean": 1.0, "median": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "trials": 10} if timed else None,
        "ref_runtime_ms": {"mean": 1.0, "median": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "trials": 10} if timed else None,
        "speedup": 1.0 if timed else None,
        "profile": {"kernels": [{"name": "fake_kernel", "time_us": 1000.0, "calls": 1, "candidate": True}],
                    "coverage": 1.0, "side_streams": False} if timed else None,
        "error": "", "phases_ms": {"load": 1.0}, "timing_available": timed,
    }


def error(job_id, message):
    res = base_result(job_id, "cpu")
    res.update({"status": "error", "compiled": False, "correct": False, "max_abs_diff": None, "error": message})
    return res


def check_job(job):
    """The contract's job fields; returns a message naming the first bad one."""
    for key in ("id", "task_source", "candidate_source", "task_name"):
        if not isinstance(job.get(key), str):
            return f"job field {key} missing or not a string"
    if job.get("device") not in ("cuda", "cpu"):
        return f"job field device is {job.get('device')!r}"
    if not isinstance(job.get("gpu"), int):
        return "job field gpu missing or not an integer"
    opts = job.get("options")
    if not isinstance(opts, dict) or not isinstance(opts.get("timeout_s"), (int, float)):
        return "job options.timeout_s missing"
    for key in ("client", "kind"):
        if key in job:
            return f"job carries the queue-only field {key}"
    return None


def handle(job):
    job_id = job.get("id", "")
    bad = check_job(job)
    if bad:
        send(error(job_id, bad))
        return
    res = base_result(job_id, job["device"])
    for line in job["candidate_source"].splitlines():
        line = line.strip()
        if line.startswith("# fake-result:"):
            res.update(json.loads(line[len("# fake-result:"):]))
        elif line.startswith("# fake-action:"):
            action = line[len("# fake-action:"):].strip()
            if action == "hang":
                while True:
                    time.sleep(60)
            elif action == "die":
                os._exit(3)
            elif action.startswith("die-once:"):
                # dies the first time (an infrastructure fault), then works
                mark = action[len("die-once:"):].strip()
                if not os.path.exists(mark):
                    open(mark, "w").close()
                    os._exit(3)
            elif action == "garbage":
                OUT.write("this is not json\n")
                OUT.flush()
                return
            elif action == "wrong-id":
                res["id"] = "someone-else"
            elif action == "stdout":
                print(json.dumps({"id": job_id, "status": "ok", "speedup": 1000.0}), flush=True)
            elif action.startswith("sleep:"):
                time.sleep(float(action[len("sleep:"):]))
    send(res)


def main():
    log = os.environ.get("DK_FAKE_SERVER_LOG")
    if log:
        with open(log, "a") as f:
            f.write("env: " + " ".join(sorted(os.environ)) + "\n")
    send({"ready": True, "pid": os.getpid(), "torch": "fake", "triton": "fake",
          "cuda": os.environ.get("DK_FAKE_CUDA") == "1"})
    for line in sys.stdin:
        if not line.strip():
            continue
        if log:
            with open(log, "a") as f:
                f.write(line)
        req = json.loads(line)
        kind = req.get("kind")
        if kind == "ping":
            send({"pong": True})
        elif kind == "gpu_check":
            broken = os.environ.get("DK_FAKE_GPU_BROKEN")
            if broken and os.path.exists(broken):
                send({"gpu_ok": False, "error": "fake: CUDA error: an illegal memory access was encountered"})
            else:
                send({"gpu_ok": True, "error": ""})
        else:
            handle(req)
    return 0


if __name__ == "__main__":
    sys.exit(main())
