"""The sandbox around each evaluation: a child forked from the warm server,
or, for a judge, from its fork server (env/harness/forker.py, which calls
fork_child here), so that no judge inherits memory that held a job.

In the child, before any job code runs:
  - os.setsid(): its own session and process group, so the group can be
    killed as a whole;
  - stdin from /dev/null, stdout/stderr into files in the job's private
    directory, every other inherited descriptor closed except the result
    pipe (the server's fd 3 to the C worker is never reachable);
  - new network and mount namespaces where the kernel allows (as root
    unshare() needs no user namespace; otherwise CLONE_NEWUSER comes first):
    the network namespace has no interface up, so even 127.0.0.1 is
    unreachable; in the mount namespace every file system is remounted
    read-only except the job directory and the shared compile caches (/proc
    and /dev stay as they are, device nodes must open read-write);
  - resource limits: CPU time, file size, no core files, address space on
    the CPU device (CUDA reserves far more virtual memory than it uses, so
    on CUDA the memory cap is the server's RSS watchdog), process count for
    non-root users (the kernel ignores RLIMIT_NPROC for root);
  - the private directory as cwd, HOME and TMPDIR, a scrubbed environment;
  - every capability dropped (bounding set too) and no_new_privs, so root in
    the child cannot undo the read-only mounts or ptrace the server.
The child reports over a pipe created before the fork; a message only counts
when it carries the per-job nonce, so bytes the candidate writes to the pipe
are ignored.

A child may also be forked ahead of its job (spawn_ahead, DK_KG_PREFORK in
the server): it enters the sandbox and makes its CUDA context while the jobs
before it run, then reads its job from a pipe. With DK_KG_GATE=1 the running
job's gate pipe (wait_gate) holds its timed calls until the setup of the
child forked during it is over; by default the gate is open from the start
(the H200 measurements in docs/DESIGN.md §10 found no effect of that setup
on the timings, and waiting for it cost 0.27 s a job).

In the server, while the child runs: a wall-clock deadline, and a watchdog
that walks the server's descendants in /proc (the server is a child
subreaper, so processes that escape the group with setsid or double forks
are still its descendants) and kills everything when there are more than
max_procs of them (fork bombs, also as root) or their resident memory
exceeds the limit. After every job all descendants are killed and reaped.
"""

import ctypes
import faulthandler
import functools
import json
import os
import resource
import secrets
import select
import signal
import stat
import sys
import tempfile
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21

ST_TO_MS = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522

MAGIC = b"\x00KGRESULT:"
MAX_MESSAGE_BYTES = 64 << 20
SCAN_INTERVAL_S = 0.2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class Limits:
    def __init__(self, timeout_s=120.0, cpu_time_s=600, memory_limit_gb=32.0, max_procs=64,
                 fsize_bytes=256 << 20, device="cpu"):
        self.timeout_s = float(timeout_s)
        self.cpu_time_s = int(max(1, cpu_time_s))
        self.memory_bytes = int(memory_limit_gb * (1 << 30))
        self.max_procs = int(max_procs)
        self.fsize_bytes = int(fsize_bytes)
        self.device = device


class Outcome:
    """What happened to a child: kind is "message" (it reported), "timeout",
    "limit" (the watchdog killed it), "died" (a signal), or "no_message"
    (it exited without reporting)."""

    def __init__(self):
        self.kind = "no_message"
        self.message = None
        self.detail = ""
        self.exit_code = None
        self.signal = None
        self.wall_s = 0.0
        self.stderr_tail = ""
        self.peak_procs = 0


# ---- server side ----------------------------------------------------------------

def server_setup():
    """Called once in the server: become a child subreaper (escaped
    grandchildren come back to us) and make our memory unreadable to
    processes without CAP_SYS_PTRACE."""
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _proc_table():
    """pid -> (ppid, rss_bytes) for every process we can read."""
    page = os.sysconf("SC_PAGE_SIZE")
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) < 22:
            continue
        if rest[0] == b"Z":  # zombies hold no memory and are reaped below
            continue
        table[int(name)] = (int(rest[1]), int(rest[21]) * page)
    return table


