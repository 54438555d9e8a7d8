#!/bin/bash
# test_kg_score.sh: `kernelgym score` on tests/kernelgym_c/score, whose
# solutions carry their verdicts for the stand-in server
# (tests/kernelgym_c/fake_server.py), against Fast@p computed by hand:
#   task  solution                  verdict         counts for p <
#   1     1_Gemm_ReLU.py (name)     ok 2.5x         2.5
#   2     2_mine.py (id)            ok 1.0x         1.0
#   3     3_Softmax.py              ok 1.3x         1.3
#   4     4_LayerNorm.py            incorrect 3x    never
#   5     (missing)                 -               never
#   6     6_Gemm_Scale.py           hack 5x         never
#   7     7.py (bare id)            ok 0.6x         0.6
#   8     8_Matmul_Tanh.py          ok 1.5x         1.5 (strictly faster)
# fast_p over 8 tasks: p=0: 5, 0.5: 5, 0.8: 4, 1.0: 3, 1.2: 3, 1.5: 1, 2.0: 1.
# Run twice: in-process (no Redis) and through `--redis auto` with 2 workers.
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${DK_BUILD:-build}/kernelgym"
PY="${DK_PYTHON:-python3}"
[ -x "$PY" ] || PY=python3
[ -x "$KG" ] || { echo "FAIL: $KG not built"; exit 1; }
export KERNELGYM_SERVER=tests/kernelgym_c/fake_server.py DK_FAKE_CUDA=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
D=tests/kernelgym_c/score
fail=0

check_report() { # $1 = label, $2 = json report
    "$PY" - "$1" "$2" <<'PYEOF' || fail=1
import json, sys
label, path = sys.argv[1], sys.argv[2]
rep = json.load(open(path))
want = {"0": 5, "0.5": 5, "0.8": 4, "1": 3, "1.2": 3, "1.5": 1, "2": 1}
bad = []
for p, k in want.items():
    got = rep["fast_p"].get(p)
    if got is None or abs(got - k / 8) > 1e-12:
        bad.append(f"fast_{p} = {got}, expected {k}/8")
if rep["n_tasks"] != 8 or rep["n_solutions"] != 7:
    bad.append(f"{rep['n_tasks']} tasks / {rep['n_solutions']} solutions, expected 8 / 7")
by = {t["task"]: t for t in rep["tasks"]}
expect = {"1_Gemm_ReLU": ("ok", "1_Gemm_ReLU.py"), "2_Conv_Add": ("ok", "2_mine.py"),
          "4_LayerNorm": ("incorrect", "4_LayerNorm.py"), "5_Sum_Reduce": ("missing", None),
          "6_Gemm_Scale": ("hack", "6_Gemm_Scale.py"), "7_Max_Pool": ("ok", "7.py")}
for name, (status, sol) in expect.items():
    t = by[name]
    got_sol = t["solution"].rsplit("/", 1)[-1] if t["solution"] else None
    if t["status"] != status or got_sol != sol:
        bad.append(f"{name}: {t['status']} {got_sol}, expected {status} {sol}")
if by["3_Softmax"]["result"]["reward"] is None or abs(by["3_Softmax"]["result"]["reward"] - (0.7 * 1.3 + 0.3)) > 1e-9:
    bad.append(f"3_Softmax reward {by['3_Softmax']['result']['reward']}, expected 1.21")
print(f"{label}: " + ("  ".join(f"fast_{p}={rep['fast_p'][p]:.3f}" for p in want)))
for b in bad:
    print(f"FAIL {label}: {b}")
sys.exit(1 if bad else 0)
PYEOF
}

t0=$(date +%s.%N)
if ! timeout 60 "$KG" score --tasks $D/tasks --solutions $D/solutions --device cuda --json "$tmp/local.json" > "$tmp/local.txt" 2> "$tmp/local.err"; then
    echo "FAIL: score (in-process) exited non-zero"; cat "$tmp/local.err"; fail=1
else
    check_report "in-process" "$tmp/local.json"
    grep -q "^fast_0 = 0.625  fast_0.5 = 0.625  fast_0.8 = 0.500  fast_1 = 0.375  fast_1.2 = 0.375  fast_1.5 = 0.125  fast_2 = 0.125$" "$tmp/local.txt" \
        || { echo "FAIL: printed Fast@p line differs:"; cat "$tmp/local.txt"; fail=1; }
    grep -q "^5_Sum_Reduce  *missing" "$tmp/local.txt" || { echo "FAIL: the missing solution is not in the table"; fail=1; }
fi
t1=$(date +%s.%N)
if command -v redis-server > /dev/null; then
    if ! timeout 60 "$KG" score --tasks $D/tasks --solutions $D/solutions --device cuda --redis auto --workers 2 \
            --json "$tmp/fleet.json" > "$tmp/fleet.txt" 2> "$tmp/fleet.err"; then
        echo "FAIL: score --redis auto exited non-zero"; cat "$tmp/fleet.err"; fail=1
    else
        check_report "redis auto, 2 workers" "$tmp/fleet.json"
        workers=$("$PY" -c "import json,sys; print(len({t['result']['worker'] for t in json.load(open(sys.argv[1]))['tasks'] if t['result']}))" "$tmp/fleet.json")
        echo "results came from $workers worker(s)"
    fi
    ls -d /tmp/kernelgym-redis-* 2> /dev/null | while read -r d; do
        [ -S "$d/redis.sock" ] && pgrep -f "$d/redis.conf" > /dev/null && echo "note: a private redis still runs in $d"
    done
else
    echo "redis-server not installed: fleet run skipped"
fi
t2=$(date +%s.%N)

# usage errors name the flag
out=$("$KG" score --tasks $D/tasks 2>&1); rc=$?
[ $rc -eq 2 ] && [[ "$out" == *"--solutions"* ]] || { echo "FAIL: missing --solutions: rc $rc: $out"; fail=1; }
out=$("$KG" score --tasks /nonexistent --solutions $D/solutions 2>&1); rc=$?
[ $rc -eq 2 ] && [[ "$out" == *"--tasks"* ]] || { echo "FAIL: bad --tasks: rc $rc: $out"; fail=1; }
out=$("$KG" score --tasks $D/tasks --solutions $D/solutions --gpus 0 2>&1); rc=$?
[ $rc -eq 2 ] && [[ "$out" == *"--gpus"* ]] || { echo "FAIL: --gpus without auto: rc $rc: $out"; fail=1; }

printf "score: in-process %.1f s, fleet %.1f s\n" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
[ $fail -eq 0 ] && echo "score: all checks passed"
exit $fail
