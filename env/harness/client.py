"""A Python client for the warm server's line protocol, the same one the C
worker speaks: the server is started with a private pipe as its fd 3, jobs
are written to its stdin, results read from the pipe. Used by the tests and
the benchmark; the trainer goes through the C side (env/client.h).
"""

import json
import os
import select
import subprocess
import sys
import time


class ServerError(RuntimeError):
    pass


class HarnessServer:
    def __init__(self, python=None, root=None, env=None, ready_timeout_s=300.0):
        self.root = root or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.python = python or os.environ.get("DK_PYTHON") or sys.executable
        rfd, wfd = os.pipe()
        # The server expects the result pipe as its fd 3. dup2 leaves the
        # copy inheritable while the pipe's own descriptors (non-inheritable,
        # PEP 446) close at exec; close_fds must stay off, as it would run
        # after this hook and close fd 3 again.
        def child_fds():
            os.dup2(wfd, 3)

        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONPATH"] = self.root + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([self.python, "-m", "env.harness.server"], cwd=self.root,
                                     stdin=subprocess.PIPE, env=full_env, preexec_fn=child_fds,
                                     close_fds=False)
        os.close(wfd)
        self.rfd = rfd
        self.buf = b""
        self.ready = self._read_line(ready_timeout_s)
        if not self.ready.get("ready"):
            raise ServerError(f"the server's first line is not the ready line: {self.ready}")

    @property
    def pid(self):
        return self.proc.pid

    def _read_line(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError(f"no answer from the server within {timeout_s:g} s")
            ready, _, _ = select.select([self.rfd], [], [], left)
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise ServerError(f"the server closed its result pipe (exit code {self.proc.poll()})")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send_raw(self, data, timeout_s=600.0):
        """Writes raw bytes (one line) and returns the decoded answer."""
        self.proc.stdin.write(data if data.endswith(b"\n") else data + b"\n")
        self.proc.stdin.flush()
        return self._read_line(timeout_s)

    def request(self, obj, timeout_s=600.0):
        return self.send_raw(json.dumps(obj).encode("utf-8"), timeout_s)

    def evaluate(self, task_source, candidate_source, device="cpu", options=None, job_id="job", gpu=0,
                 task_name=None, timeout_s=None):
        job = {"id": job_id, "task_source": task_source, "candidate_source": candidate_source,
               "device": device, "gpu": gpu, "options": options or {}}
        if task_name:
            job["task_name"] = task_name
        wait = timeout_s or (float((options or {}).get("timeout_s", 120)) * 3 + 120)
        return self.request(job, wait)

    def close(self, timeout_s=30.0):
        """Closes stdin (the server exits 0 on EOF) and returns its exit code."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        os.close(self.rfd)
        return code
