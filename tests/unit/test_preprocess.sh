#!/usr/bin/env bash
# The `preprocess` program on tests/fixtures/preprocess/input/: every record
# states the outcome it must get ("expect"), per criterion. Checks, against
# token counts from Hugging Face `tokenizers` on the ChatML rendering: which
# records are written (messages unchanged, nothing else), the per-reason and
# per-file counts on stdout and in preprocess_report.json, the kept-token
# total, the length boundary (max_length equal to a kept record's length
# keeps it), --criterion final, running without a tokenizer, and the exit
# codes of bad invocations.
set -eu
pp="${DK_BUILD:-build}/preprocess"
py="${DK_PYTHON:-.venv/bin/python}"
in=tests/fixtures/preprocess/input
tok=tests/fixtures/tokenizers/bpe/tokenizer.json
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Token lengths as transformers would count them; max_length = the longest
# record that must pass the length filter, so the boundary is exercised.
max_len=$("$py" - "$in" "$tok" <<'PY'
import glob, json, sys
from tokenizers import Tokenizer
tk = Tokenizer.from_file(sys.argv[2])
lens = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r["expect"]["best"] not in ("kept", "too_long"):
            continue
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in r["messages"])
        lens.setdefault(r["expect"]["best"], []).append(len(tk.encode(text, add_special_tokens=False).ids))
assert max(lens["kept"]) < min(lens["too_long"]), lens
print(max(lens["kept"]))
PY
)

check() { # criterion, output dir, length checked (1/0), stdout file
  "$py" - "$in" "$tok" "$1" "$2" "$3" "$4" "$max_len" <<'PY'
import glob, json, os, sys
from tokenizers import Tokenizer
src, tokpath, crit, out, checked, log, max_len = sys.argv[1:8]
checked, max_len = checked == "1", int(max_len)
tk = Tokenizer.from_file(tokpath)
outcomes = ["kept", "malformed", "no_correct_turn", "below_min_speedup", "too_long"]
total = dict.fromkeys(outcomes, 0)
kept_tokens = 0
rep = json.load(open(f"{out}/preprocess_report.json"))
for path in sorted(glob.glob(src + "/*.jsonl")):
    name = os.path.basename(path)
    counts = dict.fromkeys(outcomes, 0)
    want_kept = []
    for line in open(path):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            want = r["expect"][crit]
        except ValueError:
            want = "malformed"
        if want == "too_long" and not checked:
            want = "kept"
        counts[want] += 1
        if want == "kept":
            want_kept.append({"messages": r["messages"]})
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in r["messages"])
            n = len(tk.encode(text, add_special_tokens=False).ids)
            assert not checked or n <= max_len
            kept_tokens += n if checked else 0
    got = [json.loads(l) for l in open(f"{out}/{name}")]
    assert got == want_kept, f"{crit}: {name}: wrote {len(got)} records, expected {len(want_kept)}"
    fr = rep["files"][name]
    for k in outcomes:
        assert fr[k] == counts[k], f"{crit}: {name}: {k} = {fr[k]}, expected {counts[k]}"
        total[k] += counts[k]
assert sorted(rep["files"]) == ["a.jsonl", "b.jsonl"], "notes.txt or another file was read"
assert not os.path.exists(f"{out}/notes.txt")
for k in outcomes:
    assert rep["total"][k] == total[k], f"{crit}: total {k} = {rep['total'][k]}, expected {total[k]}"
assert rep["kept_tokens"] == kept_tokens, (rep["kept_tokens"], kept_tokens)
assert rep["length_checked"] == checked and rep["criterion"] == crit
ex = rep["files"]["a.jsonl"]["malformed_examples"] + rep["files"]["b.jsonl"]["malformed_examples"]
assert any("a.jsonl:11:" in e and "1 entries for 2 assistant" in e for e in ex), ex
assert any("a.jsonl:12:" in e and "not a JSON object" in e for e in ex), ex
assert any("b.jsonl:2:" in e and "bot" in e for e in ex) and any("b.jsonl:3:" in e and "speedup" in e for e in ex), ex
text = open(log).read()
for k in outcomes[1:]:
    assert f"dropped {k}" in text, text
print(f"preprocess --criterion {crit}{'' if checked else ' (no tokenizer)'}: kept {total['kept']}, "
      + ", ".join(f"{k} {total[k]}" for k in outcomes[1:]) + f"; kept tokens {kept_tokens} (max_length {max_len})")
PY
}

"$pp" --input_dir "$in" --output_dir "$dir/best" --tokenizer "$tok" --max_length "$max_len" > "$dir/best.log"
check best "$dir/best" 1 "$dir/best.log"
"$pp" --input_dir "$in" --output_dir "$dir/final" --tokenizer "$tok" --max_length "$max_len" \
      --criterion final --min_speedup 1.2 > "$dir/final.log"
check final "$dir/final" 1 "$dir/final.log"
"$pp" --input_dir "$in" --output_dir "$dir/notok" > "$dir/notok.log"
check best "$dir/notok" 0 "$dir/notok.log"
grep -q "not checked: no --tokenizer" "$dir/notok.log"
# One token less and the longest kept record becomes too long.
"$pp" --input_dir "$in" --output_dir "$dir/short" --tokenizer "$tok" --max_length $((max_len - 1)) > "$dir/short.log"
"$py" -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['total']['too_long'] >= 2, r['total']" \
      "$dir/short/preprocess_report.json"

expect_rc() { # rc, message fragment, args...
  local want=$1 frag=$2 rc=0
  shift 2
  "$pp" "$@" > "$dir/err.out" 2> "$dir/err.txt" || rc=$?
  if [ "$rc" != "$want" ] || ! grep -q -- "$frag" "$dir/err.txt"; then
    echo "FAIL: preprocess $* -> rc $rc (want $want), stderr:"; cat "$dir/err.txt"; exit 1
  fi
}
expect_rc 2 "are required" --input_dir "$in"
expect_rc 2 "min_speedup 'fast'" --input_dir "$in" --output_dir "$dir/x" --min_speedup fast
expect_rc 2 "max_length '0'" --input_dir "$in" --output_dir "$dir/x" --max_length 0
expect_rc 2 "unknown criterion 'last'" --input_dir "$in" --output_dir "$dir/x" --criterion last
expect_rc 2 "unknown option '--speedup'" --input_dir "$in" --output_dir "$dir/x" --speedup 2
expect_rc 2 "is the input folder" --input_dir "$in" --output_dir "$in/."
expect_rc 1 "no such input folder" --input_dir "$dir/nothing" --output_dir "$dir/x"
expect_rc 1 "no \*.jsonl files" --input_dir "$dir" --output_dir "$dir/x"
expect_rc 1 "no trajectory was kept" --input_dir "$in" --output_dir "$dir/x" --min_speedup 100
expect_rc 1 "$dir/none.json" --input_dir "$in" --output_dir "$dir/x" --tokenizer "$dir/none.json"
echo "preprocess: bad invocations exit with 2 (usage) or 1 (runtime) and name the problem"
