"""KernelGym throughput on one GPU: evaluates a set of candidates (the honest
corpus on GPU-sized tasks, cycled to --jobs evaluations) through the warm
server, one job at a time as a worker does, and prints per job the wall time,
the timed GPU work and the overhead (wall time minus timed GPU work), then
the median overhead, the median of every phase the result reports
(phases_ms) and jobs per minute.

--device cpu runs the same jobs through the Triton interpreter (no timing,
no profile): it shows where a job's time goes outside the GPU work (forks,
sandbox, imports, the pipe, the reference outputs) on a machine without one.

Timed GPU work of a job = candidate mean x (warm-up + timed calls), plus the
same for the reference when it was measured (by the judge, interleaved with
the candidate's calls, every job, with reference_mode eager) rather than read from the cache. A cold
pass over the set comes first and is reported apart: it pays each
candidate's Triton compile, work that is the candidate's own and that the
kernel store (env/harness/kernel_cache.py) keeps for later runs of the same
source. The --jobs measured evaluations after it are the harness's steady
state; --no-cold-pass measures from the first job instead. The phases
include "boundary" (the judge's round trips to the candidate's process
beyond the work that process reports), "time_clean" (the judge's baseline
of reference and empty calls before any candidate code ran),
"time_warmup" (the candidate's warm-up calls, a batch outside every wall
clock, inside "time") and "time_reference" (the judge's own reference, empty and warm-up batches
during the sequence). A task's clean baseline is measured once and handed
to its later judges by the server (DK_KG_CLEAN_CACHE_S; 0 times it in
every job, as before the cache), so after the cold pass "time_clean" shows
only in jobs that measured one.

    python tools/bench/bench_kernelgym.py [--jobs 20] [--runs 1] [--gpu 0] [--device cuda|cpu] [--report FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import corpus  # noqa: E402
from env.harness.client import HarnessServer  # noqa: E402


PHASE_ORDER = ("sandbox", "setup", "check", "load", "time_clean", "time_clean_first", "time_clean_batches",
               "candidate_load", "reference_outputs", "reference_fp64", "reference_profile", "correctness",
               "correctness_wait", "correctness_judge", "time", "time_warmup", "time_steady", "time_batches", "time_verify",
               "time_reference", "gate", "profile", "boundary", "spare_ready", "setup_wait", "reference", "child_wall",
               "total")


def phase_medians(rows):
    """{phase: median ms} over the rows that report it, in PHASE_ORDER
    (phases the harness adds later come after, by name)."""
    seen = {}
    for r in rows:
        for k, v in (r["phases_ms"] or {}).items():
            if isinstance(v, (int, float)):
                seen.setdefault(k, []).append(float(v))
    keys = [k for k in PHASE_ORDER if k in seen] + sorted(k for k in seen if k not in PHASE_ORDER)
    return {k: statistics.median(seen[k]) for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--no-cold-pass", dest="cold_pass", action="store_false",
                    help="measure from the first evaluation (compiles and reference timings included)")
    ap.add_argument("--cache", help="cache dir (default: a fresh temporary one)")
    ap.add_argument("--report", help="write the per-job numbers as JSON here")
    ap.add_argument("--no-prefork", dest="prefork", action="store_false",
                    help="DK_KG_PREFORK=0: fork each job's child only when the job arrives "
                         "(default: the server's, children forked and set up during the jobs before)")
    ap.add_argument("--runs", type=int, default=1,
                    help="measure the --jobs evaluations this many times on the same warm server, after one cold "
                         "pass, and print each run's median overhead and their median and spread")
    ap.add_argument("--pyprofile", type=int, default=0,
                    help="N > 0: profile each evaluation child and print the last job's N costliest calls")
    args = ap.parse_args()
    if args.runs < 1 or args.jobs < 1:
        ap.error("--runs and --jobs must be at least 1")

    cache = args.cache or tempfile.mkdtemp(prefix="kg-bench-cache-")
    env = {"DK_KG_CACHE": cache}
    if args.pyprofile > 0:
        env["DK_KG_PYPROFILE"] = str(args.pyprofile)
    if not args.prefork:
        env["DK_KG_PREFORK"] = "0"
    t0 = time.monotonic()
    server = HarnessServer(env=env)
    startup = time.monotonic() - t0
    if args.device == "cuda" and not server.ready.get("cuda"):
        print("the server sees no GPU; this benchmark needs one")
        server.close()
        if not args.cache:
            shutil.rmtree(cache, ignore_errors=True)
        return 2
    cands = [(os.path.basename(p), src, m) for p, src, m in corpus.entries("candidates")]
    rows = []
    last_profile = None
    # A cold pass first: each candidate once, paying its Triton compile and
    # its task's reference timing (both cached afterwards, as in an RL run
    # that revisits its tasks). It is reported apart from the measured set.
    plan = [(i, True, -1) for i in range(len(cands) if args.cold_pass else 0)] + \
           [(i, False, run) for run in range(args.runs) for i in range(args.jobs)]
    run_spans = {}  # run -> [start, end] (monotonic s)
    for i, cold, run in plan:
        if not cold:
            run_spans.setdefault(run, [time.monotonic(), None])
        name, src, m = cands[i % len(cands)]
        opts = {"perf_trials": args.perf_trials}
        t = time.monotonic()
        res = server.evaluate(corpus.task_for(m, args.device), src, args.device, opts,
                              job_id=f"bench-{'cold-' if cold else f'r{run}-'}{i}", gpu=args.gpu)
        wall = time.monotonic() - t
        work = 0.0
        rt = res.get("runtime_ms")
        seq = res.get("sequence") or {}
        calls = seq.get("calls", args.perf_trials) + seq.get("warmup", 3)
        if rt:
            work += rt["mean"] * calls / 1000.0
        ref = res.get("ref_runtime_ms")
        if ref and not res.get("reference_cached"):
            work += ref["mean"] * calls / 1000.0
        rows.append({"job": i, "candidate": name, "status": res["status"], "wall_s": wall, "gpu_work_s": work,
                     "forked_ahead": res.get("forked_ahead"),
                     "overhead_s": wall - work, "pass": -1 if cold else i // len(cands), "reference_cached": res.get("reference_cached"),
                     "phases_ms": res.get("phases_ms"), "speedup": res.get("speedup"), "error": res.get("error", "")[:200],
                     "kernels_seeded": res.get("kernels_seeded"), "timing_check": res.get("timing_check"),
                     "recheck_runs": (res.get("recheck") or {}).get("runs", 0),
                     "infra_retries": res.get("infra_retries", 0), "run": run,
                     "pyprofile": res.get("pyprofile") if args.pyprofile > 0 else None})
        last_profile = res.get("pyprofile")
        if not cold:
            run_spans[run][1] = time.monotonic()
    total = run_spans[args.runs - 1][1] - run_spans[0][0]
    server.close()
    if not args.cache:
        shutil.rmtree(cache, ignore_errors=True)

    where = f"GPU {args.gpu}" if args.device == "cuda" else "the CPU (Triton interpreter, no timing)"
    runs = f"{args.runs} runs of {args.jobs}" if args.runs > 1 else str(args.jobs)
    print(f"server start {startup:.1f} s; {runs} evaluations on {where}, {args.perf_trials} timed calls "
          f"each{' after a cold pass over the ' + str(len(cands)) + ' candidates' if args.cold_pass else ''}"
          f"{'; children forked ahead' if args.prefork else '; children forked when the job arrives (--no-prefork)'}")
    # re: the job's extra runs in fresh judges, "rN" for N strict re-runs of
    # its speedup (the server's recheck), "iN" for N runs again after a
    # judge died; their time is in the job's wall, their phases are not.
    print(f"{'job':>7} {'candidate':52s} {'status':8s} {'wall s':>7} {'gpu s':>7} {'ovh s':>7} {'speedup':>8} "
          f"{'re':>4}  phases ms")
    for r in rows:
        ph = r["phases_ms"] or {}
        brief = " ".join(f"{k}={ph[k]:.0f}" for k in PHASE_ORDER[:-1] if k in ph)
        sp = f"{r['speedup']:.2f}" if r["speedup"] else "-"
        label = f"cold {r['job']}" if r["pass"] < 0 else (f"{r['run'] + 1}:{r['job']}" if args.runs > 1
                                                              else str(r["job"]))
        extra = (f"r{r['recheck_runs']}" if r["recheck_runs"] else "") + \
            (f"i{r['infra_retries']}" if r["infra_retries"] else "")
        print(f"{label:>7} {r['candidate']:52s} {r['status']:8s} {r['wall_s']:7.2f} {r['gpu_work_s']:7.3f} "
              f"{r['overhead_s']:7.2f} {sp:>8} {extra or '-':>4}  {brief}")
    measured = [r for r in rows if r["pass"] >= 0]
    cold = [r["overhead_s"] for r in rows if r["pass"] < 0]
    summary = {
        "jobs": args.jobs,
        "median_overhead_s": statistics.median(r["overhead_s"] for r in measured),
        "max_overhead_s": max(r["overhead_s"] for r in measured),
        "median_overhead_cold_s": statistics.median(cold) if cold else None,
        "jobs_per_minute": 60.0 * len(measured) / total if total > 0 else None,
        "total_s": total,
        "failed": sum(r["status"] != "ok" for r in rows),
        "clean_cached": sum(bool((r["timing_check"] or {}).get("clean_cached")) for r in measured),
    }
    if args.runs > 1:
        # each run's median, then their median and spread: one run's median
        # moves with the few jobs near it
        per_run = []
        for run in range(args.runs):
            rr = [r for r in measured if r["run"] == run]
            span = run_spans[run][1] - run_spans[run][0]
            per_run.append({"median_overhead_s": statistics.median(r["overhead_s"] for r in rr),
                            "jobs_per_minute": 60.0 * len(rr) / span if span > 0 else None})
            print(f"run {run + 1}: median per-job overhead {per_run[-1]['median_overhead_s']:.3f} s, "
                  f"{per_run[-1]['jobs_per_minute']:.1f} jobs/minute")
        meds = [p["median_overhead_s"] for p in per_run]
        summary["runs"] = per_run
        summary["median_of_run_medians_s"] = statistics.median(meds)
        print(f"median over {args.runs} runs of the per-run median overhead: {statistics.median(meds):.3f} s "
              f"(min {min(meds):.3f}, max {max(meds):.3f}; target <= 0.6 s)")
    print(f"median per-job overhead: {summary['median_overhead_s']:.3f} s over {len(measured)} evaluations "
          f"(max {summary['max_overhead_s']:.3f} s; target <= 0.6 s)")
    if cold:
        print(f"cold pass (Triton compile and reference timing included): median overhead "
              f"{summary['median_overhead_cold_s']:.3f} s over {len(cold)} evaluations")
    phases = phase_medians(measured)
    summary["phase_medians_ms"] = phases
    print("median ms per phase: " + " ".join(f"{k}={v:.0f}" for k, v in phases.items()))
    # A job whose judge, forked ahead, had not finished its setup when the
    # job came (DK_KG_PREFORK too shallow for jobs this short) waited for it.
    waits = [(r["phases_ms"] or {}).get("setup_wait") for r in measured]
    waits = [w for w in waits if isinstance(w, (int, float))]
    waited = [w for w in waits if w >= 1.0]
    summary["setup_waits_ms"] = waits
    if waits:
        print(f"jobs that waited for their judge's setup: {len(waited)} of {len(waits)}"
              + (f" (median {statistics.median(waited):.0f} ms, max {max(waited):.0f} ms)" if waited else ""))
    # The server re-measures a random share of speedups above 1 (and every
    # implausible one) in a fresh judge: such a job costs about two.
    rest = [r["overhead_s"] for r in measured if not (r["recheck_runs"] or r["infra_retries"])]
    summary["rechecked"] = sum(bool(r["recheck_runs"]) for r in measured)
    summary["infra_retried"] = sum(bool(r["infra_retries"]) for r in measured)
    summary["eligible_for_recheck"] = sum((r["speedup"] or 0) > 1.0 for r in measured)
    print(f"jobs re-measured in a fresh judge: {summary['rechecked']} of {len(measured)} "
          f"({summary['eligible_for_recheck']} with a speedup above 1); run again after a judge died: "
          f"{summary['infra_retried']}"
          + (f"; median overhead of the {len(rest)} others {statistics.median(rest):.3f} s" if 0 < len(rest) < len(measured) else ""))
    print(f"clean timing baseline from the server's cache (DK_KG_CLEAN_CACHE_S) in {summary['clean_cached']} of "
          f"{len(measured)} evaluations")
    print(f"throughput: {summary['jobs_per_minute']:.1f} jobs/minute ({total:.1f} s for {len(measured)} jobs); "
          f"{summary['failed']} not ok")
    if args.pyprofile > 0 and last_profile:
        print(f"python profile of the evaluation child of job {args.jobs - 1}:\n{last_profile}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"summary": summary, "jobs": rows}, f, indent=1)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
