"""KernelGym's trust boundary on the CPU device: the adversarial corpus in
tests/kernelgym/hacks2 (one or more candidates per class of hole, written
to win), run through the warm server as the trainer runs it.

  single jobs      each is rejected with the reason (or status) its header
                   names, with the static layer off (so the process boundary,
                   the judge and the runtime checks are what stop it), and
                   is flagged by the static layer with its expect-static
                   reason when that layer is on
  sequences        c6_plant.py then c6_victim.py in one server: the victim
                   sees nothing the planter left, no other job's folder, no
                   Redis socket or password (a decoy folder and a decoy
                   process with a password in its command line are made
                   here), no other process; its ok verdict proves it;
                   then c6_earlier_jobs.py finds neither job's source in
                   its own process's memory (frames, the heap) nor a
                   socket it inherited
  concurrent       the same with the two jobs at once in two servers, then
                   c6_kill_siblings.py beside an honest job: the honest job
                   is still ok
  infrastructure   a judge killed mid-job (from outside) is re-run: the
                   honest job ends ok with infra_retries 1; a server whose
                   fork server was killed exits 3 without an answer
  wire             outputs rebuilt from bytes keep their exact dtype, shape,
                   strides and storage offset, through the pipe and through
                   shared memory; what does not fit is refused
  timed runner     the candidate's side of the GPU timing (batches,
                   fetching a chosen call) on a fake clock
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import torch  # noqa: E402

import corpus  # noqa: E402
from env.harness import wire  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402

BASE = {"correctness_trials": 2, "timeout_s": 60, "memory_limit_gb": 4}
HONEST = ("gemm_bias_relu", os.path.join(corpus.HERE, "candidates", "gemm_bias_relu__torch_matmul_triton_epilogue.py"))

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def run(server, m, src, options=None, job_id="job"):
    opts = dict(BASE)
    opts.update(corpus.options(m, "cpu"))
    opts.update(options or {})
    return server.evaluate(corpus.task_source(m["task"]), src, "cpu", opts, job_id)


def verdict(res):
    return f"{res['status']} {res['hack']['reasons']} {res['error'][:300]}"


def expectation_met(m, res):
    if m.get("expect-error") and m["expect-error"] not in (res.get("error") or ""):
        return False
    if m.get("expect-status-cpu"):
        return res["status"] == m["expect-status-cpu"] and not res["timing_available"] and res["speedup"] is None
    if m.get("expect"):
        return res["status"] == "hack" and m["expect"] in res["hack"]["reasons"]
    return res["status"] in corpus.expected_statuses(m, "cpu")


# ---- the wire --------------------------------------------------------------------

def roundtrip(x):
    blobs = []
    desc = wire.encode_value(x, blobs)
    notes = []
    return wire.decode_value(desc, blobs, notes), notes


def test_wire():
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    for what, t in [("contiguous", base), ("transposed", base.t()), ("sliced with an offset", base[2:5, 3:9]),
                    ("every other column", base[:, ::2]), ("half", base.half()), ("int64", base.long()),
                    ("empty", torch.empty(0, 3)), ("0-dim", torch.tensor(3.5))]:
        back, notes = roundtrip(t)
        ok = (type(back) is torch.Tensor and back.dtype == t.dtype and back.shape == t.shape
              and back.stride() == t.stride() and torch.equal(back, t))
        check(ok, f"wire: {what} came back as {back.dtype} {tuple(back.shape)} {back.stride()}")
        check(notes and notes[0]["type"] == "torch.Tensor", f"wire: {what} claimed {notes}")
    back, _ = roundtrip((base, [1, 2.5, None, float("nan")], "s"))
    check(torch.equal(back[0], base) and back[1][:3] == [1, 2.5, None] and back[1][3] != back[1][3]
          and back[2] == "s", f"wire: nested values came back as {back}")

    class Sub(torch.Tensor):
        pass

    _, notes = roundtrip(base.as_subclass(Sub))
    check(notes[0]["type"].endswith("Sub"), f"wire: a subclass claimed to be {notes[0]['type']}")
    check(wire.exact_layout_problem(base[:1].expand(6, 10), None) is not None, "wire: a stride-0 view was accepted")
    check(wire.exact_layout_problem(torch.as_strided(base, (6, 10), (1, 1)), None) is not None,
          "wire: overlapping strides were accepted")
    check(wire.exact_layout_problem(base.t(), None) is None, "wire: a transposed dense view was refused")
    check(wire.exact_layout_problem(base[:, :7], None) is None, "wire: a view with holes (a padded buffer) was refused")
    check(wire.exact_layout_problem(torch.as_strided(base, (3, 4), (4, 2)), None) is not None,
          "wire: strides (4, 2) over shape (3, 4), which overlap, were accepted")
    blobs = []
    desc = wire.encode_value(base, blobs)
    desc["shape"] = [60, 10]
    try:
        wire.decode_value(desc, blobs)
        check(False, "wire: a view reaching past the bytes sent was rebuilt")
    except wire.WireError:
        pass
    # Nesting: refused past wire.MAX_NESTING on both sides, and a header too
    # deep for the JSON reader is a malformed message, not the judge's crash.
    deep = base
    for _ in range(wire.MAX_NESTING + 2):
        deep = [deep]
    for what, call in (("encoded", lambda: wire.encode_value(deep, [])),
                       ("decoded", lambda: wire.decode_value(eval("[" * 40 + "1" + "]" * 40), []))):
        try:
            call()
            check(False, f"wire: an output nested {wire.MAX_NESTING + 2} deep was {what}")
        except wire.WireError:
            pass
    r, w = os.pipe()
    head = b"[" * 100000 + b"]" * 100000
    os.write(w, wire.MAGIC + str(len(head)).rjust(12, "0").encode())
    writer = threading.Thread(target=lambda: (os.write(w, head), os.close(w)))
    writer.start()
    try:
        wire.recv(r)
        check(False, "wire: a header nested 100000 deep was read")
    except wire.WireError:
        pass
    writer.join()
    os.close(r)
    for bad in ({"dict": 1}, object()):
        try:
            wire.encode_value(bad, [])
            check(False, f"wire: {type(bad).__name__} was sent")
        except wire.WireError:
            pass
    # a message with its blobs in shared memory, then one through the pipe
    r, w = os.pipe()
    shm = os.memfd_create("kg-test")
    for via in (shm, None):
        blobs = []
        desc = wire.encode_value([base.t(), base[1:3]], blobs)
        wire.send(w, {"out": desc}, blobs, via)
        head, got = wire.recv(r, shm)
        back = wire.decode_value(head["out"], got)
        check(head["shm"] == (via is not None) and torch.equal(back[0], base.t()) and back[0].stride() == (1, 10)
              and torch.equal(back[1], base[1:3]), f"wire: a message {'in shared memory' if via else 'in the pipe'} "
              f"came back as {head}")
    os.close(shm)
    os.write(w, b"not a message at all")
    os.close(w)
    try:
        wire.recv(r)
        check(False, "wire: garbage was read as a message")
    except (wire.WireError, EOFError):
        pass
    os.close(r)
    print("  wire: exact layouts round-trip; stride-0, overlapping and short views refused")


# ---- the candidate's side of the timed calls (its GPU path, on a fake clock) ------

class FakeClock:
    """Stands in for the CUDA events: every call takes 0.5 ms."""

    class Event:
        def __init__(self, enable_timing=True):
            pass

    def record(self, event):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, start, end):
        return 0.5


def test_timed_runner():
    from env.harness import candidate_proc, loader

    os.chdir(tempfile.mkdtemp(prefix="kg-trust-runner-"))
    r = candidate_proc.Runner("cpu")
    r.prepare()
    r.timers = FakeClock()
    src = corpus.read(os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))
    check(r.op_load({"task_source": corpus.task_source("row_sum"), "candidate_source": src, "seed": 42}).get("ok"),
          "runner: the candidate did not load")
    ans = r.op_time({"seeds": [11, 12], "order": [0, 1, 0, 1], "warmup": 1})
    check(ans.get("times_ms") == [0.5, 0.5, 0.5] and ans.get("launches") == 4, f"runner: a timed batch gave {ans}")
    digests = ans.get("digests", {})
    # call 2 ran seed 11
    ans, blobs = r.op_fetch({"call": 2})
    out = wire.decode_value(ans["out"], blobs)
    torch.manual_seed(42)
    ref = r.task.Model(*r.init_inputs)(*loader.inputs_from(r.task, 11, torch.device("cpu")))
    check(torch.allclose(out, ref, atol=1e-4), "runner: the fetched timed output is not call 2's")
    check(sorted(digests) == ["1", "2", "3"] and digests["2"] == str(wire.digest(blobs))
          and digests["1"] != digests["2"] and digests["2"] == digests.get("2"),
          f"runner: the batch's digests {digests} do not commit to the fetched output")
    # the digest takes every bit: one flipped bit in one element changes it
    flipped = [b.clone() for b in blobs]
    flipped[0][5] ^= 1
    check(wire.digest(flipped) != wire.digest(blobs), "wire: a flipped bit left the digest unchanged")
    check("bad_output" in r.op_fetch({"call": 0}), "runner: a warm-up call's output was kept")
    os.chdir(ROOT)
    print("  runner: timed batches and the fetch of a chosen call agree")


# ---- single jobs -----------------------------------------------------------------

def test_single(server):
    n = 0
    for path, src, m in corpus.entries("hacks2"):
        name = os.path.basename(path)
        if m.get("sequence") or "gpu-only" in m:
            continue
        n += 1
        res = run(server, m, src, job_id=name)
        check(expectation_met(m, res), f"{name} (static off): expected {m.get('expect-status-cpu') or m.get('expect') or m.get('expect-status')}, "
                                       f"got {verdict(res)}")
        print(f"  {name:36s} static off -> {res['status']:13s} {', '.join(res['hack']['reasons'])} "
              f"{res['error'].splitlines()[0][:70] if res['error'] else ''}")
        if m.get("expect-static"):
            res = run(server, m, src, {"static_checks": True}, job_id=name + "-static")
            check(res["status"] == "hack" and m["expect-static"] in res["hack"]["reasons"],
                  f"{name} (static on): expected {m['expect-static']}, got {verdict(res)}")
    return n


# ---- sequences and siblings ----------------------------------------------------------

def seq_source(name, shared_dir):
    src = corpus.read(os.path.join(corpus.HERE, "hacks2", name))
    return corpus.meta(src), src.replace('KG_SHARED_DIR = "/nonexistent"', f"KG_SHARED_DIR = {shared_dir!r}")


def candidate_isolated(res, what):
    cand = (res.get("sandbox") or {}).get("candidate") or {}
    check(cand.get("pid_namespace") and cand.get("private_tmp") and cand.get("network"),
          f"{what}: the candidate's process was not isolated: {cand}")
    if os.geteuid() == 0:
        check(isinstance(cand.get("uid"), int) and cand["uid"] != 0, f"{what}: the candidate ran as uid {cand.get('uid')}")
    return cand


def test_sequence(server, shared_dir):
    pm, plant = seq_source("c6_plant.py", shared_dir)
    vm, victim = seq_source("c6_victim.py", shared_dir)
    res = run(server, pm, plant, job_id="plant")
    check(res["status"] == "ok", f"plant: {verdict(res)}")
    candidate_isolated(res, "plant")
    check(not os.path.exists(os.path.join(shared_dir, "kg_plant_marker")),
          "plant: its marker reached the server's cache folder")
    res = run(server, vm, victim, job_id="victim")
    check(res["status"] == "ok", f"victim after plant: it saw something: {verdict(res)}")
    uid = candidate_isolated(res, "victim").get("uid")
    # After both, in the same server: no earlier job's source in the memory
    # of the candidate's process (its judge comes from the fork server, made
    # before the first job), no socket back to its forker.
    sm, snoop = seq_source("c6_earlier_jobs.py", shared_dir)
    r_snoop = run(server, sm, snoop, job_id="snoop")
    check(r_snoop["status"] == "ok", f"snoop after plant and victim: it found an earlier job: {verdict(r_snoop)}")
    print(f"  sequence: plant -> ok, victim -> {res['status']} (candidate uid {uid}), snoop -> {r_snoop['status']}")


def run_concurrently(jobs):
    """jobs: [(server, meta, source, id)] run at once; their results in order."""
    out = [None] * len(jobs)

    def one(i, server, m, src, job_id):
        out[i] = run(server, m, src, job_id=job_id)

    threads = [threading.Thread(target=one, args=(i,) + j) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent(a, b, shared_dir):
    pm, plant = seq_source("c6_plant.py", shared_dir)
    vm, victim = seq_source("c6_victim.py", shared_dir)
    r_plant, r_victim = run_concurrently([(a, pm, plant, "plant-c"), (b, vm, victim, "victim-c")])
    check(r_plant["status"] == "ok", f"concurrent plant: {verdict(r_plant)}")
    check(r_victim["status"] == "ok", f"concurrent victim: it saw something: {verdict(r_victim)}")
    km, killer = seq_source("c6_kill_siblings.py", shared_dir)
    hm = {"task": HONEST[0]}
    r_kill, r_honest = run_concurrently([(a, km, killer, "killer"), (b, hm, corpus.read(HONEST[1]), "sibling")])
    check(r_honest["status"] == "ok", f"the sibling of a killer: {verdict(r_honest)}")
    check(r_kill["status"] == "ok", f"the killer itself: {verdict(r_kill)}")
    check(a.request({"kind": "ping"}).get("pong") and b.request({"kind": "ping"}).get("pong"),
          "a server stopped answering after the killer ran")
    print(f"  concurrent: plant {r_plant['status']}, victim {r_victim['status']}; killer {r_kill['status']}, "
          f"sibling {r_honest['status']}")


# ---- infrastructure faults -----------------------------------------------------------

def children_of(pid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != b"Z":
                out.append(int(name))
    return out


def is_judge(pid):
    """A judge works in its job folder of the server's (the candidate's
    outermost process, which may come back to the server when its judge
    ends, works elsewhere)."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return "dk-kernelgym-" in cwd and "/job-" in cwd


