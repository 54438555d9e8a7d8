#!/bin/bash
# test_kg_queue_faults.sh: a worker survives a harness server that hangs, dies
# or talks nonsense, through the real queue (`kernelgym serve` with a private
# Redis, jobs sent with `kernelgym submit`) and the stand-in server
# tests/kernelgym_c/fake_server.py:
#   hang       -> status timeout after timeout_s + margin, server restarted
#   die        -> status crash (after two re-runs on fresh servers), then a
#                 gpu_check (GPU device), next job ok
#   die-once   -> a server that dies once mid-job is an infrastructure
#                 fault: the job runs again on a fresh server and is ok
#   garbage    -> status error (not JSON), server restarted
#   wrong-id   -> status error (result for another job)
#   stdout     -> fake JSON printed on the server's stdout is never read
#   every job line carries the contract's fields (the server checks them)
#   a server killed while idle is replaced before the next job (which is ok)
#   GPU broken -> after a crash the gpu_check fails, the worker exits 1 and
#                 serve, left without workers, exits 1 too.
# Exits 77 when redis-server is not installed.
set -u
cd "${DK_SOURCE:-$(dirname "$0")/../..}"
KG="${DK_BUILD:-build}/kernelgym"
[ -x "$KG" ] || { echo "FAIL: $KG not built"; exit 1; }
command -v redis-server > /dev/null || { echo "redis-server not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
export KERNELGYM_SERVER=tests/kernelgym_c/fake_server.py DK_FAKE_CUDA=1
export DK_FAKE_SERVER_LOG=$tmp/requests.log DK_FAKE_GPU_BROKEN=$tmp/gpu_broken
serve_pid=
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null; wait 2> /dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0

printf 'import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n' > "$tmp/task.py"
cand() { printf '# fake-action: %s\nclass ModelNew:\n    pass\n' "$1" > "$tmp/$1.py"; echo "$tmp/$1.py"; }
printf '# fake-result: {"speedup": 2.0}\nclass ModelNew:\n    pass\n' > "$tmp/good.py"

"$KG" serve --workers 1 --device cuda --margin 1 --heartbeat 2 > "$tmp/url" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.05; done
export KERNELGYM_REDIS=$(head -1 "$tmp/url")
[ -n "$KERNELGYM_REDIS" ] || { echo "FAIL: serve printed no URL"; cat "$tmp/serve.err"; exit 1; }

field() { # $1 = json file, $2 = python expression on r
    "${DK_PYTHON:-python3}" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1" 2> /dev/null
}
submit() { # $1 = label, $2 = candidate, $3 = expected status, $4.. = extra flags
    local label=$1 c=$2 want=$3
    shift 3
    local t0=$(date +%s.%N)
    "$KG" submit --task "$tmp/task.py" --candidate "$c" --wait 30 "$@" > "$tmp/$label.json" 2> "$tmp/$label.err"
    local rc=$? t=$(echo "$(date +%s.%N) - $t0" | bc)
    local got=$(field "$tmp/$label.json" "r['status']")
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
        echo "FAIL $label: rc $rc, status '$got', expected '$want'"; cat "$tmp/$label.err" "$tmp/$label.json"; fail=1
    else
        printf "%-9s -> %-9s %5.2f s  %s\n" "$label" "$got" "$t" "$(field "$tmp/$label.json" "r['error'][:70]")"
    fi
}

submit good0 "$tmp/good.py" ok
[ "$(field "$tmp/good0.json" "abs(r['reward'] - (0.7 * 2 + 0.3)) < 1e-12")" = "True" ] || { echo "FAIL: reward of a 2x candidate is not 0.7*2+0.3"; fail=1; }
submit hang "$(cand hang)" timeout --timeout 1
submit good1 "$tmp/good.py" ok
submit die "$(cand die)" crash
grep -q '"kind": *"gpu_check"' "$tmp/requests.log" || { echo "FAIL: no gpu_check after the crash"; fail=1; }
[ "$(field "$tmp/die.json" "r.get('infra_retries')")" = "2" ] || { echo "FAIL: a server that keeps dying was not retried twice"; fail=1; }
submit good2 "$tmp/good.py" ok
printf '# fake-action: die-once:%s\nclass ModelNew:\n    pass\n' "$tmp/died_once" > "$tmp/dieonce.py"
submit dieonce "$tmp/dieonce.py" ok
[ "$(field "$tmp/dieonce.json" "r.get('infra_retries')")" = "1" ] || { echo "FAIL: the job was not re-run once after the server died"; fail=1; }
submit garbage "$(cand garbage)" error
submit wrongid "$(cand wrong-id)" error
submit stdout "$(cand stdout)" ok
[ "$(field "$tmp/stdout.json" "r['speedup'] == 1.0")" = "True" ] || { echo "FAIL: the server's stdout was taken for a result"; fail=1; }
submit good3 "$tmp/good.py" ok
worker_pid=$(pgrep -P "$serve_pid" -f "kernelgym worker" | head -1)
server_pid=$(pgrep -P "$worker_pid" | head -1)
if [ -n "$server_pid" ]; then
    kill -KILL "$server_pid"
    sleep 0.2
    submit idle "$tmp/good.py" ok
    grep -q "exited while idle" "$tmp/serve.err" || { echo "FAIL: the idle death was not noticed"; fail=1; }
else
    echo "FAIL: no harness server process under worker $worker_pid"; fail=1
fi

# Now the GPU breaks: the next crash makes the worker leave with exit 1.
touch "$tmp/gpu_broken"
submit die2 "$(cand die)" crash
for _ in $(seq 100); do kill -0 $serve_pid 2> /dev/null || break; sleep 0.1; done
wait $serve_pid; serve_rc=$?
serve_pid=
grep -q "GPU needs attention" "$tmp/serve.err" || { echo "FAIL: the worker did not report the broken GPU"; fail=1; }
grep -q "exited: exit code 1" "$tmp/serve.err" || { echo "FAIL: the worker did not exit 1"; fail=1; }
[ $serve_rc -eq 1 ] || { echo "FAIL: serve exited $serve_rc with no worker left (expected 1)"; fail=1; }
echo "broken GPU: worker exit 1, serve exit $serve_rc"
[ $fail -eq 0 ] && echo "faults: all checks passed"
[ $fail -eq 0 ] || cat "$tmp/serve.err"
exit $fail
