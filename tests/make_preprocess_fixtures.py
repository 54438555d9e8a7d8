"""make_preprocess_fixtures.py: writes tests/fixtures/preprocess/input/, a
small folder of cold-start trajectories for tests/unit/test_preprocess.sh.

Every record carries, next to "messages" and "turns", an "expect" object: the
outcome the `preprocess` program must give it under each criterion (best,
final), assuming the test's --max_length sits between the longest ordinary
record and the one deliberately long record. Records cover: improvement over
turns, a regression in the last turn, hacks, unmeasured speedups, the 1.2
boundary, a record too long, and malformed lines (wrong turn count, bad JSON,
unknown role, mistyped speedup, no assistant message). notes.txt must be
ignored (not *.jsonl).

Run: .venv/bin/python tests/make_preprocess_fixtures.py
"""

import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "preprocess", "input")

TASK = "Write a Triton kernel for `y = relu(x @ W + b)` as ModelNew."
KERNEL = """```python
import torch
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
```"""


def conv(n_turns, long=False):
    msgs = [{"role": "system", "content": "You write fast Triton kernels."}, {"role": "user", "content": TASK}]
    for t in range(n_turns):
        body = f"Attempt {t + 1}:\n{KERNEL}"
        if long:
            body += "\n" + "\n".join(f"# tuning note {i}: BLOCK={64 * (i % 9 + 1)} num_warps={i % 8 + 1}" for i in range(120))
        msgs.append({"role": "assistant", "content": body})
        if t + 1 < n_turns:
            msgs.append({"role": "user", "content": f"status: ok, speedup measured on turn {t + 1}. Improve it."})
    return msgs


def rec(turns, best, final, long=False, **extra):
    r = {"messages": conv(len(turns), long), "turns": turns, "expect": {"best": best, "final": final}}
    r.update(extra)
    return json.dumps(r)


def T(correct, speedup=None, **kw):
    t = {"correct": correct, "speedup": speedup}
    t.update(kw)
    return t


def main():
    os.makedirs(OUT, exist_ok=True)
    a = [
        rec([T(False), T(True, 1.5)], "kept", "kept"),
        rec([T(True, 1.3), T(False)], "kept", "no_correct_turn"),
        rec([T(True, 2.0), T(True, 1.1)], "kept", "below_min_speedup"),
        rec([T(False), T(False)], "no_correct_turn", "no_correct_turn"),
        rec([T(True, 3.0, hack=True)], "no_correct_turn", "no_correct_turn"),
        rec([T(True, 1.19)], "below_min_speedup", "below_min_speedup"),
        rec([T(True, None)], "no_correct_turn", "no_correct_turn"),
        rec([T(True, 1.8)], "too_long", "too_long", long=True),
        rec([T(True, 1.2, status="ok", coverage=0.8)], "kept", "kept", source="extra keys are ignored"),
        "",
        json.dumps({"messages": conv(2), "turns": [T(True, 1.5)], "expect": {"best": "malformed", "final": "malformed"}}),
        '{"messages": [{"role": "user", "content": "cut off',
    ]
    b = [
        rec([T(False), T(True, 1.25), T(True, 1.6)], "kept", "kept"),
        json.dumps({"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}],
                    "turns": [T(True, 2.0)], "expect": {"best": "malformed", "final": "malformed"}}),
        json.dumps({"messages": conv(1), "turns": [{"correct": True, "speedup": "fast"}],
                    "expect": {"best": "malformed", "final": "malformed"}}),
        json.dumps({"messages": [{"role": "user", "content": TASK}], "turns": [],
                    "expect": {"best": "malformed", "final": "malformed"}}),
        rec([T(True, 1.0), T(True, 1.2)], "kept", "kept"),
    ]
    for name, lines in (("a.jsonl", a), ("b.jsonl", b)):
        with open(os.path.join(OUT, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(os.path.join(OUT, "notes.txt"), "w") as f:
        f.write("Not a trajectory file: preprocess reads *.jsonl only.\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