def test_judge_killed(server):
    """server runs without children forked ahead: its one child with a child
    of its own during a job is that job's judge."""
    killed = []
    stop = threading.Event()
    # Processes of earlier jobs may still be going away (and come back to
    # the server, a subreaper, as its children): wait for them to go, then
    # the one child that appears with a child of its own is the judge.
    for _ in range(100):
        if not children_of(server.pid):
            break
        time.sleep(0.05)
    before = set(children_of(server.pid))

    def killer():
        while not stop.is_set() and not killed:
            for judge in children_of(server.pid):
                if judge not in before and children_of(judge) and is_judge(judge):
                    # its candidate's process is forked: the job is under way
                    # (a CPU job can end within half a second: kill at once)
                    try:
                        os.kill(judge, signal.SIGKILL)
                        killed.append(judge)
                    except ProcessLookupError:
                        pass
                    return
            time.sleep(0.02)

    th = threading.Thread(target=killer)
    th.start()
    res = run(server, {"task": HONEST[0]}, corpus.read(HONEST[1]), job_id="judge-killed")
    stop.set()
    th.join()
    check(len(killed) == 1, "the test found no judge to kill")
    check(res["status"] == "ok" and res.get("infra_retries") == 1,
          f"a job whose judge was killed: {verdict(res)} infra_retries {res.get('infra_retries')}")
    print(f"  judge killed mid-job -> {res['status']}, infra_retries {res.get('infra_retries')}")


