#!/usr/bin/env bash
# `kernelgym serve` supervises its private fleet (2 CPU workers):
#   - its redis-server killed with -9 while 8 clients wait on 1 s jobs: the
#     log names the true cause (killed by signal 9, with the end of Redis's
#     log), Redis is restarted on the same socket with its AOF replayed, and
#     all 8 clients get status ok;
#   - a worker killed with -9 is restarted (the log says how it died), and
#     the fleet again has 2 workers that take jobs;
#   - nothing in the log blames authentication.
# Exits 77 without redis-server.
set -u
KG="${DK_BUILD:-build}/kernelgym"
command -v redis-server > /dev/null || { echo "redis-server not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
serve_pid=
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null; wait 2> /dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/serve.err"; exit 1; }

"$KG" serve --workers 2 --device cpu --heartbeat 2 --lazy > "$tmp/url" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.05; done
export KERNELGYM_REDIS=$(head -1 "$tmp/url")
[ -n "$KERNELGYM_REDIS" ] || fail "serve printed no URL"
batch() { # $1 = label: 8 clients, 1 s jobs, all must be ok
  local pids=() bad=0
  for i in $(seq 8); do
    "$KG" submit --kind sleep --sleep 1 --wait 120 > "$tmp/$1.$i.json" 2> "$tmp/$1.$i.err" &
    pids+=($!)
  done
  [ -n "${2:-}" ] && { sleep 0.7; eval "$2"; }
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  local ok=$(grep -l '"status": *"ok"' "$tmp/$1".*.json | wc -l)
  [ "$bad" = 0 ] && [ "$ok" = 8 ] || { cat "$tmp/$1".*.err; fail "$1: $ok of 8 ok, $bad clients failed"; }
  echo "$1: 8 of 8 ok"
}
batch warm
redis_pid=$(pgrep -P "$serve_pid" -x redis-server)
[ -n "$redis_pid" ] || fail "no redis-server under serve"
batch redis-killed "kill -9 $redis_pid"
grep -q "private redis-server exited: killed by signal 9" "$tmp/serve.err" || fail "the Redis death is not logged with its cause"
grep -q "private redis-server restarted" "$tmp/serve.err" || fail "Redis was not restarted"
new_redis=$(pgrep -P "$serve_pid" -x redis-server)
[ -n "$new_redis" ] && [ "$new_redis" != "$redis_pid" ] || fail "no new redis-server under serve"

w=$(pgrep -P "$serve_pid" -f "kernelgym worker" | head -1)
kill -9 "$w"
for _ in $(seq 100); do grep -q "worker cpu[01] restarted" "$tmp/serve.err" && break; sleep 0.1; done
grep -q "(pid $w) exited after [0-9]* s: killed by signal 9.*; restarting" "$tmp/serve.err" || fail "the worker death is not logged"
grep -q "worker cpu[01] restarted" "$tmp/serve.err" || fail "the killed worker was not restarted"
[ "$(pgrep -P "$serve_pid" -f "kernelgym worker" | wc -l)" = 2 ] || fail "the fleet does not have 2 workers again"
batch after-restarts
! grep -qi "authentication" "$tmp/serve.err" || fail "the log blames authentication"
kill -0 "$serve_pid" || fail "serve died"
echo "fleet: Redis and a worker killed -9, both restarted, 24 of 24 jobs ok"