def _pss(pid, rss):
    """Proportional set size: pages shared copy-on-write between forked
    processes are split among them instead of counted once per process (a
    torch process forked 20 times would otherwise look 20 times its size)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss


PSS_SAMPLES = 4


def _estimate_pss(pids):
    """Sum of proportional set sizes of pids. Reading smaps_rollup of a torch
    process costs tens of ms, so only the PSS_SAMPLES largest processes are
    read and the rest are scaled by the PSS/RSS ratio seen in the sample."""
    table = _proc_table()
    sized = sorted(((table[p][1], p) for p in pids if p in table), reverse=True)
    sample, rest = sized[:PSS_SAMPLES], sized[PSS_SAMPLES:]
    pss = sum(_pss(p, r) for r, p in sample)
    rss_sample = sum(r for r, _ in sample)
    ratio = pss / rss_sample if rss_sample else 1.0
    return pss + ratio * sum(r for r, _ in rest)


def held_memory_files(pids, room=None):
    """Bytes of memory-backed files (memfds, files under /dev/shm) that
    pids hold open and none of them maps. A mapped one is in the resident
    size of every process that touched it; an unmapped one is in no
    process's, yet holds its pages until the last descriptor closes: a job
    could hoard memory past its limit that way. Files the watchdog cannot
    inspect (a /proc it may not read) count 0. When all the files held
    together fit in room, that sum is returned without reading the
    processes' maps (tens of ms for a torch process): it is an upper bound,
    and below room it decides nothing."""
    files = {}
    for pid in pids:
        fddir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fddir)
        except OSError:
            continue
        for name in names:
            path = f"{fddir}/{name}"
            try:
                target = os.readlink(path)
                if not (target.startswith("/memfd:") or target.startswith("/dev/shm/")):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files[(f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino)] = st.st_blocks * 512
    total = sum(files.values())
    if total == 0 or (room is not None and total <= room):
        return total
    inodes = {ino for _, ino in files}
    mapped = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                for line in f:
                    fields = line.split(None, 5)
                    if len(fields) >= 5 and fields[4].isdigit() and int(fields[4]) in inodes:
                        mapped.add((fields[3].decode(), int(fields[4])))
        except OSError:
            continue
    return sum(size for key, size in files.items() if key not in mapped)


def descendants(root_pid=None, skip=None):
    """(pids, total memory) of all live descendants of root_pid (default:
    us). Memory is the sum of resident sizes, replaced by the sum of
    proportional set sizes (slower to read) only when the first is large
    enough to matter: see memory_of()."""
    root_pid = os.getpid() if root_pid is None else root_pid
    skip = (_retired | _spares | _kept) if skip is None else skip | _kept
    table = _proc_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, rss, stack = [], 0, list(children.get(root_pid, []))
    while stack:
        p = stack.pop()
        if p in skip:
            continue
        out.append(p)
        rss += table[p][1]
        stack.extend(children.get(p, []))
    return out, rss


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# Processes of finished jobs that were sent SIGKILL but may still be tearing
# down (a CUDA context takes a while to release). The next job does not wait
# for them; they are left out of its watchdog counts and reaped as they go.
_retired = set()
# Children forked ahead of their job (see spawn_ahead), waiting: they run
# only harness code until their job is sent, so the job in progress neither
# counts them nor kills them with its leftovers.
_spares = set()
# Processes of the server's own that are no job's: the fork server
# (env/harness/forker.py). No watchdog counts them and no job's end kills them.
_kept = set()


def keep_out_of_jobs(pid):
    _kept.add(pid)


def leave_server(keep_fd):
    """The fork server's first steps: killed with the server, no descriptor
    of the server's but keep_fd and stderr (never the worker's pipes: the
    server's death must close them), default signal handlers."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    _close_fds({keep_fd, 2})
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _prune_retired():
    for p in list(_retired):
        try:
            wpid, _ = os.waitpid(p, os.WNOHANG)
            if wpid == p:
                _retired.discard(p)
                continue
        except ChildProcessError:
            pass
        if not os.path.exists(f"/proc/{p}"):
            _retired.discard(p)


