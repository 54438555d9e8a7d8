"""KernelGym: the candidate's process has a user identity (CPU device).

The candidate's process runs under a uid of its own (the server runs as
root). Triton and Inductor look that uid up (getpass.getuser(),
pwd.getpwuid(os.getuid()), os.path.expanduser("~")), so the sandbox binds
a per-job /etc/passwd and /etc/group over the machine's, read-only, with an
entry for that uid whose home is the job's private folder.

  identity   a candidate that makes those calls in its module code and in
             its forward, and checks their answers against each other, the
             environment and the machine's own entries, evaluates ok
  control    the same candidate asking for the entry of another uid fails
             (its checks really run inside the job)
  read-only  the bound files cannot be written from the candidate's process
             (the candidate checks that too)

Exits 77 where the server does not run as root (no uid switch: the
candidate's process is root of a user namespace and needs no entry).
"""

import os
import sys
import tempfile
import shutil

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

if os.geteuid() != 0:
    print("not root: the candidate's process keeps the server's identity; skipped")
    sys.exit(77)

import corpus  # noqa: E402
from env.harness.candidate_sandbox import CANDIDATE_USER, identity_lines  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402

# The honest row_sum candidate (tests/kernelgym/candidates) with identity
# checks in its module code and in its forward. OTHER_UID is 0 for the real
# test: the candidate looks up the uid os.getuid() + OTHER_UID, which must
# exist only when it is 0.
CHECKS = '''
import getpass
import grp
import os
import pwd

OTHER_UID = {other}


def who():
    uid = os.getuid()
    assert uid != 0, "the candidate runs as root"
    entry = pwd.getpwuid(uid + OTHER_UID)
    name = getpass.getuser()
    home = os.path.expanduser("~")
    assert entry.pw_name == name == "{user}", (entry, name)
    assert entry.pw_dir == home == os.environ["HOME"] == os.getcwd(), (entry.pw_dir, home, os.getcwd())
    assert grp.getgrgid(os.getgid()).gr_name == name
    assert pwd.getpwnam("root").pw_uid == 0, "the machine's entries are gone"
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        assert os.environ[var].startswith(home + "/"), (var, os.environ[var], home)
    try:
        open("/etc/passwd", "a").close()
    except OSError:
        pass
    else:
        raise AssertionError("/etc/passwd is writable")
    return name


WHO = who()
'''

FORWARD_CHECK = '''

_Honest = ModelNew


class ModelNew(_Honest):
    def forward(self, x):
        assert who() == WHO
        return super().forward(x)
'''


def candidate(other):
    honest = corpus.read(os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))
    return CHECKS.format(other=other, user=CANDIDATE_USER) + honest + FORWARD_CHECK


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def test_lines():
    """identity_lines on a hand-made file: the machine's entries kept, a
    stale entry of the same uid or name replaced, one entry added."""
    passwd = "root:x:0:0:root:/root:/bin/bash\nold:x:1048577:1:stale:/x:/bin/sh\n"
    group = "root:x:0:\nkg-candidate:x:5:\n"
    pw, gr = identity_lines(1048577, "/tmp/job", passwd, group)
    check(pw == "root:x:0:0:root:/root:/bin/bash\n"
               "kg-candidate:x:1048577:1048577:KernelGym candidate:/tmp/job:/usr/sbin/nologin\n",
          f"passwd lines: {pw!r}")
    check(gr == "root:x:0:\nkg-candidate:x:1048577:\n", f"group lines: {gr!r}")


def main():
    test_lines()
    cache = tempfile.mkdtemp(prefix="kg-identity-")
    server = HarnessServer(env={"DK_KG_CACHE": cache})
    opts = {"correctness_trials": 2, "timeout_s": 60, "memory_limit_gb": 4, "static_checks": False}
    task = corpus.task_source("row_sum")
    try:
        res = server.evaluate(task, candidate(0), "cpu", opts, "identity")
        cand = (res.get("sandbox") or {}).get("candidate") or {}
        check(res["status"] == "ok" and res["correct"],
              f"identity: {res['status']} {res['error'][:600]} (sandbox notes {cand.get('notes')})")
        check(isinstance(cand.get("uid"), int) and cand["uid"] != 0 and cand.get("identity") is True,
              f"identity: the candidate's process ran as {cand.get('uid')} with identity {cand.get('identity')}")
        print(f"  identity: {res['status']} as uid {cand.get('uid')} ({CANDIDATE_USER})")
        res = server.evaluate(task, candidate(1), "cpu", opts, "control")
        check(res["status"] == "compile_error" and "getpwuid" in res["error"],
              f"control: a lookup of another uid gave {res['status']} {res['error'][:300]}")
        print(f"  control: {res['status']} ({res['error'].splitlines()[0][:80] if res['error'] else ''})")
        check(server.close() == 0, "the server did not exit 0 on EOF")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"kernelgym identity: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
