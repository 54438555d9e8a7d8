"""The candidate's process: forked by a judge before the judge sees its job,
and put into a sandbox of its own (env.harness.sandbox holds the judge's and
the mechanisms both use).

Beyond the judge's sandbox, the candidate's process gets new PID and IPC
namespaces, an empty private tmpfs over the temp dirs, /dev/shm, /run and the
server's caches and job directories (with the import path bound back
read-only), a uid of its own where the server runs as root, and its own
Triton and Inductor caches seeded from the server's. It then serves the
judge's requests (env.harness.candidate_proc); see docs/DESIGN.md §19.
"""

import ctypes
import os
import resource
import signal
import sys
import tempfile

from env.harness.sandbox import (CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER, MS_BIND,
                                 MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC, MS_REMOUNT, PR_CAPBSET_DROP,
                                 PR_SET_PDEATHSIG, _drop_capabilities, _libc, _map_user, _mount, _own_session,
                                 _readonly_filesystems, _set_limits, _unshare)

# A candidate's process runs as uid CANDIDATE_UID_BASE + the pid it was forked
# with (where the server runs as root): pids are unique among live processes,
# so two jobs that run at the same time, in one server or in two, never share
# a uid, and none shares the server's.
CANDIDATE_UID_BASE = 1 << 20
# Directories the candidate's process sees empty (a private tmpfs each):
# other jobs' directories, the Redis socket and its password file (under
# the temp dir with --redis auto), shared memory, the compile caches.
CANDIDATE_HIDDEN = ("/tmp", "/var/tmp", "/dev/shm", "/run")
# tmpfs pages are memory no process's RSS shows: each private tmpfs is
# small, /tmp (the job's home and compile caches) less so.
CANDIDATE_TMP_BYTES = 1 << 30
CANDIDATE_TMPFS_BYTES = 64 << 20


class CandidateSpec:
    """What the judge's fork needs to make the candidate's process: its
    device, its environment, more directories to hide, and the Triton cache
    the server pre-built (seed_cache: read by the candidate's process before
    it is hidden, then copied into its own cache, so every job starts warm
    and none writes what another loads)."""

    def __init__(self, device_type, env, hidden=(), seed_cache=None):
        self.device_type = device_type
        self.env = dict(env)
        self.hidden = list(hidden)
        self.seed_cache = seed_cache


SEED_CACHE_MAX_BYTES = 64 << 20


def _read_tree(root, limit=SEED_CACHE_MAX_BYTES):
    """{relative path: bytes} of the regular files under root, up to limit
    bytes in all (a seed cache is the server's own, and small)."""
    out, total = {}, 0
    if not root or not os.path.isdir(root):
        return out
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            try:
                if not os.path.isfile(path) or os.path.islink(path):
                    continue
                size = os.path.getsize(path)
                if total + size > limit:
                    return out
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
                total += size
            except OSError:
                continue
    return out


def _write_tree(root, files, uid):
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    if uid is not None:
        for d, dirs, names in os.walk(root):
            for n in dirs + names:
                os.chown(os.path.join(d, n), uid, uid)
        os.chown(root, uid, uid)


class CandidateLink:
    """The judge's end: the candidate's outermost pid, the two pipes and the
    shared memory file the outputs travel through (None where memfd_create
    is unavailable: they go through the pipe)."""

    def __init__(self, pid, to_fd, from_fd, shm_fd, stderr_path):
        self.pid, self.to_fd, self.from_fd, self.shm_fd = pid, to_fd, from_fd, shm_fd
        self.stderr_path = stderr_path


def fork_candidate(limits, workdir, spec, judge_fds):
    """Forks the candidate's process from a judge that has not seen its job.
    The process enters its own sandbox (candidate_enter) and serves requests
    (env.harness.candidate_proc) until the judge closes the pipes."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    try:
        from env.harness import wire

        shm = os.memfd_create("kg-wire", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        wire.seal_shm(shm)
    except (AttributeError, OSError):
        shm = None
    stderr_path = os.path.join(workdir, "candidate_stderr.txt")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd in list(judge_fds) + [to_w, from_r]:
                os.close(fd)
            candidate_enter(to_r, from_w, limits, workdir, spec, shm)
            from env.harness import candidate_proc

            candidate_proc.serve(to_r, from_w, spec.device_type, shm)
            code = 0
        except BaseException as e:
            # A spare forked ahead whose job never came is torn down with
            # its folder while its candidate may still be entering the
            # sandbox: that one has nobody to tell, and a line on the
            # server's stderr would read as a failure of the job just done.
            if os.path.isdir(workdir):
                try:
                    os.write(2, f"the candidate's process failed: {type(e).__name__}: {e}\n".encode())
                except OSError:
                    pass
        os._exit(code)
    os.close(to_r)
    os.close(from_w)
    return CandidateLink(pid, to_w, from_r, shm, stderr_path)


def _wait_exit_code(pid):
    """Waits for pid; its status as one exit code (128 + N for signal N)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        if os.WIFEXITED(status):
            return os.WEXITSTATUS(status)


