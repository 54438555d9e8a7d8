"""The judge's handle on the candidate's process (env.harness.candidate_proc).

Requests go out and answers come back over the pipes made by
candidate_sandbox.fork_candidate. An answer is parsed as a claim: its outputs are
rebuilt from bytes (wire.decode_value) and its other fields are read with
their types checked, so a malformed or hostile answer is a clear failure,
never a crash of the judge.
"""

import os
import signal
import time

from env.harness import candidate_sandbox, wire


class CandidateGone(Exception):
    """The candidate's process closed the channel or sent garbage."""


class CandidateGarbled(CandidateGone):
    """The candidate's process wrote bytes that are not an answer into the
    channel: its output cannot be read."""


class Remote:
    def __init__(self, link):
        self.link = link
        self.calls = 0
        self.boundary_ms = 0.0
        # Where answers' blobs land (the judge sets its GPU: outputs go
        # there straight from the shared pages, with no copy on the host).
        self.blob_device = None

    def request(self, header):
        """(answer, blobs); raises CandidateGone with the reason. The time the
        round trip took beyond the work the candidate's process says it did
        adds to boundary_ms (the pipe, the encoding, the copies: a
        diagnostic, never a verdict)."""
        t0 = time.perf_counter()
        self.send(header)
        ans, blobs = self.receive()
        claimed = ans.get("ms")
        if isinstance(claimed, (int, float)) and not isinstance(claimed, bool):
            self.boundary_ms += max(0.0, (time.perf_counter() - t0) * 1000.0 - float(claimed))
        return ans, blobs

    def send(self, header, blobs=()):
        """Sends a request (blobs through the pipe) without waiting for its
        answer (receive() reads it), so the judge can work while the
        candidate's process does."""
        self.calls += 1
        try:
            wire.send(self.link.to_fd, header, blobs)
        except BrokenPipeError as e:
            raise CandidateGone(self.death_text()) from e
        except OSError as e:
            raise CandidateGone(f"the channel to the candidate's process failed: {e.strerror}") from e

    def receive(self):
        """(answer, blobs) of the request sent last; raises CandidateGone."""
        try:
            ans, blobs = wire.recv(self.link.from_fd, self.link.shm_fd, self.blob_device)
        except (EOFError, BrokenPipeError) as e:
            raise CandidateGone(self.death_text()) from e
        except wire.WireError as e:
            raise CandidateGarbled(f"the candidate's process answered with a malformed message ({e})") from e
        except OSError as e:
            raise CandidateGone(f"the channel to the candidate's process failed: {e.strerror}") from e
        if not isinstance(ans, dict):
            raise CandidateGone("the candidate's process answered with something that is not an object")
        return ans, blobs

    def death_text(self):
        code = candidate_sandbox._wait_exit_code(self.link.pid)
        if code > 128:
            sig = code - 128
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            text = f"the candidate's process died from signal {name}"
        else:
            text = f"the candidate's process exited with code {code} before answering"
        tail = self.stderr_tail()
        return text + ("\nstderr tail:\n" + tail if tail else "")

    def stderr_tail(self, n=1500):
        try:
            with open(self.link.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", errors="replace").strip()
        except OSError:
            return ""

    def close(self):
        for fd in (self.link.to_fd, self.link.from_fd, self.link.shm_fd):
            if fd is None:
                continue
            try:
                os.close(fd)
            except OSError:
                pass


def claimed_list(ans, key):
    v = ans.get(key)
    return [str(x)[:200] for x in v] if isinstance(v, list) else []


def claimed_int(ans, key):
    v = ans.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0
