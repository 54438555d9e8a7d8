#!/usr/bin/env bash
# Clients ride out Redis restarts. 50 `kernelgym submit` clients each queue a
# 0.3 s job on a Redis without persistence served by 2 workers. Mid-batch the
# Redis is killed (-9), stays away 2 s and comes back empty, so every queued
# job, result and notification is gone; then the same again with a graceful
# shutdown. Every client must reconnect, queue its lost job again, and exit 0
# with status ok: 0 lost out of 50, twice. Exits 77 without redis-server.
set -u
KG="${DK_BUILD:-build}/kernelgym"
command -v redis-server > /dev/null || { echo "redis-server not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
redis_pid= workers=()
cleanup() {
  for p in ${workers[@]+"${workers[@]}"} $redis_pid; do kill -9 "$p" 2> /dev/null; done
  wait 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
pw=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
start_redis() {
  redis-server --port 0 --unixsocket "$tmp/r.sock" --unixsocketperm 700 --requirepass "$pw" --save "" \
    --appendonly no --dir "$tmp" > "$tmp/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do [ -S "$tmp/r.sock" ] && break; sleep 0.05; done
}
export KERNELGYM_REDIS="unix://$tmp/r.sock?password=$pw"
start_redis
for w in 0 1; do
  "$KG" worker --name "w$w" --heartbeat 2 > /dev/null 2> "$tmp/worker$w.err" &
  workers+=($!)
done

round() { # $1 = label, $2 = signal that stops Redis
  local label=$1 sig=$2 pids=()
  rm -f "$tmp"/c*.json "$tmp"/c*.err
  for i in $(seq 50); do
    "$KG" submit --kind sleep --sleep 0.3 --wait 120 > "$tmp/c$i.json" 2> "$tmp/c$i.err" &
    pids+=($!)
  done
  sleep 1.5
  kill "-$sig" "$redis_pid"
  wait "$redis_pid" 2> /dev/null
  rm -f "$tmp/r.sock"
  sleep 2
  start_redis
  local bad=0
  for i in $(seq 50); do
    wait "${pids[$((i - 1))]}" || { bad=$((bad + 1)); [ $bad = 1 ] && cat "$tmp/c$i.err"; }
  done
  local ok=$(grep -l '"status": *"ok"' "$tmp"/c*.json | wc -l)
  local again=$(cat "$tmp"/c*.err | grep -o "had lost [0-9]* job" | awk '{s += $3} END {print s + 0}')
  echo "$label: $ok of 50 ok, $bad clients failed, $again job(s) queued again after the restart"
  [ "$bad" = 0 ] && [ "$ok" = 50 ] || fail "$label: jobs lost"
  [ "$again" -gt 0 ] || fail "$label: the restart lost no job, so nothing was tested"
}
round "kill -9" KILL
round "shutdown" TERM
for p in "${workers[@]}"; do kill -0 "$p" 2> /dev/null || fail "a worker did not survive the restarts"; done
echo "0 lost out of 100 across two Redis restarts"
