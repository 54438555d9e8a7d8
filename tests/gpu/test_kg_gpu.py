"""KernelGym harness on a GPU (exits 77 without one).

  - honest candidates on GPU-sized tasks: ok, timed, a speedup and a profile;
  - coverage: a candidate that keeps the matmul in torch and fuses bias+ReLU
    in Triton gets a coverage within 10% of the one computed from the two
    parts timed separately in this process;
  - stability: the same candidate evaluated 10 times gives speedups with a
    coefficient of variation <= 1% when its kernel takes 20 us or more
    (<= STABILITY_FLOOR below that: launch jitter is a larger share of a
    shorter call); the test prints the CoV and the kernel's time;
  - every hack of the corpus, the GPU-only ones included (side stream,
    token kernel time, implausible speedup), is caught with its reason;
  - faults, CUDA illegal address and a kernel that never ends among them:
    the expected status, then gpu_check is fine and the next honest job too;
  - the adversarial corpus tests/kernelgym/hacks2 (the CPU test is
    tests/unit/test_kg_trust.py): every single-job attack ends with its
    reason or status (on the GPU the timer attack must meet the judge's wall
    clock: runtime:timing_mismatch), none is ok with a speedup above the
    honest candidate's, and the plant / victim sequence leaves the victim ok.

DK_KG_REPORT=FILE writes every measured number as JSON.
"""

import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import torch  # noqa: E402

if not torch.cuda.is_available():
    print("no CUDA device: skipped")
    sys.exit(77)

import corpus  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402

BASE = {"memory_limit_gb": 16, "timeout_s": 120}
failures = []
report = {"honest": {}, "hacks": {}, "faults": {}}


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what, flush=True)
    return cond


def kgprof_env():
    env = {}
    lib = os.environ.get("DK_KGPROF_LIB")
    if not lib and os.environ.get("DK_BUILD"):
        cand = os.path.join(os.environ["DK_BUILD"], "env", "cupti", "libkgprof.so")
        if os.path.exists(cand):
            lib = cand
    if lib:
        env["DK_KGPROF_LIB"] = lib
    return env, lib


def run(server, task_src, cand_src, options=None, job_id="job"):
    opts = dict(BASE)
    opts.update(options or {})
    return server.evaluate(task_src, cand_src, "cuda", opts, job_id)


def honest_probe(server, after):
    gc = server.request({"kind": "gpu_check", "gpu": 0})
    check(gc["gpu_ok"], f"gpu_check after {after}: {gc}")
    src = corpus.read(os.path.join(corpus.HERE, "candidates", "row_sum__triton.py"))
    res = run(server, corpus.task_source("row_sum", gpu=True), src, job_id="probe")
    check(res["status"] == "ok" and res["correct"], f"honest job after {after}: {res['status']} {res['error'][:300]}")


def test_honest(server, lib):
    for path, src, m in corpus.entries("candidates"):
        name = os.path.basename(path)
        t0 = time.monotonic()
        res = run(server, corpus.task_for(m, "cuda"), src, job_id=name)
        wall = time.monotonic() - t0
        ok = check(res["status"] == "ok" and res["correct"] and res["timing_available"] and res["speedup"],
                   f"{name}: {res['status']} {res['hack']['reasons']} {res['error'][:400]}")
        prof = res.get("profile") or {}
        report["honest"][name] = {"status": res["status"], "speedup": res["speedup"], "runtime_ms": res["runtime_ms"],
                                  "ref_runtime_ms": res["ref_runtime_ms"], "coverage": prof.get("coverage"),
                                  "profile_source": prof.get("source"), "max_abs_diff": res["max_abs_diff"],
                                  "phases_ms": res["phases_ms"], "wall_s": wall,
                                  "kernels": [(k["name"][:60], round(k["time_us"], 1), k["candidate"])
                                              for k in prof.get("kernels", [])[:4]]}
        if ok:
            if lib:
                check(prof.get("source") == "cupti", f"{name}: profile source {prof.get('source')} {prof.get('kgprof_error', '')}")
            check(prof.get("coverage") is not None and prof["coverage"] > 0, f"{name}: coverage {prof.get('coverage')}")
            check(prof.get("side_streams") in (False, None), f"{name}: side streams reported")
            print(f"  honest {name:52s} {res['runtime_ms']['mean']:8.3f} ms vs ref {res['ref_runtime_ms']['mean']:8.3f} ms "
                  f"speedup {res['speedup']:6.2f} coverage {prof['coverage']:.3f} ({prof.get('source')}) "
                  f"diff {res['max_abs_diff']:.1e} wall {wall:.2f} s", flush=True)


