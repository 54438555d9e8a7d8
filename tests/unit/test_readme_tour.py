"""README's tour: every top-level folder of the repository (git's tracked
and untracked-but-not-ignored files; hidden folders aside) has its row in
the "## Tour" table, written as | `name/` | ..., and every row names a
folder that exists, so a reader who follows the tour finds the whole tree
and nothing that is gone. The generation engine is a third of model/ and
must be named in the tour by its files. The checker first runs on made-up
READMEs whose faults are known, so a checker that finds nothing cannot
pass."""

import os
import re
import subprocess
import sys

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROW = re.compile(r"^\|\s*`([^`/]+)/`")
# Files of model/ that the tour must name: the generation engine.
ENGINE_FILES = ("generate.c", "gen_forward.c", "gen_graph.c", "kv_cache.c")


def tour_section(readme):
    """The text between '## Tour' and the next '## ' heading, or None."""
    m = re.search(r"^## Tour\s*$(.*?)(?=^## |\Z)", readme, re.M | re.S)
    return m.group(1) if m else None


def check(readme, folders, engine_files):
    """Problems of a README against the set of top-level folders."""
    tour = tour_section(readme)
    if tour is None:
        return ["README.md has no '## Tour' section"]
    rows = {m.group(1) for line in tour.splitlines() for m in [ROW.match(line)] if m}
    problems = [f"README.md tour: no row for the folder {f}/" for f in sorted(folders - rows)]
    problems += [f"README.md tour: a row for {r}/, which is not a folder of the repository"
                 for r in sorted(rows - folders)]
    problems += [f"README.md tour: the generation engine's {f} is not named" for f in engine_files
                 if f not in tour]
    return problems


def top_folders(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f and os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if files:
        return {f.split("/")[0] for f in files if "/" in f and not f.startswith(".")}
    skip = {"build", "runs", "__pycache__"}
    return {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
            and d not in skip and not d.startswith("build")}


def self_test():
    failures = []
    good = ("# x\n\n## Tour\n\n| folder | what |\n| --- | --- |\n| `a/` | A |\n| `b/` | B: generate.c |\n\n"
            "## Next\n\n| `c/` | not in the tour |\n")
    if check(good, {"a", "b"}, ("generate.c",)):
        failures.append("self-test: a complete tour was flagged: " + repr(check(good, {"a", "b"}, ("generate.c",))))
    p = check(good, {"a", "b", "c"}, ())
    if p != ["README.md tour: no row for the folder c/"]:
        failures.append(f"self-test: a folder without a row (c/, whose row sits outside the tour) gave {p}")
    p = check(good, {"a"}, ())
    if p != ["README.md tour: a row for b/, which is not a folder of the repository"]:
        failures.append(f"self-test: a row for a missing folder gave {p}")
    p = check(good, {"a", "b"}, ("generate.c", "kv_cache.c"))
    if p != ["README.md tour: the generation engine's kv_cache.c is not named"]:
        failures.append(f"self-test: an unnamed engine file gave {p}")
    if check("# x\n\n## Other\n", {"a"}, ()) != ["README.md has no '## Tour' section"]:
        failures.append("self-test: a README without a tour was not flagged")
    return failures


def main():
    failures = self_test()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    folders = top_folders(ROOT)
    problems = check(readme, folders, ENGINE_FILES) if folders else ["no top-level folder found"]
    for p in failures + problems:
        print("FAIL", p)
    if failures or problems:
        return 1
    print(f"ok: the tour has a row for each of {len(folders)} folders and names the generation engine's files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