def _retire(child_pid):
    """SIGKILLs a finished job's processes without waiting for them."""
    try:
        os.killpg(child_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    pids, _ = descendants(skip=_spares)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _retired.update(pids)
    _retired.add(child_pid)


def kill_all_descendants(child_pid=None, rounds=50, spares_too=False):
    """SIGKILLs the child's group and every descendant of the server (but the
    waiting spares, unless spares_too) until none is left (or rounds run out:
    a process stuck in the kernel), reaping as we go."""
    if child_pid is not None:
        try:
            os.killpg(child_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if spares_too:
        _spares.clear()
    for _ in range(rounds):
        pids, _ = descendants(skip=_spares)
        if not pids:
            _reap()
            return True
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        _reap()
    return False



def _parse_message(buf, nonce):
    tag = MAGIC + nonce.encode() + b":"
    at = buf.rfind(tag)
    while at >= 0:
        head = at + len(tag)
        length_field = bytes(buf[head:head + 12])
        if len(length_field) == 12 and length_field.isdigit() and buf[head + 12:head + 13] == b":":
            n = int(length_field)
            body = bytes(buf[head + 13:head + 13 + n])
            if len(body) == n:
                try:
                    return json.loads(body.decode("utf-8"))
                except ValueError:
                    pass
        at = buf.rfind(tag, 0, at)
    return None


def _tail(path, n=3000):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class Child:
    """A forked evaluation child, from the server's side."""

    def __init__(self, pid, rfd, nonce, limits, workdir, t0):
        self.pid, self.rfd, self.nonce = pid, rfd, nonce
        self.limits, self.workdir, self.t0 = limits, workdir, t0
        self.job_fd = None     # an ahead child's job pipe (write end)
        self.ready_fd = None   # an ahead child's ready pipe (read end)
        self.gate_fd = None    # this child's gate pipe (write end)
        self.key = None
        self.ready_at = None   # when an ahead child was seen ready (time.monotonic)


# The child's end of its gate pipe: evaluate calls wait_gate() before its
# timed calls, which returns once the server writes to or closes the pipe.
_gate_fd = None
GATE_TIMEOUT_S = 5.0


def wait_gate(timeout_s=GATE_TIMEOUT_S):
    """In the child: waits until no spare is starting its CUDA context, so
    the timed calls never share the GPU with another process's setup."""
    global _gate_fd
    fd, _gate_fd = _gate_fd, None
    if fd is None:
        return
    try:
        select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)


def fork_child(limits, workdir, env, writable_dirs, body, ahead, candidate=None, reparented=False):
    """Forks a sandboxed child that runs body(isolation, job_fd, ready_fd)
    and reports the dict it returns. Only an ahead child gets the job and
    ready pipes (None otherwise): it signals on the second once set up, then
    reads its job from the first. With candidate (a CandidateSpec) the child
    is a judge: before it enters its own sandbox, while it holds nothing of
    its job, it forks the candidate's process (candidate_sandbox.fork_candidate).
    reparented: the caller is the fork server's intermediate process, which
    exits once it has passed the child on (env/harness/forker.py); the child
    first waits for that, so that it is the server's before it asks to die
    with its parent."""
    _prune_retired()
    rfd, wfd = os.pipe()
    gr, gw = os.pipe()
    jr = jw = rr = rw = None
    if ahead:
        jr, jw = os.pipe()
        rr, rw = os.pipe()
    nonce = secrets.token_hex(16)
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child never returns from here
        global _gate_fd, _candidate
        code = 0
        try:
            if reparented:
                _wait_reparented(parent)
            for fd in (rfd, gw, jw, rr):
                if fd is not None:
                    os.close(fd)
            keep = {fd for fd in (wfd, gr, jr, rw) if fd is not None}
            if candidate is not None:
                from env.harness import candidate_sandbox

                _candidate = candidate_sandbox.fork_candidate(limits, workdir, candidate, keep)
                keep |= {fd for fd in (_candidate.to_fd, _candidate.from_fd, _candidate.shm_fd) if fd is not None}
            isolation = enter(wfd, limits, workdir, env, writable_dirs, keep)
            entered_ms = (time.monotonic() - t0) * 1000.0
            _gate_fd = gr
            message = body(isolation, jr, rw)
            if isinstance(message, dict) and isinstance(message.get("phases_ms"), dict):
                message["phases_ms"]["sandbox"] = entered_ms
        except BaseException as e:  # report, whatever happened
            message = {"status": "error", "error": f"internal error in the evaluation child: {type(e).__name__}: {e}"}
            code = 1
        try:
            _send(wfd, nonce, message)
        except BaseException:
            code = 3
        os._exit(code)
    for fd in (wfd, gr, jr, rw):
        if fd is not None:
            os.close(fd)
    child = Child(pid, rfd, nonce, limits, workdir, t0)
    child.gate_fd, child.job_fd, child.ready_fd = gw, jw, rr
    return child


REPARENT_TIMEOUT_S = 10.0


def _wait_reparented(parent):
    """Until this process's parent is no longer `parent` (it exited and the
    kernel gave us to the nearest subreaper, the server)."""
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    while os.getppid() == parent:
        if time.monotonic() > deadline:
            raise OSError("the fork server's intermediate process did not exit")
        time.sleep(0.0005)


def _target_body(target):
    def body(isolation, job_fd, ready_fd):
        return target(isolation)
    return body


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _ahead_body(prepare, runner, isolation, job_fd, ready_fd):
    try:
        prepare(isolation)
    except Exception:  # the job meets the same failure and reports it in its own words
        pass
    ready_at = time.monotonic()  # CLOCK_MONOTONIC: the server's clock too
    try:  # the server may have stopped listening: its job came first
        os.write(ready_fd, b"r")
    except OSError:
        pass
    os.close(ready_fd)
    payload = _read_all(job_fd)
    os.close(job_fd)
    if not payload:
        os._exit(0)  # given back without a job
    job = json.loads(payload.decode("utf-8"))
    if isinstance(job, dict):
        job["ready_at"] = ready_at
    return runner(job, isolation)


def spawn_ahead(prepare, runner, limits, workdir, env, writable_dirs, key=None, candidate=None, forker=None):
    """Forks a child before its job exists: it enters the sandbox, runs
    prepare(isolation) (on CUDA, the context: the costliest part of a job's
    start), signals ready and waits. send_job() then hands it a JSON payload
    for runner(payload, isolation); finish() supervises it like run().
    With forker (env/harness/forker.py) the fork server forks it, and
    prepare and runner must pickle."""
    body = functools.partial(_ahead_body, prepare, runner)
    if forker is not None:
        child = forker.fork(limits, workdir, env, writable_dirs, body, True, candidate)
    else:
        child = fork_child(limits, workdir, env, writable_dirs, body, ahead=True, candidate=candidate)
    child.key = key
    _spares.add(child.pid)
    return child


def send_job(child, payload):
    """Hands an ahead child its job; False when it is gone (the caller forks
    a fresh child instead). The job's wall clock starts now. The payload
    goes with sent_at, the time it was handed over, and reaches the runner
    with ready_at, when the child's setup ended (_ahead_body)."""
    _spares.discard(child.pid)
    data = memoryview(json.dumps(dict(payload, sent_at=time.monotonic())).encode("utf-8"))
    # Non-blocking, with a deadline: a child stuck in its setup must not
    # hang the server on a full pipe.
    deadline = time.monotonic() + child.limits.timeout_s
    try:
        os.set_blocking(child.job_fd, False)
        while data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError("the child forked ahead did not take its job")
            _, writable, _ = select.select([], [child.job_fd], [], min(left, 0.5))
            if writable:
                data = data[os.write(child.job_fd, data):]
        os.close(child.job_fd)
    except OSError:
        discard(child)
        return False
    child.job_fd = None
    child.t0 = time.monotonic()
    return True


def discard(child):
    """Kills an ahead child that will get no job, and closes its pipes."""
    _spares.discard(child.pid)
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _retired.add(child.pid)
    for fd in (child.rfd, child.job_fd, child.ready_fd, child.gate_fd):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    child.job_fd = child.ready_fd = child.gate_fd = None


def start(target, limits, workdir, env, writable_dirs, candidate=None):
    """Forks a sandboxed child that calls target(isolation); finish() waits
    for it. candidate: see _fork."""
    return fork_child(limits, workdir, env, writable_dirs, _target_body(target), ahead=False, candidate=candidate)


def finish(child, next_spare=None):
    """Supervises a started child until it reports, dies or breaks a limit.
    Its gate opens at once, or with DK_KG_GATE=1 when next_spare (a child
    forked ahead during this job) is ready. Returns an Outcome once the child is gone
    and every process it started has been killed."""
    if next_spare is None or os.environ.get("DK_KG_GATE") != "1":
        _close_gate(child)
    out = None
    try:
        out = _supervise(child.pid, child.rfd, child.nonce, child.limits, child.workdir, child.t0,
                         gate=(child, next_spare) if next_spare is not None else None)
        return out
    finally:
        _close_gate(child)
        os.close(child.rfd)
        if child.ready_fd is not None:
            os.close(child.ready_fd)
            child.ready_fd = None
        if out is not None and out.kind == "message" and out.exit_code is None and out.signal is None:
            _retire(child.pid)
        else:
            kill_all_descendants(child.pid)


def _close_gate(child):
    if child.gate_fd is not None:
        try:
            os.close(child.gate_fd)
        except OSError:
            pass
        child.gate_fd = None


def run(target, limits, workdir, env, writable_dirs):
    """Forks a sandboxed child that calls target(isolation) and reports the
    dict it returns. Returns an Outcome once the child is gone and every
    process it started has been killed."""
    return finish(start(target, limits, workdir, env, writable_dirs))


def _watch_gate(gate):
    """Opens the job's gate once the spare forked beside it is ready (it
    wrote its byte, or died: either way its setup is over)."""
    child, spare = gate
    if spare.ready_fd is None or spare.ready_at is not None:
        return
    ready, _, _ = select.select([spare.ready_fd], [], [], 0)
    if ready:
        _close_gate(child)
        spare.ready_at = time.monotonic()


def _supervise(pid, rfd, nonce, limits, workdir, t0, gate=None):
    out = Outcome()
    buf = bytearray()
    deadline = t0 + limits.timeout_s
    next_scan = t0 + 0.05
    eof = False
    status = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            out.kind = "timeout"
            out.detail = f"killed after {limits.timeout_s:g} s wall clock"
            break
        wait = min(0.05, deadline - now)
        if gate is not None:
            _watch_gate(gate)
            if gate[0].gate_fd is not None:
                wait = min(wait, 0.005)
        if not eof:
            ready, _, _ = select.select([rfd], [], [], wait)
            if ready:
                chunk = os.read(rfd, 1 << 20)
                if chunk:
                    buf += chunk
                    if len(buf) > MAX_MESSAGE_BYTES:
                        out.kind = "limit"
                        out.detail = "the child wrote more than 64 MB to the result pipe"
                        break
                    if MAGIC in chunk or MAGIC in buf[-len(chunk) - len(MAGIC):]:
                        message = _parse_message(buf, nonce)
                        if message is not None:
                            # Reported: the child's exit (CUDA teardown)
                            # is not waited for; run() retires it.
                            out.kind = "message"
                            out.message = message
                            out.wall_s = time.monotonic() - t0
                            out.stderr_tail = _tail(os.path.join(workdir, "stderr.txt"))
                            return out
                else:
                    eof = True
        else:
            time.sleep(wait)
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid == pid:
            break
        status = None
        if time.monotonic() >= next_scan:
            pids, rss = descendants()
            out.peak_procs = max(out.peak_procs, len(pids))
            if len(pids) > limits.max_procs:
                out.kind = "limit"
                out.detail = (f"killed: {len(pids)} processes in the sandbox, over the limit of "
                              f"{limits.max_procs} (fork bomb?)")
                break
            held = held_memory_files(pids, room=limits.memory_bytes - rss)
            if rss + held > limits.memory_bytes and len(pids) > 1:
                rss = _estimate_pss(pids)
            if rss + held > limits.memory_bytes:
                out.kind = "limit"
                out.detail = (f"killed: resident memory {(rss + held) / (1 << 30):.2f} GB over the limit of "
                              f"{limits.memory_bytes / (1 << 30):.2f} GB")
                if held:
                    out.detail += f" ({held / (1 << 30):.2f} GB of it in memory files no process maps)"
                break
            next_scan = time.monotonic() + SCAN_INTERVAL_S
    out.wall_s = time.monotonic() - t0
    if status is None:
        # Timeout or watchdog: kill the whole tree, then collect the child.
        kill_all_descendants(pid)
        for _ in range(500):
            try:
                wpid, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if wpid == pid:
                break
            time.sleep(0.01)
    # Whatever is still in the pipe (grandchildren may keep it open, so read
    # only what is there).
    while True:
        ready, _, _ = select.select([rfd], [], [], 0)
        if not ready:
            break
        chunk = os.read(rfd, 1 << 20)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_MESSAGE_BYTES:
            break
    out.stderr_tail = _tail(os.path.join(workdir, "stderr.txt"))
    if out.kind in ("timeout", "limit"):
        return out
    if status is not None:
        if os.WIFSIGNALED(status):
            out.signal = os.WTERMSIG(status)
        elif os.WIFEXITED(status):
            out.exit_code = os.WEXITSTATUS(status)
    out.message = _parse_message(buf, nonce)
    if out.message is not None:
        out.kind = "message"
    elif out.signal is not None:
        out.kind = "died"
        name = signal.Signals(out.signal).name if out.signal in signal.Signals._value2member_map_ else str(out.signal)
        out.detail = f"the evaluation process died from signal {name}"
        if out.signal == signal.SIGXCPU:
            out.detail += f" (CPU time limit of {limits.cpu_time_s} s)"
    else:
        out.kind = "no_message"
        out.detail = f"the evaluation process exited with code {out.exit_code} without reporting a result"
    return out


# ---- child side -----------------------------------------------------------------

def _send(fd, nonce, message):
    body = json.dumps(message, allow_nan=False).encode("utf-8")
    data = MAGIC + nonce.encode() + b":" + b"%012d:" % len(body) + body
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _close_fds(keep):
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _unshare(flags):
    return _libc.unshare(ctypes.c_int(flags)) == 0


def _write_file(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount_points():
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 4:
                # mountinfo escapes space, tab, newline and backslash as \ooo
                mp = parts[4].encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")
                points.append(mp)
    return points


def _mount(src, target, flags, fstype=None, data=None):
    s = src.encode() if src else None
    return _libc.mount(s, target.encode(), fstype.encode() if fstype else None, flags,
                       ctypes.c_char_p(data.encode()) if data else None) == 0


def _readonly_filesystems(writable_dirs, notes):
    """Remounts every mount read-only in our private mount namespace, except
    /proc, /dev and the writable directories (bind-mounted onto themselves
    first so they become mount points of their own)."""
    if not _mount(None, "/", MS_REC | MS_PRIVATE):
        notes.append(f"mount --make-rprivate / failed: {os.strerror(ctypes.get_errno())}")
        return False
    keep = set()
    for d in writable_dirs:
        real = os.path.realpath(d)
        if _mount(real, real, MS_BIND | MS_REC):
            keep.add(real)
        else:
            notes.append(f"bind {real} failed: {os.strerror(ctypes.get_errno())}")
    root_ok = False
    for mp in _mount_points():
        if mp in keep or mp == "/proc" or mp.startswith("/proc/") or mp == "/dev" or mp.startswith("/dev/"):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        try:
            st = os.statvfs(mp).f_flag
            for bit, ms in ST_TO_MS.items():
                if st & bit:
                    flags |= ms
        except OSError:
            continue
        ok = _mount(None, mp, flags)
        if mp == "/":
            root_ok = ok
            if not ok:
                notes.append(f"remounting / read-only failed: {os.strerror(ctypes.get_errno())}")
    return root_ok


def _map_user(uid, gid, notes):
    """In a new user namespace: our uid and gid are root in it."""
    try:
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", f"0 {uid} 1")
        _write_file("/proc/self/gid_map", f"0 {gid} 1")
    except OSError as e:
        notes.append(f"user namespace maps: {e.strerror}")


def _isolate(writable_dirs):
    info = {"network": False, "filesystem": False, "capabilities_dropped": False, "notes": []}
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    base = 0 if root else CLONE_NEWUSER
    got = 0
    if _unshare(base | CLONE_NEWNS | CLONE_NEWNET):
        got = CLONE_NEWNS | CLONE_NEWNET
    elif _unshare(base | CLONE_NEWNET):
        got = CLONE_NEWNET
        info["notes"].append("mount namespace unavailable")
    elif _unshare(base | CLONE_NEWNS):
        got = CLONE_NEWNS
        info["notes"].append("network namespace unavailable")
    else:
        info["notes"].append(f"unshare failed: {os.strerror(ctypes.get_errno())}")
    if got and not root:
        _map_user(uid, gid, info["notes"])
    info["network"] = bool(got & CLONE_NEWNET)
    if got & CLONE_NEWNS:
        info["filesystem"] = _readonly_filesystems(writable_dirs, info["notes"])
    if not info["network"]:
        info["notes"].append("network isolation unavailable")
    if not info["filesystem"]:
        info["notes"].append("filesystem isolation unavailable")
    return info


def _drop_capabilities():
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    ok = _libc.capset(header, data) == 0
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return ok


def _vm_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(limits):
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.device == "cpu":
        # What the warm server already maps (torch alone is a few GB of
        # address space) plus the job's budget.
        cap = _vm_bytes("VmSize") + limits.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    if os.geteuid() != 0:
        # Counted per user across the machine, threads included, so leave
        # room for what the user already runs.
        try:
            running = sum(len(os.listdir(f"/proc/{p}/task")) for p in os.listdir("/proc")
                          if p.isdigit() and os.stat(f"/proc/{p}").st_uid == os.getuid())
        except OSError:
            running = 0
        cap = running + 4 * limits.max_procs + 256
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap if hard == resource.RLIM_INFINITY else hard))


