#!/usr/bin/env bash
# A rank that dies or hangs mid-run ends the job, and the last complete
# checkpoint still resumes. configs/tiny-sft.ini at world 2 (ZeRO-3), a
# checkpoint every step, dist.timeout_s = 3:
#   - rank 1 killed with SIGKILL once step 3 is saved: mpirun ends the job
#     non-zero within 15 s and names rank 1; the run then resumes at world 1
#     from the newest complete checkpoint (step >= 3) and finishes, with one
#     metrics.jsonl line for each step 1..N;
#   - rank 1 stopped with SIGSTOP (a hang): rank 0's collective times out
#     after 3 s and the job exits 1 within 15 s, naming rank 1 as the one
#     that did not arrive (or, when the stop caught rank 1 after it had
#     announced itself to the collective, saying the transfer stalled); the
#     run resumes at world 2 and finishes the same way.
set -eu
. "$(dirname "$0")/mpirun.sh"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
stopped=""
trap '[ -n "$stopped" ] && kill -9 "$stopped" 2>/dev/null; rm -rf "$dir"' EXIT
BOUND=15

# The pid of rank RANK of the job training into $dir/NAME (Open MPI's
# OMPI_COMM_WORLD_RANK in its environment).
rank_pid() {
    local p
    for p in $(pgrep -f "run.dir=$dir/$1 "); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"
            return
        fi
    done
}

# NAME SIGNAL: starts a long run at world 2, sends SIGNAL to rank 1 once
# step 3 is saved, waits for the job to end; leaves its exit code in $rc,
# the seconds it took after the signal in $took and rank 1's pid in $victim.
hit() {
    local name=$1 sig=$2
    dk_mpirun 2 "${DK_BUILD:-build}/train" configs/tiny-sft.ini run.dir="$dir/$name" run.steps=100000 \
        ckpt.every=1 ckpt.keep=3 ckpt.resume=none dist.timeout_s=3 > "$dir/$name.log" 2>&1 &
    local job=$! i
    for i in $(seq 600); do
        [ -d "$dir/$name/ckpt/step_00000003" ] && break
        kill -0 "$job" 2>/dev/null || { cat "$dir/$name.log"; echo "FAIL: $name ended early"; exit 1; }
        sleep 0.1
    done
    victim=$(rank_pid "$name" 1)
    [ -n "$victim" ] || { kill -9 "$job"; echo "FAIL: $name: no rank 1 found"; exit 1; }
    local t0 t1
    t0=$(date +%s.%N)
    kill "-$sig" "$victim" || { cat "$dir/$name.log"; echo "FAIL: $name: rank 1 ($victim) was gone before SIG$sig"; exit 1; }
    rc=0
    wait "$job" || rc=$?
    t1=$(date +%s.%N)
    took=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
    echo "$name: SIG$sig to rank 1: the job exited $rc after ${took} s"
    [ "$rc" != 0 ] || { cat "$dir/$name.log"; echo "FAIL: $name exited 0"; exit 1; }
    awk "BEGIN { exit !($took < $BOUND) }" || { echo "FAIL: $name took ${took} s, the bound is $BOUND"; exit 1; }
}

# NAME NP: resumes NAME at world NP two steps past its newest checkpoint.
finish() {
    local name=$1 np=$2 last
    last=$(ls "$dir/$name/ckpt" | grep -E '^step_[0-9]+$' | sort | tail -1)
    last=$((10#${last#step_}))
    [ "$last" -ge 3 ] || { echo "FAIL: $name: newest checkpoint is step $last"; exit 1; }
    dk_train "$name" "$np" configs/tiny-sft.ini run.steps=$((last + 2)) ckpt.every=1 ckpt.keep=3 \
        ckpt.resume=auto dist.timeout_s=3
    grep -q "resumed from $dir/$name/ckpt/step_$(printf %08d "$last") (step $last)" "$dir/$name.log" ||
        { cat "$dir/$name.log"; echo "FAIL: $name did not resume from step $last"; exit 1; }
    "$py" - "$dir/$name/metrics.jsonl" $((last + 2)) <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, int(sys.argv[2]) + 1)), f"metrics.jsonl steps {steps}"
PY
    echo "$name: resumed at world $np from step $last, finished step $((last + 2))"
}

hit killed 9
grep -q "rank 1" "$dir/killed.log" || { cat "$dir/killed.log"; echo "FAIL: the message does not name rank 1"; exit 1; }
finish killed 1

hit hung STOP
stopped=$victim
grep -qE "ranks that did not arrive: (1$|none \(every rank arrived; the transfer itself stalled\))" "$dir/hung.log" ||
    { cat "$dir/hung.log"; echo "FAIL: the timeout does not name rank 1"; exit 1; }
[ "$rc" = 1 ] || { echo "FAIL: hung exited $rc, not 1"; exit 1; }
kill -9 "$stopped" 2>/dev/null || true
stopped=""
finish hung 2