def _time_parts(calls=20, reps=7):
    """Times torch.matmul and the candidate's Triton epilogue separately, each
    as `calls` back-to-back launches between two events (launch gaps
    amortised), median of `reps`."""
    import importlib.util

    path = os.path.join(corpus.HERE, "candidates", "gemm_bias_relu__torch_matmul_triton_epilogue.py")
    spec = importlib.util.spec_from_file_location("kg_coverage_candidate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    task_ns = {}
    exec(compile(corpus.task_source("gemm_bias_relu", gpu=True), "task", "exec"), task_ns)
    M, K, N = task_ns["batch_size"], task_ns["in_features"], task_ns["out_features"]
    dev = torch.device("cuda")
    x = torch.randn(M, K, device=dev)
    w = torch.randn(N, K, device=dev) / K ** 0.5
    b = torch.randn(N, device=dev)
    y = torch.matmul(x, w.t()).contiguous()
    out = torch.empty_like(y)
    n = y.numel()

    def mm():
        torch.matmul(x, w.t())

    def epi():
        mod.bias_relu_kernel[(mod.triton.cdiv(n, 1024),)](y, b, out, n, N, BLOCK=1024)

    def timed(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        per = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(calls):
                fn()
            e.record()
            torch.cuda.synchronize()
            per.append(s.elapsed_time(e) / calls)
        return statistics.median(per)

    return timed(mm), timed(epi)


def test_coverage(server):
    src = corpus.read(os.path.join(corpus.HERE, "candidates", "gemm_bias_relu__torch_matmul_triton_epilogue.py"))
    res = run(server, corpus.task_source("gemm_bias_relu", gpu=True), src, job_id="coverage")
    if not check(res["status"] == "ok" and res.get("profile"), f"coverage job: {res['status']} {res['error'][:300]}"):
        return
    cov = res["profile"]["coverage"]
    mm_ms, epi_ms = _time_parts()
    expected = epi_ms / (mm_ms + epi_ms)
    rel = abs(cov - expected) / expected
    report["coverage"] = {"profile": cov, "expected": expected, "matmul_ms": mm_ms, "epilogue_ms": epi_ms,
                          "relative_error": rel, "source": res["profile"].get("source")}
    print(f"  coverage: profile {cov:.4f} vs separately timed {expected:.4f} (matmul {mm_ms:.4f} ms, "
          f"epilogue {epi_ms:.4f} ms): relative difference {100 * rel:.1f}%", flush=True)
    check(rel <= 0.10, f"coverage {cov:.4f} differs from {expected:.4f} by {100 * rel:.1f}% (> 10%)")


# Speedup CoV over 10 evaluations: at most 1% for kernels of 20 us and up;
# below that the floor is STABILITY_FLOOR.
STABILITY_BAR = 0.01
STABILITY_MIN_MS = 0.020
STABILITY_FLOOR = 0.03


def test_stability(server, n=10):
    src = corpus.read(os.path.join(corpus.HERE, "candidates", "gemm_bias_relu__triton_full.py"))
    task = corpus.task_source("gemm_bias_relu", gpu=True)
    speedups, means, medians, refs = [], [], [], []
    first_profile = None
    for i in range(n):
        res = run(server, task, src, job_id=f"stability-{i}")
        if not check(res["status"] == "ok" and res["speedup"], f"stability run {i}: {res['status']} {res['error'][:200]}"):
            return
        # the reference's op profile: measured by a first judge of the task,
        # then handed on by the server to the next ones
        rp = res.get("reference_profile")
        check(isinstance(rp, list) and rp and "reference_profile_given" not in res,
              f"stability run {i}: reference profile {rp} {res.get('reference_profile_error')}")
        first_profile = first_profile or rp
        check(rp == first_profile, f"stability run {i}: the reference profile changed within the cache's life")
        speedups.append(res["speedup"])
        means.append(res["runtime_ms"]["mean"])
        medians.append(res["runtime_ms"]["median"])
        refs.append(res["ref_runtime_ms"]["median"])
        check(res.get("reference_interleaved"), f"stability run {i}: the reference was not timed beside the candidate")
    cov = statistics.pstdev(speedups) / statistics.fmean(speedups)
    kernel_ms = statistics.median(medians)
    bar = STABILITY_BAR if kernel_ms >= STABILITY_MIN_MS else STABILITY_FLOOR
    report["stability"] = {"speedups": speedups, "runtime_mean_ms": means, "runtime_median_ms": medians,
                           "ref_median_ms": refs, "cov": cov, "bar": bar, "kernel_ms": kernel_ms}
    print(f"  stability: {n} evaluations, kernel {1000 * kernel_ms:.1f} us (reference "
          f"{1000 * statistics.median(refs):.1f} us), speedup mean {statistics.fmean(speedups):.3f}, "
          f"min {min(speedups):.3f}, max {max(speedups):.3f}, CoV {100 * cov:.2f}% (bar {100 * bar:g}%)", flush=True)
    check(cov <= bar, f"speedup CoV {100 * cov:.2f}% > {100 * bar:g}% (kernel {1000 * kernel_ms:.1f} us)")


def test_hacks(server):
    for path, src, m in corpus.entries("hacks"):
        name = os.path.basename(path)
        reason = "|".join(corpus.expected_reasons(m, "cuda"))
        t0 = time.monotonic()
        res = run(server, corpus.task_for(m, "cuda"), src, corpus.options(m, "cuda"), job_id=name)
        report["hacks"][name] = {"status": res["status"], "reasons": res["hack"]["reasons"],
                                 "error": res["error"][:300], "speedup": res.get("speedup"),
                                 "recheck": res.get("recheck"), "wall_s": time.monotonic() - t0,
                                 "profile": {k: (res.get("profile") or {}).get(k)
                                             for k in ("coverage", "candidate_time_us", "total_time_us", "streams")}}
        check(corpus.caught(m, "cuda", res),
              f"{name}: expected {reason}, got {res['status']} {res['hack']['reasons']} {res['error'][:300]}")
        print(f"  hack {name:45s} -> {', '.join(res['hack']['reasons']) or res['status']}", flush=True)


def test_hacks2(server):
    honest = run(server, corpus.task_source("gemm_bias_relu", gpu=True),
                 corpus.read(os.path.join(corpus.HERE, "candidates", "gemm_bias_relu__torch_matmul_triton_epilogue.py")),
                 job_id="hacks2-honest")
    best = honest.get("speedup") or 0.0
    report["hacks2"] = {"honest_speedup": best}
    for path, src, m in corpus.entries("hacks2"):
        name = os.path.basename(path)
        if m.get("sequence"):
            continue
        res = run(server, corpus.task_for(m, "cuda"), src, corpus.options(m, "cuda"), job_id=name)
        report["hacks2"][name] = {"status": res["status"], "reasons": res["hack"]["reasons"],
                                  "error": res["error"][:300], "speedup": res.get("speedup"),
                                  "timing_check": res.get("timing_check")}
        if m.get("expect"):
            ok = corpus.caught(m, "cuda", res)
        else:
            ok = res["status"] in corpus.expected_statuses(m, "cuda")
        check(ok, f"hacks2 {name}: expected {m.get('expect') or m.get('expect-status')}, got {res['status']} "
                  f"{res['hack']['reasons']} {res['error'][:300]}")
        if res["status"] == "ok":
            check((res.get("speedup") or 0.0) <= 1.2 * max(best, 1.0),
                  f"hacks2 {name}: ok with speedup {res.get('speedup')} (honest {best})")
        if m.get("expect-coverage-max"):
            prof = res.get("profile") or {}
            report["hacks2"][name]["profile"] = {k: prof.get(k) for k in ("coverage", "attribution", "kernels")}
            check(prof.get("attribution") == "correlation" and (prof.get("coverage") or 0.0) <= float(m["expect-coverage-max"]),
                  f"hacks2 {name}: coverage {prof.get('coverage')} by {prof.get('attribution')}, "
                  f"at most {m['expect-coverage-max']} by correlation expected")
        print(f"  hacks2 {name:36s} -> {res['status']:10s} {', '.join(res['hack']['reasons'])}", flush=True)
    shared = tempfile.mkdtemp(prefix="kg-gpu-shared-")
    for name in ("c6_plant.py", "c6_victim.py"):
        src = corpus.read(os.path.join(corpus.HERE, "hacks2", name))
        src = src.replace('KG_SHARED_DIR = "/nonexistent"', f"KG_SHARED_DIR = {shared!r}")
        res = run(server, corpus.task_source("gemm_bias_relu", gpu=True), src, {"static_checks": False}, job_id=name)
        report["hacks2"][name] = {"status": res["status"], "error": res["error"][:300],
                                  "candidate_sandbox": (res.get("sandbox") or {}).get("candidate")}
        check(res["status"] == "ok", f"hacks2 {name} in sequence: {res['status']} {res['error'][:300]}")
        print(f"  hacks2 {name:36s} -> {res['status']}", flush=True)
    import shutil
    shutil.rmtree(shared, ignore_errors=True)


def test_faults(server, isolation):
    escape = "/tmp/kg_fault_escape_probe.txt"
    for path, src, m in corpus.entries("faults"):
        name = os.path.basename(path)
        if name == "fault_socket.py":
            continue  # the listener side is covered by the CPU test; the namespace is the same
        if name == "fault_write_outside.py" and os.path.exists(escape):
            os.unlink(escape)
        t0 = time.monotonic()
        res = run(server, corpus.task_for(m, "cuda"), src, corpus.options(m, "cuda"), job_id=name)
        took = time.monotonic() - t0
        needs = m.get("needs")
        report["faults"][name] = {"status": res["status"], "error": res["error"][:300], "wall_s": took}
        if needs is None or isolation.get(needs):
            want = corpus.expected_statuses(m, "cuda")
            check(res["status"] in want, f"{name}: expected {'|'.join(want)}, got {res['status']}: {res['error'][:300]}")
        if name == "fault_write_outside.py" and isolation.get("filesystem"):
            check(not os.path.exists(escape), f"{name}: {escape} was written")
        print(f"  fault {name:40s} -> {res['status']:13s} {took:6.2f} s  "
              f"{res['error'].splitlines()[0][:100] if res['error'] else ''}", flush=True)
        honest_probe(server, name)


def main():
    t_start = time.monotonic()
    env, lib = kgprof_env()
    cache = tempfile.mkdtemp(prefix="kg-gpu-cache-")
    env["DK_KG_CACHE"] = cache
    server = HarnessServer(env=env)
    ready = server.ready
    report["ready"] = ready
    print(f"server ready in {time.monotonic() - t_start:.1f} s: {ready}", flush=True)
    check(ready["cuda"], "the server sees no GPU")
    sections = [("honest", lambda: test_honest(server, lib)), ("coverage", lambda: test_coverage(server)),
                ("stability", lambda: test_stability(server)), ("hacks", lambda: test_hacks(server)),
                ("hacks2", lambda: test_hacks2(server)), ("faults", lambda: test_faults(server, ready["isolation"]))]
    only = os.environ.get("DK_KG_SECTIONS")
    for name, fn in sections:
        if only and name not in only.split(","):
            continue
        t0 = time.monotonic()
        fn()
        report.setdefault("section_s", {})[name] = time.monotonic() - t0
    code = server.close()
    check(code == 0, f"server exit code {code}")
    import shutil
    shutil.rmtree(cache, ignore_errors=True)
    report["failures"] = failures
    if os.environ.get("DK_KG_REPORT"):
        with open(os.environ["DK_KG_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    print(f"kernelgym harness (GPU): {len(failures)} failures in {time.monotonic() - t_start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