def _own_session(workdir, prefix, keep):
    """A freshly forked process's first steps: its own session, killed with
    its parent, stdin from /dev/null, stdout/stderr into WORKDIR/PREFIX
    stdout.txt and stderr.txt, no inherited descriptor but keep, tracebacks
    on fatal signals, no bytecode written, default signal handlers."""
    os.setsid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    devnull = os.open("/dev/null", os.O_RDONLY)
    out = os.open(os.path.join(workdir, prefix + "stdout.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(workdir, prefix + "stderr.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    _close_fds(keep)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    sys.dont_write_bytecode = True
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def enter(result_fd, limits, workdir, env, writable_dirs, keep=()):
    """Puts the current (freshly forked) process into the sandbox; of the
    inherited descriptors only result_fd and keep stay open. Returns what
    isolation could be had, for the result."""
    _own_session(workdir, "", {result_fd} | set(keep))
    info = _isolate([workdir] + list(writable_dirs))
    _set_limits(limits)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(env)
    # tempfile caches the temp dir it picked in the server (before TMPDIR
    # pointed here); everything else in the file system is read-only now.
    tempfile.tempdir = workdir
    info["capabilities_dropped"] = _drop_capabilities()
    return info


# In a judge: its candidate's process (set before the judge enters its sandbox).
_candidate = None


def candidate_link():
    return _candidate
