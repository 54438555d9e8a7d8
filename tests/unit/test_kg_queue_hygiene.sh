#!/usr/bin/env bash
# What a queue must not keep or allow:
#   - a job id longer than KG_ID_LEN - 1 (95) that reached the queue past
#     kg_queue_push's check is dropped whole by the worker that takes it (it
#     was cut, then stayed in a processing list and moved between workers);
#   - the results of a client that died before collecting them are deleted
#     by the next waiting client once the dead one's alive mark is gone
#     (they stayed for the result TTL, a day);
#   - a non-loopback redis:// URL without a password is refused (exit 2)
#     unless --insecure, which warns.
# Exits 77 without redis-server.
set -u
KG="${DK_BUILD:-build}/kernelgym"
command -v redis-server > /dev/null && command -v redis-cli > /dev/null || { echo "redis not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
serve_pid=
cleanup() { [ -n "$serve_pid" ] && kill "$serve_pid" 2> /dev/null; wait 2> /dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/serve.err"; exit 1; }

"$KG" submit --redis redis://10.0.0.9:6379 --kind echo --payload x > /dev/null 2> "$tmp/insecure.err"
rc=$?
[ "$rc" = 2 ] && grep -q "no password on a non-loopback address.*--insecure" "$tmp/insecure.err" ||
  fail "passwordless remote URL: exit $rc: $(cat "$tmp/insecure.err")"
"$KG" submit --redis redis://127.0.0.1:1 --kind echo --payload x > /dev/null 2> "$tmp/loop.err"
grep -q "no password" "$tmp/loop.err" && fail "loopback refused"
"$KG" submit --redis redis://10.0.0.9:1 --insecure --kind echo --payload x --wait 0.1 > /dev/null 2> "$tmp/ins.err"
grep -q "warning: redis://10.0.0.9:1 is used without a password" "$tmp/ins.err" || fail "--insecure gave no warning"
echo "insecure: refused without --insecure, a warning with it"

"$KG" serve --workers 1 --device cpu --lazy --heartbeat 2 > "$tmp/url" 2> "$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.05; done
export KERNELGYM_REDIS=$(head -1 "$tmp/url")
sock=$(echo "$KERNELGYM_REDIS" | sed -E 's|unix://([^?]*)\?password=(.*)|\1|')
pw=$(echo "$KERNELGYM_REDIS" | sed -E 's|unix://([^?]*)\?password=(.*)|\2|')
rc() { REDISCLI_AUTH="$pw" redis-cli -s "$sock" "$@"; }

long=$(printf 'x%.0s' $(seq 150))
rc SET "kg:job:$long" '{"kind":"echo","id":"x","payload":"p"}' > /dev/null
rc LPUSH kg:queue "$long" > /dev/null
for _ in $(seq 100); do grep -q "dropping job id" "$tmp/serve.err" && break; sleep 0.1; done
grep -q "dropping job id 'xxxx" "$tmp/serve.err" || fail "the over-long id was not dropped"
sleep 0.5
left=$(rc --scan --pattern 'kg:processing:*' | while read -r k; do rc LLEN "$k"; done | awk '{s += $1} END {print s + 0}')
[ "$left" = 0 ] || fail "$left id(s) left in processing lists"
[ "$(rc EXISTS "kg:job:$long")" = 0 ] || fail "the over-long job is still stored"
[ "$(rc LLEN kg:queue)" = 0 ] || fail "the queue is not empty"
"$KG" submit --kind echo --payload after --wait 30 > "$tmp/after.json" || fail "the worker did not go on"
echo "queue ids: a 150-character id dropped whole, the worker went on"

# A client killed while its job runs: the result arrives with nobody to take it.
"$KG" submit --kind sleep --sleep 1 --wait 60 > /dev/null 2>&1 &
victim=$!
sleep 0.4
kill -9 "$victim"; wait "$victim" 2> /dev/null
for _ in $(seq 100); do [ "$(rc --scan --pattern 'kg:result:*' | wc -l)" -gt 0 ] && break; sleep 0.1; done
[ "$(rc --scan --pattern 'kg:result:*' | wc -l)" = 1 ] || fail "the dead client's result was never stored"
# Its alive mark lapses (600 s in real life; deleted here).
for k in $(rc --scan --pattern 'kg:client:*'); do rc DEL "$k" > /dev/null; done
"$KG" submit --kind echo --payload sweep --wait 30 > /dev/null || fail "the sweeping client failed"
n=$(rc --scan --pattern 'kg:result:*' | wc -l)
[ "$n" = 0 ] || fail "$n orphaned result(s) still in Redis"
[ "$(rc --scan --pattern 'kg:done:*' | wc -l)" = 0 ] || fail "orphaned done lists still in Redis"
echo "orphans: the dead client's result and done list swept"
