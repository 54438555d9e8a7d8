"""The op list (kernels/ops_list.h) forwards each op's arguments by name:
DK_OP(name, (params), (args)). The compiler checks the generated
prototypes and definitions against each other, but not that args names
the parameters in their order: two swapped ints (M and N, say) would
still compile. This test parses the list and fails on an entry whose args
are not its parameters' names in order, whose first parameter is not the
context named ctx (the dispatcher reads ctx->device), or whose name is
given twice. The checker first runs on a made-up list whose faults are
known, so a checker that finds nothing cannot pass."""

import os
import re
import sys

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIST = os.path.join(ROOT, "kernels", "ops_list.h")


def split_top(s):
    """s split at the commas outside parentheses, each part stripped."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def unparen(s):
    s = s.strip()
    if not (s.startswith("(") and s.endswith(")")):
        raise ValueError(f"not a parenthesised list: {s!r}")
    return s[1:-1]


def param_name(p):
    """The name a parameter declares: the identifier inside (*name) for a
    function pointer, else the last identifier."""
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)
    if m:
        return m.group(1)
    return re.findall(r"\w+", p)[-1]


def entries(text):
    """(line, kind, [macro arguments]) for every DK_OP / DK_OP_RET call."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = "\n".join(l for l in text.split("\n") if not l.lstrip().startswith("#"))
    out = []
    for m in re.finditer(r"\b(DK_OP_RET|DK_OP)\s*\(", text):
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), split_top(text[m.end() : i - 1])))
    return out


def check(text, where):
    problems, seen = [], {}
    for line, kind, a in entries(text):
        want = 4 if kind == "DK_OP_RET" else 3
        if len(a) != want:
            label = a[1] if kind == "DK_OP_RET" and len(a) > 1 else a[0]
            problems.append(f"{where}:{line}: {kind}({label}, ...) takes {want} arguments, got {len(a)}")
            continue
        name, params, args = a[-3], split_top(unparen(a[-2])), split_top(unparen(a[-1]))
        if name in seen:
            problems.append(f"{where}:{line}: op {name} listed again (first at line {seen[name]})")
        seen[name] = line
        names = [param_name(p) for p in params]
        if not params or not re.fullmatch(r"(const\s+)?ops_ctx\s*\*\s*ctx", params[0]):
            problems.append(f"{where}:{line}: {name}: the first parameter must be 'ops_ctx *ctx', got {params[:1]}")
        if names != args:
            problems.append(f"{where}:{line}: {name}: args {args} are not the parameter names {names}")
    return problems, len(seen)


FAULTY = """
DK_OP(good, (ops_ctx *ctx, void *y, int n), (ctx, y, n))
DK_OP(swapped, (ops_ctx *ctx, int M, int N), (ctx, N, M))
DK_OP_RET(double, short_args, (const ops_ctx *ctx, const float *x, size_t n), (ctx, x))
DK_OP(no_ctx, (void *y, int n), (y, n))
DK_OP(good, (ops_ctx *ctx), (ctx))
DK_OP(fnptr, (ops_ctx *ctx, void (*fn)(void *user), void *user), (ctx, user, fn))
DK_OP(missing_args, (ops_ctx *ctx))
"""


def main():
    problems, n = check(FAULTY, "made-up")
    want = ["swapped", "short_args", "no_ctx", "listed again", "fnptr", "missing_args"]
    missed = [w for w in want if not any(w in p for p in problems)]
    if missed or len(problems) != len(want) or n != 5:
        print("the checker is broken on the made-up list:")
        print("\n".join(problems) or "(no problems found)")
        print(f"missed: {missed}, ops seen {n} (want 5)")
        sys.exit(1)
    with open(LIST) as f:
        problems, n = check(f.read(), "kernels/ops_list.h")
    for p in problems:
        print("FAIL", p)
    print(f"kernels/ops_list.h: {n} ops, {len(problems)} problems")
    if n < 40:
        print(f"FAIL kernels/ops_list.h: only {n} ops parsed (the table has more than 40)")
        sys.exit(1)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