def candidate_enter(rfd, wfd, limits, workdir, spec, shm=None):
    """Puts a freshly forked process into the candidate's sandbox. Beyond the
    judge's (enter): new PID and IPC namespaces (the process sees no other
    process, so it can signal or read none), an empty private tmpfs over the
    temp dirs, /dev/shm, /run and the server's caches and job directories, a
    uid of its own, its own Triton and Inductor caches. Returns in the
    process that serves (pid 2 of the new PID namespace; pid 1 only waits,
    and when it goes every process of the namespace goes with it)."""
    _own_session(workdir, "candidate_", {fd for fd in (rfd, wfd, shm) if fd is not None})
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    new_uid = CANDIDATE_UID_BASE + os.getpid() if root else None
    info = {"pid_namespace": False, "network": False, "filesystem": False, "private_tmp": False,
            "uid": None, "notes": []}
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
    base = 0 if root else CLONE_NEWUSER
    if _unshare(base | flags):
        got = flags
    elif _unshare(base | CLONE_NEWNS | CLONE_NEWNET):
        got = CLONE_NEWNS | CLONE_NEWNET
        info["notes"].append(f"PID namespace unavailable: {os.strerror(ctypes.get_errno())}")
    else:
        got = 0
        info["notes"].append(f"unshare failed: {os.strerror(ctypes.get_errno())}")
    if got and not root:
        _map_user(uid, gid, info["notes"])
    info["network"] = bool(got & CLONE_NEWNET)
    seed = _read_tree(spec.seed_cache)
    owner = new_uid if new_uid is not None else 0
    if got & CLONE_NEWNS:
        info["filesystem"] = _readonly_filesystems([], info["notes"])
        if new_uid is not None:
            _expose_to_others(_python_paths(), info["notes"])
        hidden_ok = True
        for d in list(CANDIDATE_HIDDEN) + list(spec.hidden):
            if not os.path.isdir(d):
                continue
            size = CANDIDATE_TMP_BYTES if d == "/tmp" else CANDIDATE_TMPFS_BYTES
            data = f"mode=0700,uid={owner},gid={owner},size={size}"
            # The import path may live under a hidden folder (a checkout
            # under /tmp): it is opened before the cover and bound back in,
            # read-only, so the candidate's process can still import.
            keep = _paths_under(d, _python_paths())
            if not _mount("tmpfs", d, MS_NOSUID | MS_NODEV, "tmpfs", data):
                hidden_ok = False
                info["notes"].append(f"tmpfs over {d} failed: {os.strerror(ctypes.get_errno())}")
            _bind_back(keep, info["notes"])
        info["private_tmp"] = hidden_ok
    if got & CLONE_NEWPID:
        # The next fork is pid 1 of the new namespace; this process stays
        # outside, waits, and passes the exit status on.
        init = os.fork()
        if init:
            os.close(rfd)
            os.close(wfd)
            os._exit(_wait_exit_code(init))
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if got & CLONE_NEWNS and not _mount("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "proc"):
            info["notes"].append(f"mounting a private /proc failed: {os.strerror(ctypes.get_errno())}")
        worker = os.fork()
        if worker:
            os.close(rfd)
            os.close(wfd)
            _drop_capabilities()
            os._exit(_wait_exit_code(worker))
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        info["pid_namespace"] = os.getpid() == 2
    home = "/tmp/job" if info["private_tmp"] else workdir
    os.makedirs(home, exist_ok=True)
    env = dict(spec.env, HOME=home, TMPDIR=home, TRITON_CACHE_DIR=os.path.join(home, ".triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(home, ".inductor"), CUDA_CACHE_PATH=os.path.join(home, ".nv"))
    if seed:
        try:
            _write_tree(env["TRITON_CACHE_DIR"], seed, new_uid)
            info["seed_cache_files"] = len(seed)
        except OSError as e:
            info["notes"].append(f"seeding the Triton cache failed: {e.strerror}")
    _set_limits(limits)
    if new_uid is not None:
        os.chown(home, new_uid, new_uid)
        if info["private_tmp"]:
            info["identity"] = _bind_identity(new_uid, home, info["notes"])
    os.chdir(home)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = home
    if new_uid is not None:
        for cap in range(64):
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        try:
            os.setgroups([])
            os.setresgid(new_uid, new_uid, new_uid)
            os.setresuid(new_uid, new_uid, new_uid)
            info["uid"] = new_uid
        except OSError as e:
            info["notes"].append(f"cannot switch to uid {new_uid}: {e.strerror}")
        if os.geteuid() != 0:
            _set_nproc(limits)
    _drop_capabilities()
    global candidate_isolation
    candidate_isolation = info


candidate_isolation = None

# The passwd and group files the candidate's process sees: the machine's,
# plus an entry for its uid, made in a root-owned folder of its private /run
# and bound read-only over the originals (so getpass.getuser(),
# pwd.getpwuid(os.getuid()) and expanduser("~"), which Triton and Inductor
# call, work, and ~ is the job's private home).
CANDIDATE_USER = "kg-candidate"
IDENTITY_DIR = "/run/kg-identity"


def identity_lines(uid, home, passwd_text, group_text):
    """(passwd, group) texts: the originals with any entry of this uid or
    name dropped, then the candidate's own."""
    def keep(text, uid_field):
        out = []
        for line in text.splitlines():
            f = line.split(":")
            if len(f) > uid_field and (f[0] == CANDIDATE_USER or f[uid_field] == str(uid)):
                continue
            out.append(line)
        return out
    pw = keep(passwd_text, 2) + [f"{CANDIDATE_USER}:x:{uid}:{uid}:KernelGym candidate:{home}:/usr/sbin/nologin"]
    gr = keep(group_text, 2) + [f"{CANDIDATE_USER}:x:{uid}:"]
    return "\n".join(pw) + "\n", "\n".join(gr) + "\n"


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return ""


def _bind_identity(uid, home, notes):
    """Binds the per-job /etc/passwd and /etc/group (identity_lines) over the
    originals, read-only. Runs as root in the candidate's mount namespace,
    before the uid switch; the files stay root's, mode 0644."""
    passwd, group = identity_lines(uid, home, _read_text("/etc/passwd"), _read_text("/etc/group"))
    try:
        os.makedirs(IDENTITY_DIR, mode=0o755, exist_ok=True)
        os.chmod(IDENTITY_DIR, 0o755)
    except OSError as e:
        notes.append(f"identity folder {IDENTITY_DIR}: {e.strerror}")
        return False
    ok = True
    for name, text in (("passwd", passwd), ("group", group)):
        src, dst = os.path.join(IDENTITY_DIR, name), os.path.join("/etc", name)
        try:
            with open(src, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            os.chmod(src, 0o644)
        except OSError as e:
            notes.append(f"writing {src}: {e.strerror}")
            ok = False
            continue
        if not os.path.exists(dst):
            notes.append(f"{dst} does not exist: no {name} entry for uid {uid}")
            ok = False
            continue
        if not (_mount(src, dst, MS_BIND)
                and _mount(None, dst, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)):
            notes.append(f"binding {src} over {dst} failed: {os.strerror(ctypes.get_errno())}")
            ok = False
    return ok


def _python_paths():
    """What the candidate's process reads after it changed uid: Python's
    installation, the import path (the harness among it)."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for p in sys.path if p and os.path.isdir(p)}
    return paths


def _paths_under(d, paths):
    """(path, O_PATH fd) of the outermost paths strictly inside folder d,
    opened now so they can be bound back in once d is covered."""
    top = d.rstrip("/") + "/"
    inside = sorted({p for p in paths if p.startswith(top) and os.path.exists(p)})
    inside = [p for p in inside if not any(p != q and p.startswith(q + "/") for q in inside)]
    keep = []
    for p in inside:
        try:
            keep.append((p, os.open(p, os.O_PATH)))
        except OSError:
            pass
    return keep


def _bind_back(keep, notes):
    """Binds each kept path back to its place, read-only (see _paths_under)."""
    for p, fd in keep:
        try:
            os.makedirs(p, exist_ok=True)
            if not (_mount(f"/proc/self/fd/{fd}", p, MS_BIND | MS_REC)
                    and _mount(None, p, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)):
                notes.append(f"binding {p} back failed: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)


def _expose_to_others(paths, notes):
    """Makes paths readable to another uid where an ancestor is not (a
    Python under /root, mode 0700): the first closed ancestor is covered with
    an empty tmpfs that anyone may traverse, and each path is bind-mounted
    back in, read-only. Whatever else the ancestor held stays out of sight."""
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    real = [p for p in real if not any(p != q and p.startswith(q + "/") for q in real)]
    closed = {}
    for p in real:
        parts = p.split("/")
        for i in range(2, len(parts)):
            anc = "/".join(parts[:i])
            try:
                mode = os.stat(anc).st_mode
            except OSError:
                break
            if not mode & 0o001:
                closed.setdefault(anc, []).append(p)
                break
    for anc, subs in closed.items():
        keep = _paths_under(anc, subs)
        if not _mount("tmpfs", anc, MS_NOSUID | MS_NODEV, "tmpfs", "mode=0755,size=1048576"):
            notes.append(f"tmpfs over {anc} failed: {os.strerror(ctypes.get_errno())}")
            for _, fd in keep:
                os.close(fd)
            continue
        _bind_back(keep, notes)

def _set_nproc(limits):
    cap = 4 * limits.max_procs + 256
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
    except (ValueError, OSError):
        pass
