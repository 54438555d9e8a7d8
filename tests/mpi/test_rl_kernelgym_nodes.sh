#!/usr/bin/env bash
# KernelGym with redis = auto in a job over two nodes, on one machine:
# DK_TEST_NODES=2 puts rank r on pretend node r % 2 (dist/comm.c). RL on
# configs/tiny.ini (CPU fleet) from a briefly fine-tuned tiny model:
#   - one step at world 1 and at world 2 over 2 nodes: the world-2 run wrote
#     one metrics.jsonl and one rollouts.jsonl equal to the world-1 run's;
#     Redis listened on TCP with a password (the URL both nodes logged is
#     redis://:***@ADDR:PORT, not a unix socket); each node started its own
#     kernelgym.workers worker(s) (a log line per node, distinct pids), and
#     together they judged every answer; once the job ended no worker and
#     no Redis of it is left;
#   - a long run at world 2 over 2 nodes where rank 1 (node 1), then in
#     another run rank 0 (node 0, Redis's), is killed with SIGKILL once
#     both nodes' workers run: the job exits non-zero
#     within 20 s and, within 15 s more, the Redis, every worker of both
#     nodes and every process below them (the harness servers) are gone.
# Also: kernelgym.gpu_memory_gb for a CPU or an external fleet, and a bad
# DK_TEST_NODES, are refused with exit 2 naming the key. Exits 77 without
# redis-server or a routable address (where test_fleet_tcp skips).
set -eu
command -v redis-server >/dev/null 2>&1 || { echo "redis-server not installed: skipped"; exit 77; }
# Over several nodes Redis listens on a routable address (env/redis_auto.h).
"${DK_BUILD:-build}/tests/mpi_test_fleet_tcp" > /dev/null 2>&1 || [ $? != 77 ] ||
    { echo "no routable address or no redis-server here: skipped"; exit 77; }
. "$(dirname "$0")/mpirun.sh"
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-.venv/bin/python}"
dir=$(mktemp -d)
job=""
trap '[ -n "$job" ] && kill -9 "$job" 2>/dev/null; rm -rf "$dir"' EXIT

# The pids a log's "kernelgym: node" lines name: workers and the Redis.
fleet_pids() {
    sed -n 's/^kernelgym: node .*worker(s), pids \([0-9 ]*\);.*/\1/p' "$1"
    sed -n 's/.*(private, pid \([0-9]*\)).*/\1/p' "$1"
}

# The pids given and all their descendants (a worker's harness server and
# its children), while they run.
descendants() {
    local p
    for p in "$@"; do
        echo "$p"
        descendants $(pgrep -P "$p" || true)
    done
}

# 0 while pid $1 runs: a zombie has ended (in a container nobody may reap
# what was reparented to pid 1).
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Waits up to $2 s for every pid of log $1's fleet, and the pids in $3, to be gone.
fleet_gone() {
    local log=$1 bound=$2 more=${3:-} p left i
    for i in $(seq $((bound * 10))); do
        left=""
        for p in $(fleet_pids "$log") $more; do alive "$p" && left="$left $p"; done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    echo "FAIL: processes of the fleet still run $bound s after the job ended:$left"
    ps -o pid,ppid,args -p "${left# }" || true
    exit 1
}

"$train" configs/tiny-sft.ini run.dir="$dir/sft" run.steps=120 > "$dir/sft.log"
ck=$(ls -d "$dir"/sft/ckpt/step_* | tail -1)
# Refused with exit 2 and a message naming what is wrong: a GPU memory cap
# for a CPU fleet or for an external one, and a DK_TEST_NODES that is no count.
refused() {
    local want=$1 rc=0
    shift
    "$@" > "$dir/refused.log" 2>&1 || rc=$?
    [ "$rc" = 2 ] && grep -qF "$want" "$dir/refused.log" ||
        { cat "$dir/refused.log"; echo "FAIL: exit $rc, not 2 with '$want'"; exit 1; }
}
refused "[kernelgym] gpu_memory_gb = 4, but the private fleet evaluates on cpu" \
    "$train" configs/tiny.ini run.dir="$dir/r1" model.path="$ck" kernelgym.gpu_memory_gb=4
