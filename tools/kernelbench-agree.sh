#!/usr/bin/env bash
# kernelbench-agree.sh KERNELBENCH_DIR OUT [CANDIDATES_DIR]: times the same
# honest candidates with KernelBench's own harness (kernelbench.eval.
# eval_kernel_against_ref from the user's checkout, as tools/get-kernelbench.sh
# makes it) and with `kernelgym eval --device cuda`, and prints each
# candidate's two speedups and their ratio, then the largest and median
# deviation. Needs a CUDA GPU (written for an H200) and, in the python it
# runs, torch, triton and what KernelBench's evaluation imports (its
# requirements: pydantic, numpy, requests, python-dotenv, tqdm, and the LLM
# clients openai and litellm, which its utils module loads); the tool checks
# that import first and names what is missing. The candidates default to
# tests/kernelgym/candidates, each run on
# its task (tests/kernelgym/tasks_gpu/NAME.py where it exists, else
# tests/kernelgym/tasks/NAME.py; NAME from its "# kg-task" or
# "# kg-task-gpu" header, as tests/kernelgym/corpus.py pairs them).
#
# Both harnesses flush L2 before each timed call (KernelBench's cuda_event
# method at the pinned commit does) and time with CUDA events. They differ
# in what they summarise and where they run: KernelBench takes the mean of
# its trials in one process that runs both models; KernelGym takes medians,
# times the reference in the judge's process and the candidate in its
# sandboxed process. Beside the speedups each row gives both sides' times
# (ms) and, for KernelGym, the candidate's kernel time per forward from its
# CUPTI profile: an event time well above it is time the GPU waited on the
# host inside the forward.
#
# Run it on the GPU machine from the repository root, after a CUDA build:
#   tools/gpu-build.sh && tools/get-kernelbench.sh /tmp/kb
#   tools/kernelbench-agree.sh /tmp/kb /tmp/agree
# OUT gets agree.tsv (one row per candidate) and each side's result JSON.
set -eu
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: tools/kernelbench-agree.sh KERNELBENCH_DIR OUT [CANDIDATES_DIR]" >&2
    exit 2
fi
kb=$1
out=$2
cands=${3:-tests/kernelgym/candidates}
kg="${DK_BUILD:-build}/kernelgym"
py="${DK_PYTHON:-python3}"
trials=${KB_TRIALS:-100}
[ -f "$kb/src/kernelbench/eval.py" ] || { echo "kernelbench-agree.sh: $kb/src/kernelbench/eval.py not found: is $kb a KernelBench checkout?" >&2; exit 2; }
[ -d "$cands" ] || { echo "kernelbench-agree.sh: $cands: no such folder" >&2; exit 2; }
[ -x "$kg" ] || { echo "kernelbench-agree.sh: $kg not built" >&2; exit 2; }
# KernelBench's evaluation and everything it imports, before any candidate
if ! why=$(PYTHONPATH="$kb/src${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "import kernelbench.eval" 2>&1); then
    echo "kernelbench-agree.sh: KernelBench's evaluation does not import in $py:" \
         "$(printf '%s\n' "$why" | tail -1) (install its requirements, $kb/requirements.txt)" >&2
    exit 2
fi
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
    || { echo "kernelbench-agree.sh: no CUDA GPU visible to $py" >&2; exit 1; }
mkdir -p "$out"

# KernelBench's side: one call of its evaluation, correctness then timing of
# candidate and reference (its reference is timed only on the path that checks
# for excessive speedups, so that path runs, with no threshold); prints
# "ref_ms cand_ms" (its units cancel in the ratio).
kb_time() {
    PYTHONPATH="$kb/src${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$1" "$2" "$3" "$trials" <<'PY'
import json, sys
from kernelbench.eval import eval_kernel_against_ref
task, cand, out, trials = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = eval_kernel_against_ref(open(task).read(), open(cand).read(), num_correct_trials=5, num_perf_trials=trials,
                            measure_performance=True, timing_method="cuda_event", backend="triton",
                            check_for_excessive_speedup=True, excessive_speedup_threshold=float("inf"))
d = r.model_dump() if hasattr(r, "model_dump") else r.dict()
json.dump(d, open(out, "w"), indent=1, default=str)
if not (r.compiled and r.correctness) or r.runtime <= 0 or r.ref_runtime <= 0:
    print("nan nan")
else:
    print(r.ref_runtime, r.runtime)
PY
}

printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" candidate task kernelgym kernelbench ratio \
    kg_cand_ms kg_ref_ms kg_kernel_ms kb_cand_ms kb_ref_ms > "$out/agree.tsv"
for c in "$cands"/*.py; do
    name=$(basename "$c" .py)
    task=$(sed -n 's/^# kg-task-gpu: *//p' "$c" | head -1)
    [ -n "$task" ] || task=$(sed -n 's/^# kg-task: *//p' "$c" | head -1)
    [ -n "$task" ] || { echo "$c: no '# kg-task' header, skipped" >&2; continue; }
    t=tests/kernelgym/tasks_gpu/$task.py
    [ -f "$t" ] || t=tests/kernelgym/tasks/$task.py
    "$kg" eval --task "$t" --candidate "$c" --device cuda > "$out/$name.kernelgym.json" \
        || { echo "$name: kernelgym eval failed" >&2; continue; }
    read -r kg_s kg_cand kg_ref kg_kernel < <("$py" - "$out/$name.kernelgym.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r.get("status") == "ok" and r.get("speedup")
med = lambda k: (r.get(k) or {}).get("median") if ok else None
prof = r.get("profile") or {}
forward = prof.get("total_time_us")
print(*[("nan" if v is None else v) for v in (r.get("speedup") if ok else None, med("runtime_ms"),
                                               med("ref_runtime_ms"), forward / 1000.0 if forward else None)])
PY
)
    read -r ref_ms cand_ms < <(kb_time "$t" "$c" "$out/$name.kernelbench.json" 2> "$out/$name.kernelbench.log" | tail -1) || true
    kb_s=$("$py" -c "import sys,math; r,c=float(sys.argv[1]),float(sys.argv[2]); print(r/c if c==c and c>0 else 'nan')" "${ref_ms:-nan}" "${cand_ms:-nan}")
    ratio=$("$py" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.4f}' if a==a and b==b and b>0 else 'nan')" "$kg_s" "$kb_s")
    printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$name" "$task" "$kg_s" "$kb_s" "$ratio" \
        "$kg_cand" "$kg_ref" "$kg_kernel" "${cand_ms:-nan}" "${ref_ms:-nan}" >> "$out/agree.tsv"
done
"$py" - "$out/agree.tsv" <<'PY'
import math, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
print(f"{'candidate':46s} {'task':18s} {'kernelgym':>9s} {'kernelbench':>11s} {'ratio':>7s}   ms: "
      f"{'kg cand':>8s} {'kg ref':>8s} {'kg kernel':>9s} {'kb cand':>8s} {'kb ref':>8s}")
dev = []
for name, task, a, b, r, *ms in rows:
    times = " ".join(f"{float(x):{w}.4f}" for x, w in zip(ms, (8, 8, 9, 8, 8)))
    print(f"{name:46s} {task:18s} {float(a):9.3f} {float(b):11.3f} {r:>7s}       {times}")
    if r != "nan":
        dev.append(abs(float(r) - 1.0))
if dev:
    print(f"speedup ratio kernelgym / kernelbench over {len(dev)} candidates: largest deviation "
          f"{100 * max(dev):.1f}%, median {100 * statistics.median(dev):.1f}% (target: within 2%)")
else:
    print("no candidate was timed by both harnesses")
    sys.exit(1)
PY
