#!/bin/bash
# test_kg_cli.sh: the kernelgym program's contract: usage errors exit 2 and
# name the flag, runtime failures exit 1, `eval` exits 0 whatever the verdict
# (stand-in server tests/kernelgym_c/fake_server.py), bad sources become
# status "error" results, `serve` prints a URL and stops cleanly on SIGTERM
# (its private Redis and temp dir gone), `check` runs the static checker.
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${DK_BUILD:-build}/kernelgym"
PY="${DK_PYTHON:-python3}"
[ -x "$PY" ] || PY=python3
[ -x "$KG" ] || { echo "FAIL: $KG not built"; exit 1; }
unset KERNELGYM_REDIS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0

expect() { # $1 = wanted exit code, $2 = text the message must contain, rest = arguments
    local want=$1 text=$2
    shift 2
    n=$((n + 1))
    local out rc
    out=$(timeout 30 "$KG" "$@" 2>&1 < /dev/null); rc=$?
    if [ $rc -ne $want ] || [[ "$out" != *"$text"* ]] || [[ "$out" =~ kernelgym\ [a-z]+:\ kernelgym ]]; then
        echo "FAIL: kernelgym $*: exit $rc (expected $want), output: $out"; fail=1
    fi
}
printf 'import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n' > "$tmp/task.py"
printf '# fake-result: {"speedup": 1.25}\nclass ModelNew:\n    pass\n' > "$tmp/cand.py"

expect 2 "usage: kernelgym"
expect 0 "usage: kernelgym" --help
expect 2 "unknown command 'bogus'" bogus
expect 2 "--task is required" eval --candidate "$tmp/cand.py"
expect 2 "--candidate is required" eval --task "$tmp/task.py"
expect 2 "unknown flag '--foo'" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --foo
expect 2 "--timeout: expected a number, got 'abc'" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --timeout abc
expect 2 "--timeout needs a value" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --timeout
expect 2 "--timeout: 0 is outside" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --timeout 0
expect 2 "--trials: expected an integer, got '2.5'" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --trials 2.5
expect 2 "--device: expected one of auto, cpu, cuda, got 'gpu'" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --device gpu
expect 2 "--reward: expected one of profile, public" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --reward=fancy
expect 2 "--alpha: 2 is outside [0, 1]" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --alpha 2
expect 2 "--task: $tmp/none.py: no such file" eval --task "$tmp/none.py" --candidate "$tmp/cand.py"
expect 2 "--candidate is required" check
expect 2 "--candidate: $tmp/none.py: no such file" check --candidate "$tmp/none.py"
expect 2 "--redis URL is required" worker
expect 2 "expected redis://host:port" worker --redis http://localhost:6379
expect 2 "--redis auto" worker --redis auto
expect 2 "port 70000 out of range" worker --redis redis://localhost:70000
expect 2 "--heartbeat: 0.1 is outside" worker --redis redis://localhost --heartbeat 0.1
expect 2 "--gpus: bad list '0,,1'" serve --gpus 0,,1
expect 2 "--gpus: bad range in '3-1'" serve --gpus 3-1
expect 2 "--gpus: 1 is listed twice" serve --gpus 0-1,1
expect 2 "--gpu: a fleet takes --gpus LIST" serve --gpu 0
expect 2 "--workers: 0 is outside" serve --workers 0
expect 2 "--gpus and --workers exclude each other" serve --gpus 0 --workers 2
expect 2 "--redis URL is required" submit --task "$tmp/task.py" --candidate "$tmp/cand.py"
expect 2 "--kind: expected one of eval, echo, sleep" submit --redis redis://localhost --kind nap
expect 2 "--wait: expected a number" submit --redis redis://localhost --kind echo --wait soon
expect 1 "cannot connect" submit --redis redis://127.0.0.1:1 --kind echo --wait 1

