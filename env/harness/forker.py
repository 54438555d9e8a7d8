"""The fork server: a process forked from the warm server before its first
job, from which every judge, and so every candidate's process, is forked.

Why. A process forked straight from the server inherits all of its memory:
the frames of the job the server is in the middle of (a child forked ahead
is forked during the job before its own), whatever the server keeps that
was derived from earlier jobs, and freed pages that once held them. A
candidate's process is a fork of its judge, so an earlier job's candidate
source was there to be found and run as the candidate's own (an attack of
the adversarial review did exactly that). The fork server is made once, when
the server has warmed up and seen no job; it is sent only the arguments of a
fork (limits, job folder, environment, the candidate's spec), never a job,
so every judge starts from memory that never held a job's data. A job
reaches its judge only through the judge's job pipe (sandbox.send_job).

How. Each request forks an intermediate process, which forks the judge
(sandbox.fork_child: the same sandboxed child the server would fork), sends
the judge's pid, nonce and the server's ends of its pipes back over the
socket (SCM_RIGHTS), and exits; the fork server says "done" once it has
reaped it. The judge is then an orphan, which the
kernel gives to the server (a child subreaper), so the server supervises,
kills and reaps it as if it had forked it. The judge waits until that has
happened before it asks to be killed with its parent (PR_SET_PDEATHSIG), or
the intermediate's exit would kill it.

The fork server dies with the server (PR_SET_PDEATHSIG) and when its socket
closes. It is never made again: a new one would be a fork of a server that
has seen jobs; if it is gone the server exits, and the worker restarts it.
"""

import os
import pickle
import signal
import socket
import sys

from env.harness import sandbox

MAX_REQUEST = 1 << 20


class ForkerGone(OSError):
    """The fork server is gone or broke its protocol."""


def _serve(sock, keep_fd):
    """The fork server's loop: one request, one judge."""
    sandbox.leave_server(keep_fd)
    while True:
        try:
            msg = sock.recv(MAX_REQUEST)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        pid = os.fork()
        if pid == 0:  # the intermediate: forks the judge, reports it, exits
            code = 0
            try:
                args = pickle.loads(msg)
                child = sandbox.fork_child(*args, reparented=True)
                fds = [child.rfd, child.gate_fd, child.job_fd, child.ready_fd]
                head = pickle.dumps(("ok", child.pid, child.nonce, child.t0, [fd is not None for fd in fds]))
                socket.send_fds(sock, [head], [fd for fd in fds if fd is not None])
            except BaseException as e:  # the server reads the failure as an OSError
                code = 1
                try:
                    sock.send(pickle.dumps(("error", f"{type(e).__name__}: {e}")))
                except OSError:
                    pass
            os._exit(code)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        # The intermediate is gone, so the judge is the server's now: only
        # then may the server wait for it (os.waitpid fails on another's child).
        try:
            sock.send(b"done")
        except OSError:
            os._exit(0)


class Forker:
    """The server's handle on its fork server."""

    def __init__(self):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            a.close()
            try:
                _serve(b, b.fileno())
            finally:
                os._exit(1)
        b.close()
        self.pid, self.sock = pid, a
        sandbox.keep_out_of_jobs(pid)

    def fork(self, limits, workdir, env, writable_dirs, body, ahead, candidate=None):
        """sandbox.fork_child's child, forked by the fork server; body must
        pickle (a module-level function, or a partial of one)."""
        try:
            self.sock.send(pickle.dumps((limits, workdir, env, writable_dirs, body, ahead, candidate)))
            head, fds, _, _ = socket.recv_fds(self.sock, MAX_REQUEST, 4)
            done = self.sock.recv(16) if head and head != b"done" else head
        except OSError as e:
            raise ForkerGone(f"the fork server is gone: {e}") from e
        if not head or done != b"done":
            raise ForkerGone("the fork server is gone")
        if head == b"done":  # the intermediate died before it could answer
            raise OSError("the fork server's intermediate process died")
        reply = pickle.loads(head)
        if reply[0] != "ok":
            for fd in fds:
                os.close(fd)
            raise OSError(f"the fork server could not fork a judge: {reply[1]}")
        _, pid, nonce, t0, present = reply
        it = iter(fds)
        rfd, gate_fd, job_fd, ready_fd = [next(it) if p else None for p in present]
        child = sandbox.Child(pid, rfd, nonce, limits, workdir, t0)
        child.gate_fd, child.job_fd, child.ready_fd = gate_fd, job_fd, ready_fd
        return child

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
