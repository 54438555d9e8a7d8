"""KernelGym's kernel store (env/harness/kernel_cache.py): compiled Triton
kernels kept per exact candidate source.

  rules      names outside Triton's two-level layout (parent or hidden
             parts, deeper paths) and oversized sets are refused
  store      publish then read_tree gives the same files back; a second
             publish of the same source changes nothing; the oldest entries
             go past MAX_ENTRIES
  process    the candidate's process writes seeded files into its own Triton
             cache before it loads the candidate, and its cache op returns
             them
  server     (CPU, through the warm server) a candidate that leaves a file in
             its Triton cache: the first job's files are kept, a second job
             of the same source is seeded with them, a job of another source
             (one byte differs) gets nothing
"""

import os
import shutil
import sys
import tempfile

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import torch  # noqa: E402

import corpus  # noqa: E402
from env.harness import kernel_cache  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def test_rules():
    check(kernel_cache.valid_files(["abc/kernel.cubin", "abc/kernel.json"], [10, 20]), "rules: a plain entry")
    for bad in (["../x"], ["abc/../x"], [".hidden/x"], ["abc/.x"], ["a/b/c"], ["/abs/x"], ["abc"], [3]):
        check(not kernel_cache.valid_files(bad, [1]), f"rules: {bad} accepted")
    check(not kernel_cache.valid_files(["a/b"], [kernel_cache.MAX_BYTES + 1]), "rules: too many bytes accepted")
    check(not kernel_cache.valid_files(["a/b", "a/c"], [1]), "rules: names and sizes differ in length")
    print("  rules: only Triton's layout, bounded")


def test_store():
    tmp = tempfile.mkdtemp(prefix="kg-kstore-")
    try:
        harvest = os.path.join(tmp, "harvest")
        store = os.path.join(tmp, "store")
        kernel_cache.write_tree(harvest, ["h1/k.cubin", "h1/k.json", "h2/l.so"], [b"\x7fELF", b"{}", b"so"])
        check(kernel_cache.publish(store, "src-a", harvest), "store: publish failed")
        names, datas = kernel_cache.read_tree(kernel_cache.entry_dir(store, "src-a"))
        check(names == ["h1/k.cubin", "h1/k.json", "h2/l.so"] and datas == [b"\x7fELF", b"{}", b"so"],
              f"store: read back {names} {datas}")
        kernel_cache.write_tree(harvest, ["h1/k.cubin"], [b"other"])
        check(not kernel_cache.publish(store, "src-a", harvest), "store: an entry was written twice")
        check(kernel_cache.read_tree(kernel_cache.entry_dir(store, "src-a"))[1][0] == b"\x7fELF",
              "store: the first entry changed")
        check(kernel_cache.read_tree(kernel_cache.entry_dir(store, "src-b")) == ([], []), "store: src-b has files")
        saved = kernel_cache.MAX_ENTRIES
        kernel_cache.MAX_ENTRIES = 2
        try:
            for i, src in enumerate(("src-b", "src-c")):
                os.utime(kernel_cache.entry_dir(store, "src-a"), (1000 + i, 1000 + i))
                kernel_cache.publish(store, src, harvest)
        finally:
            kernel_cache.MAX_ENTRIES = saved
        left = sorted(os.listdir(store))
        check(len(left) == 2 and kernel_cache.key("src-a") not in left, f"store: pruning left {left}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("  store: publish once, read back, prune the oldest")


def test_process():
    from env.harness import candidate_proc

    tmp = tempfile.mkdtemp(prefix="kg-kproc-")
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, ".triton")
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        r = candidate_proc.Runner("cpu")
        r.prepare()
        r.req_blobs = [torch.frombuffer(bytearray(b"cubin!"), dtype=torch.uint8)]
        src = corpus.read(os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))
        ans = r.op_load({"task_source": corpus.task_source("row_sum"), "candidate_source": src, "seed": 42,
                         "cache_files": ["h9/k.cubin"]})
        check(ans.get("ok"), f"process: load gave {ans}")
        path = os.path.join(tmp, ".triton", "h9", "k.cubin")
        check(os.path.isfile(path) and open(path, "rb").read() == b"cubin!", "process: the seeded file is missing")
        ans, blobs = r.op_cache({})
        got = dict(zip(ans["files"], [bytes(b) for b in blobs]))
        check(got.get("h9/k.cubin") == b"cubin!", f"process: cache op gave {ans}")
        r.req_blobs = [torch.frombuffer(bytearray(b"x"), dtype=torch.uint8)]
        r.op_load({"task_source": corpus.task_source("row_sum"), "candidate_source": src, "seed": 42,
                   "cache_files": ["../escape"]})
        check(not os.path.exists(os.path.join(tmp, "escape")), "process: a name outside the cache was written")
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
        shutil.rmtree(tmp, ignore_errors=True)
    print("  process: seeded before the load, returned by the cache op")


# The honest row_sum candidate (tests/kernelgym/candidates) that also leaves
# a file in its Triton cache, as compiling a kernel does on a GPU.
LEAVES_FILE = '''
import os

_d = os.path.join(os.environ["TRITON_CACHE_DIR"], "kgmarker{tag}")
os.makedirs(_d, exist_ok=True)
with open(os.path.join(_d, "kernel.cubin"), "w") as _f:
    _f.write("compiled")
'''


def leaves_file(tag):
    return LEAVES_FILE.format(tag=tag) + corpus.read(os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))


def test_server():
    cache = tempfile.mkdtemp(prefix="kg-kserver-")
    server = HarnessServer(env={"DK_KG_CACHE": cache})
    opts = {"correctness_trials": 2, "timeout_s": 60, "memory_limit_gb": 4, "static_checks": False}
    task = corpus.task_source("row_sum")
    src = leaves_file("a")
    try:
        first = server.evaluate(task, src, "cpu", opts, "first")
        check(first["status"] == "ok" and first.get("kernels_seeded") == 0 and first.get("kernels_harvested", 0) >= 1,
              f"server: first job {first['status']} seeded {first.get('kernels_seeded')} "
              f"harvested {first.get('kernels_harvested')} {first['error'][:300]}")
        entry = kernel_cache.entry_dir(os.path.join(cache, "kernels"), src)
        names, datas = kernel_cache.read_tree(entry)
        check("kgmarkera/kernel.cubin" in names and datas[names.index("kgmarkera/kernel.cubin")] == b"compiled",
              f"server: the store holds {names}")
        again = server.evaluate(task, src, "cpu", opts, "again")
        check(again["status"] == "ok" and again.get("kernels_seeded") == len(names) and "kernels_harvested" not in again,
              f"server: same source seeded {again.get('kernels_seeded')} of {len(names)}, "
              f"harvested {again.get('kernels_harvested')}")
        other = server.evaluate(task, leaves_file("b"), "cpu", opts, "other")
        check(other["status"] == "ok" and other.get("kernels_seeded") == 0,
              f"server: another source was seeded with {other.get('kernels_seeded')} files")
        print(f"  server: first job kept {first.get('kernels_harvested')} files, the same source got "
              f"{again.get('kernels_seeded')}, another source {other.get('kernels_seeded')}")
        check(server.close() == 0, "the server did not exit 0 on EOF")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main():
    test_rules()
    test_store()
    test_process()
    test_server()
    print(f"kernelgym kernel store: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
