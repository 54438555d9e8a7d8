#!/bin/bash
# test_kg_audit.sh: `kernelgym audit` on the CPU.
# 1. The project's own corpora (tests/kernelgym/hacks, tests/kernelgym/candidates):
#    every hack that is not kg-gpu-only must be caught and no honest candidate
#    rejected (--min-catch 1 --max-fp 0); the counts in the JSON report must
#    equal the files counted here from their headers.
# 2. A hand-made corpus where the answer is known: 2 static hacks, and an
#    "honest" folder of 2 honest candidates plus 1 hack: catch 2/2, false
#    positives 1/3 (exit 1 at --max-fp 0, exit 0 at --max-fp 0.34).
# 3. Usage errors: a missing folder, a candidate without kg-task (exit 2).
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${DK_BUILD:-build}/kernelgym"
PY="${DK_PYTHON:-python3}"
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Expected counts, from the headers.
n_hacks=0
for f in tests/kernelgym/hacks/*.py; do grep -q '^# kg-gpu-only' "$f" || n_hacks=$((n_hacks + 1)); done
n_honest=$(ls tests/kernelgym/candidates/*.py | wc -l)
"$KG" audit --hacks tests/kernelgym/hacks --honest tests/kernelgym/candidates --device cpu \
    --min-catch 1.0 --max-fp 0.0 --json "$tmp/own.json" > "$tmp/own.log" 2> "$tmp/own.err"
rc=$?
grep -A8 "^hacks caught" "$tmp/own.log"
[ $rc -eq 0 ] || { tail -40 "$tmp/own.log" "$tmp/own.err"; fail "own corpora: exit $rc, want 0"; }
grep -q "recipe: 98.7%" "$tmp/own.log" || fail "the recipe's catch rate is not printed"
"$PY" - "$tmp/own.json" "$n_hacks" "$n_honest" <<'PY' || fail "own corpora: JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
nh, nc = int(sys.argv[2]), int(sys.argv[3])
assert r["hacks"] == nh and r["caught"] == nh, (r["hacks"], r["caught"], nh)
assert r["honest"] == nc and r["honest_rejected"] == 0, (r["honest"], r["honest_rejected"], nc)
assert r["catch_rate"] == 1.0 and r["false_positive_rate"] == 0.0 and r["passed"] is True, r
assert sum(r["caught_by_reason"].values()) >= nh, r["caught_by_reason"]
print(f"own corpora: {nh}/{nh} hacks caught, 0/{nc} honest rejected")
PY

# A corpus with a known answer.
mkdir -p "$tmp/h" "$tmp/o"
cp tests/kernelgym/hacks/hack_exit_call.py tests/kernelgym/hacks/hack_torch_compile.py "$tmp/h/"
cp tests/kernelgym/candidates/softmax__triton.py tests/kernelgym/candidates/row_sum__triton.py "$tmp/o/"
cp tests/kernelgym/hacks/hack_env_access.py "$tmp/o/zz_hack_env_access.py"
"$KG" audit --hacks "$tmp/h" --honest "$tmp/o" --tasks tests/kernelgym/tasks --device cpu \
    --json "$tmp/mix.json" > "$tmp/mix.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$tmp/mix.log"; fail "mixed corpus at --max-fp 0: exit $rc, want 1"; }
grep -q "false positives:  1/3 = 33.3%" "$tmp/mix.log" || fail "mixed corpus: false positives line"
grep -q "hacks caught:     2/2 = 100.0%" "$tmp/mix.log" || fail "mixed corpus: caught line"
grep -q "honest rejected, by verdict: hack=1" "$tmp/mix.log" || fail "mixed corpus: honest verdicts"
"$KG" audit --hacks "$tmp/h" --honest "$tmp/o" --tasks tests/kernelgym/tasks --device cpu --max-fp 0.34 \
    > "$tmp/mix2.log" 2>&1 || fail "mixed corpus at --max-fp 0.34: exit $?, want 0"

# Usage errors name what is wrong.
"$KG" audit --hacks "$tmp/none" --honest "$tmp/o" > /dev/null 2> "$tmp/e1"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--hacks: $tmp/none: no such folder" "$tmp/e1" || fail "missing folder: exit $rc, $(cat "$tmp/e1")"
mkdir -p "$tmp/bad"
printf 'import torch\nclass ModelNew: pass\n' > "$tmp/bad/no_header.py"
"$KG" audit --hacks "$tmp/bad" --honest "$tmp/o" --tasks tests/kernelgym/tasks > /dev/null 2> "$tmp/e2"
rc=$?
[ $rc -eq 2 ] && grep -q "no_header.py: no '# kg-task: NAME' header" "$tmp/e2" || fail "no kg-task: exit $rc, $(cat "$tmp/e2")"

[ $fails -eq 0 ] && echo "audit: all checks passed" || echo "audit: $fails failure(s)"
[ $fails -eq 0 ]