refused "[kernelgym] gpu_memory_gb = 4 caps the workers of a private fleet" \
    "$train" configs/tiny.ini run.dir="$dir/r2" model.path="$ck" kernelgym.gpu_memory_gb=4 \
    kernelgym.redis=redis://127.0.0.1:1
refused "DK_TEST_NODES = 'two'" env DK_TEST_NODES=two "$train" configs/tiny.ini run.dir="$dir/r3" model.path="$ck"
dk_train w1 1 configs/tiny.ini model.path="$ck" run.steps=1
dk_mpirun 2 -x DK_TEST_NODES=2 "$train" configs/tiny.ini run.dir="$dir/w2" model.path="$ck" run.steps=1 \
    > "$dir/w2.log" 2>&1 || { cat "$dir/w2.log"; echo "FAIL: run w2"; exit 1; }
grep "^kernelgym: \|^step " "$dir/w2.log"
fleet_gone "$dir/w2.log" 15
judged=$("$py" "$(dirname "$0")/kg_same_run.py" "$dir/w1" "$dir/w2" 4)
"$py" - "$dir/w2.log" "$judged" <<'PY'
import re, sys
judged = int(sys.argv[2])
log = open(sys.argv[1]).read()
nodes = re.findall(r"^kernelgym: node (\d) of (\d) \(rank (\d), pid \d+\): (\d+) cpu worker\(s\), pids ([\d ]+); "
                   r"Redis (\S+)", log, re.M)
assert sorted((n[0], n[1], n[2]) for n in nodes) == [("0", "2", "0"), ("1", "2", "1")], f"node lines: {nodes}"
workers = [p for n in nodes for p in n[4].split()]
assert [int(n[3]) for n in nodes] == [1, 1] and len(set(workers)) == 2, f"workers per node: {nodes}"
urls = {n[5] for n in nodes}
assert len(urls) == 1 and re.fullmatch(r"redis://:\*\*\*@[\d.]+:\d+", urls.pop()), f"Redis URLs: {nodes}"
assert not re.search(r"redis://:[0-9a-f]{16,}@", log), "the Redis password is in the log"
jobs = [int(n) for n in re.findall(r"kernelgym worker \S+: left after (\d+) job", log)]
assert len(jobs) == 2 and sum(jobs) == judged, f"workers that left: {jobs}; answers judged: {judged}"
print(f"2 nodes == world 1 over 4 rollouts; {judged} answers judged by the workers of two nodes {jobs}")
PY

# RANK (node RANK) dies with SIGKILL once both nodes' workers run: the job
# ends within 20 s, and its whole fleet within 15 s more.
kill_rank() {
    local r=$1 name="kill$1" victim tree t0 rc took i
    dk_mpirun 2 -x DK_TEST_NODES=2 "$train" configs/tiny.ini run.dir="$dir/$name" model.path="$ck" \
        run.steps=100000 ckpt.every=0 dist.timeout_s=5 > "$dir/$name.log" 2>&1 &
    job=$!
    for i in $(seq 1200); do
        [ "$(grep -c '^kernelgym: node' "$dir/$name.log")" = 2 ] && break
        kill -0 "$job" 2>/dev/null || { cat "$dir/$name.log"; echo "FAIL: $name ended before its fleet started"; exit 1; }
        sleep 0.1
    done
    victim=$(sed -n "s/^kernelgym: node $r of 2 (rank $r, pid \([0-9]*\)).*/\1/p" "$dir/$name.log")
    [ -n "$victim" ] || { cat "$dir/$name.log"; echo "FAIL: $name: node $r never started its workers"; exit 1; }
    sleep 2 # the workers take jobs
    tree=$(descendants $(fleet_pids "$dir/$name.log"))
    t0=$(date +%s.%N)
    kill -9 "$victim"
    rc=0
    wait "$job" || rc=$?
    job=""
    took=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")
    echo "rank $r killed: the job exited $rc after $took s"
    [ "$rc" != 0 ] || { cat "$dir/$name.log"; echo "FAIL: $name exited 0"; exit 1; }
    awk "BEGIN { exit !($took < 20) }" || { echo "FAIL: $name took $took s to end, the bound is 20"; exit 1; }
    fleet_gone "$dir/$name.log" 15 "$tree"
    echo "rank $r killed: the Redis, the workers and their harnesses ($(echo $tree | wc -w) processes) ended with the job"
}
kill_rank 1
kill_rank 0