def test_forker_gone():
    """A server whose fork server is gone forks no judge from itself (that
    judge would inherit the memory of the jobs it served): it exits with
    code 3 and no answer, and its worker starts a fresh one."""
    from env.harness.client import ServerError

    c = HarnessServer(env={"DK_KG_PREFORK": "0"})
    pid = c.request({"kind": "status"}).get("forker_pid")
    check(isinstance(pid, int), f"the server reports no fork server: {pid}")
    if not isinstance(pid, int):
        c.close()
        return
    os.kill(pid, signal.SIGKILL)
    try:
        res = run(c, {"task": HONEST[0]}, corpus.read(HONEST[1]), job_id="no-forker")
        check(False, f"a server without its fork server answered: {verdict(res)}")
    except ServerError:
        pass
    code = c.proc.wait(timeout=30)
    check(code == 3, f"a server without its fork server exited with {code}, expected 3")
    print(f"  fork server killed: the server exited {code} without an answer")


def main():
    t0 = time.monotonic()
    test_wire()
    test_timed_runner()
    cache_a = tempfile.mkdtemp(prefix="kg-trust-a-")
    cache_b = tempfile.mkdtemp(prefix="kg-trust-b-")
    # Decoys the victim must not see: a Redis folder with a socket and a
    # password file where `--redis auto` makes them, and a process with a
    # password in its command line.
    decoy = tempfile.mkdtemp(prefix="kernelgym-redis-", dir="/tmp")
    for f in ("redis.sock", "redis.conf"):
        with open(os.path.join(decoy, f), "w") as fh:
            fh.write("requirepass decoy\n")
    proc = subprocess.Popen(["bash", "-c", 'exec -a "redis-server unix:///tmp/x?password=decoy" sleep 600'])
    a = HarnessServer(env={"DK_KG_CACHE": cache_a})
    b = HarnessServer(env={"DK_KG_CACHE": cache_b, "DK_KG_PREFORK": "0"})
    try:
        print(f"servers ready in {time.monotonic() - t0:.1f} s")
        n = test_single(a)
        test_sequence(a, cache_a)
        test_concurrent(a, b, cache_a)
        test_judge_killed(b)
        check(a.close() == 0 and b.close() == 0, "a server did not exit 0 on EOF")
        test_forker_gone()
    finally:
        proc.kill()
        proc.wait()
        for d in (cache_a, cache_b, decoy):
            shutil.rmtree(d, ignore_errors=True)
    print(f"kernelgym trust (CPU): {n} single-job attacks, a plant/victim sequence, concurrent siblings, "
          f"a killed judge; {len(failures)} failures in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