# eval: exit 0 whatever the verdict; the result carries reward and feedback
export KERNELGYM_SERVER=tests/kernelgym_c/fake_server.py DK_FAKE_CUDA=1
check_eval() { # $1 = label, $2 = candidate, $3 = python condition on r, rest = more flags
    n=$((n + 1))
    local out rc
    out=$(timeout 30 "$KG" eval --task "$tmp/task.py" --candidate "$2" --device cuda "${@:4}" 2> "$tmp/err"); rc=$?
    if [ $rc -ne 0 ] || [ "$("$PY" -c "import json,sys; r=json.loads(sys.argv[1]); print($3)" "$out" 2>&1)" != True ]; then
        echo "FAIL: eval $1: exit $rc, output: $out"; cat "$tmp/err"; fail=1
    fi
}
check_eval "ok" "$tmp/cand.py" "r['status'] == 'ok' and abs(r['reward'] - (0.7 * 1.25 + 0.3)) < 1e-12 and 'Speedup: 1.25x' in r['feedback'] and r['wall_ms'] >= 0"
# the public formula: 0.5 * correct + 0.5 * min(speedup, 3) + 0.5 * coverage (coverage 1 here)
check_eval "public reward" "$tmp/cand.py" "r['status'] == 'ok' and abs(r['reward'] - (0.5 + 0.5 * 1.25 + 0.5)) < 1e-12" --reward public
printf '# fake-result: {"status": "incorrect", "correct": false, "max_abs_diff": 0.5}\nclass ModelNew: pass\n' > "$tmp/wrong.py"
check_eval "incorrect" "$tmp/wrong.py" "r['status'] == 'incorrect' and r['reward'] == 0 and 'Correct: no (max abs diff 0.5)' in r['feedback']"
printf 'class ModelNew:\n    x = "\xff\xfe"\n' > "$tmp/latin.py"
check_eval "non-UTF-8" "$tmp/latin.py" "r['status'] == 'error' and 'not valid UTF-8 (first bad byte at offset 25)' in r['error']"
printf 'class ModelNew:\n    pass\n\0junk\n' > "$tmp/nul.py"
check_eval "NUL byte" "$tmp/nul.py" "r['status'] == 'error' and 'NUL' in r['error'] and r['reward'] == 0"
# The server's environment holds only the allowlisted names (env/server_proc.c):
# not the caller's secrets, not the Redis URL with its password.
n=$((n + 1))
KG_TEST_SECRET=hunter2 KERNELGYM_REDIS='redis://:pw@127.0.0.1:1' DK_FAKE_SERVER_LOG=$tmp/env.log \
    timeout 30 "$KG" eval --task "$tmp/task.py" --candidate "$tmp/cand.py" --device cuda > /dev/null 2>&1
envline=$(grep -m1 '^env: ' "$tmp/env.log" 2>/dev/null)
if [[ -z "$envline" || " $envline " == *" KG_TEST_SECRET "* || " $envline " == *" KERNELGYM_REDIS "* \
      || " $envline " != *" DK_FAKE_CUDA "* || " $envline " != *" PYTHONPATH "* ]]; then
    echo "FAIL: the server's environment: $envline"; fail=1
fi
KERNELGYM_SERVER=$tmp/none.py expect 1 "evaluation server died during start-up" eval --task "$tmp/task.py" --candidate "$tmp/cand.py"
unset KERNELGYM_SERVER

# serve: URL on stdout, clean stop on SIGTERM
if command -v redis-server > /dev/null; then
    n=$((n + 1))
    "$KG" serve --workers 2 --device cpu --lazy > "$tmp/url" 2> "$tmp/serve.err" &
    pid=$!
    for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.05; done
    url=$(head -1 "$tmp/url")
    sock=${url#unix://}; sock=${sock%%\?*}
    if [[ "$url" != unix://*"?password="* ]] || [ ! -S "$sock" ]; then
        echo "FAIL: serve printed '$url'"; fail=1
    else
        out=$(KERNELGYM_REDIS=$url timeout 20 "$KG" submit --kind echo --payload ping --wait 10 2>&1)
        [[ "$out" == *'"echo":"ping"'* ]] || { echo "FAIL: echo through serve: $out"; fail=1; }
        wrong=${url%%\?*}?password=wrong
        expect 1 "authentication failed" submit --redis "$wrong" --kind echo --wait 1
    fi
    kill -TERM $pid
    t0=$(date +%s.%N)
    wait $pid; rc=$?
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    [ $rc -eq 0 ] || { echo "FAIL: serve exited $rc on SIGTERM"; cat "$tmp/serve.err"; fail=1; }
    [ ! -e "$sock" ] && [ ! -d "$(dirname "$sock")" ] || { echo "FAIL: the private Redis folder survived"; fail=1; }
    grep -q "left after" "$tmp/serve.err" || { echo "FAIL: the workers did not leave"; fail=1; }
    printf "serve: stopped in %.2f s after SIGTERM\n" "$t"
fi

# check: the static layer alone (when the harness's checker is present)
if [ -f env/harness/static_checks.py ]; then
    n=$((n + 1))
    cat > "$tmp/fallback.py" <<'PYEOF'
import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.maximum(tl.load(x_ptr + i, mask=i < n), 0), mask=i < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        try:
            relu_kernel[(1,)](x, x.numel(), BLOCK=1024)
            return x
        except Exception:
            return torch.relu(x)
PYEOF
    out=$(timeout 60 "$KG" check --candidate "$tmp/fallback.py" 2>&1); rc=$?
    if [ $rc -ne 0 ] || [ "$("$PY" -c "import json,sys; r=json.loads(sys.argv[1]); print(r['hack']['detected'] and not r['ok'])" "$out" 2>&1)" != True ]; then
        echo "FAIL: check on a try/except fallback: exit $rc: $out"; fail=1
    else
        echo "check: $("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['hack']['reasons'])" "$out")"
    fi
fi
echo "cli: $n checks, $([ $fail -eq 0 ] && echo "all passed" || echo FAILED)"
exit $fail
