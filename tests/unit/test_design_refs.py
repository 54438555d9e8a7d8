"""Design citations: code and docs explain themselves by pointing at a
numbered section of the design document ("docs/DESIGN.md §8 step 4"), so a
citation must name that file by its path in the repository and a section
(and step) that exists there. This test fails on:
  - a citation of the design file without the docs/ path (or with another
    path), or without a section number after it;
  - a section that is not a numbered "## N. Title" heading of the design
    document, or a step that is not a numbered item "K. " of that section;
  - a citation of the recipe notes file, which is not in the repository
    (its facts live in a section of the design document);
  - a "§N" inside the design document that names a missing section, or
    section headings that are not numbered 1, 2, 3, ... in order.
The checker first runs on a small made-up tree whose faults are known, so a
checker that finds nothing cannot pass; then on the repository's files (git's
tracked and untracked-but-not-ignored files, else a walk that skips build
outputs and the venv)."""

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Spelled in pieces so that this file itself holds no citation.
DOC_NAME = "DESIGN" + ".md"
DOC_PATH = "docs/" + DOC_NAME
RECIPE_NAME = "RECIPE" + ".md"
SECTION = "\u00a7"

SKIP_DIRS = {".git", ".venv", "build", "runs", "__pycache__", ".deps", ".whl"}
MAX_BYTES = 4 << 20

HEADING = re.compile(r"^## (\d+)\. \S")
STEP = re.compile(r"^(\d+)\. ")
# One cited place: a section, optionally a step or a range of steps.
REF = re.compile(SECTION + r"(\d+)(?:\s+steps?\s+(\d+)(?:\s*-\s*(\d+))?)?")
# A citation: the file name with whatever path precedes it, then the refs
# that follow it on the line ("§5, §13", "§7, §8 and §10").
CITE = re.compile(r"([\w./-]*)" + re.escape(DOC_NAME) + r"((?:\s*(?:,|and)?\s*" + REF.pattern + r")*)")


def parse_design(text):
    """(sections {number: set of step numbers}, problems)."""
    sections, problems, current = {}, [], None
    in_code = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        m = HEADING.match(line)
        if m:
            n = int(m.group(1))
            if n != len(sections) + 1:
                problems.append(f"{DOC_PATH}:{i}: section {n} follows section {len(sections)}")
            current = n
            sections[n] = set()
            continue
        m = STEP.match(line)
        if m and current is not None:
            sections[current].add(int(m.group(1)))
    if not sections:
        problems.append(f"{DOC_PATH}: no numbered '## N. Title' sections")
    return sections, problems


def check_refs(where, refs, sections):
    problems = []
    for m in REF.finditer(refs):
        n = int(m.group(1))
        if n not in sections:
            problems.append(f"{where}: cites {SECTION}{n}, which {DOC_PATH} does not have")
            continue
        if m.group(2):
            first = int(m.group(2))
            last = int(m.group(3)) if m.group(3) else first
            for k in range(first, last + 1):
                if k not in sections[n]:
                    problems.append(f"{where}: cites {SECTION}{n} step {k}; {SECTION}{n} has no numbered step {k}")
    return problems


def check_text(rel, text, sections):
    """Problems of one file's citations."""
    problems = []
    for i, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{i}"
        if RECIPE_NAME in line:
            problems.append(f"{where}: cites {RECIPE_NAME}, which is not in the repository "
                            f"(its facts are in {DOC_PATH})")
        for m in CITE.finditer(line):
            path, refs = m.group(1), m.group(2)
            if path + DOC_NAME != DOC_PATH:
                problems.append(f"{where}: cites '{path + DOC_NAME}'; the design document is {DOC_PATH}")
            if not REF.search(refs):
                problems.append(f"{where}: cites {DOC_PATH} without a section ({DOC_PATH} {SECTION}N)")
            problems += check_refs(where, refs, sections)
    return problems


def check_design_self(text, sections):
    """The document's own cross-references (§N outside citations)."""
    problems = []
    for i, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(SECTION + r"(\d+)", line):
            if int(m.group(1)) not in sections:
                problems.append(f"{DOC_PATH}:{i}: refers to {SECTION}{m.group(1)}, which does not exist")
    return problems


def list_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(files)


def read_text(path):
    """The file's text, or None for a binary or very large file."""
    if os.path.getsize(path) > MAX_BYTES:
        return None
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def check_tree(root):
    """(problems, citations checked)."""
    doc = os.path.join(root, DOC_PATH)
    if not os.path.isfile(doc):
        return [f"{DOC_PATH} is missing"], 0
    doc_text = read_text(doc)
    sections, problems = parse_design(doc_text)
    problems += check_design_self(doc_text, sections)
    n_cites = 0
    for rel in list_files(root):
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        n_cites += sum(1 for line in text.splitlines() for _ in CITE.finditer(line))
        problems += check_text(rel, text, sections)
    return problems, n_cites


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def self_test():
    """The checker against a made-up tree with known faults; returns failures."""
    S = SECTION
    failures = []
    with tempfile.TemporaryDirectory() as root:
        write(root, DOC_PATH, "# t\n\n## 1. One\n\ntext, see " + S + "2\n\n## 2. Two\n\n1. a\n2. b\n\n"
              "```\n## 9. not a heading\n```\n")
        good = [f"/* a.h: (docs/{DOC_NAME} {S}1) */",
                f"/* b.h: (docs/{DOC_NAME} {S}2 step 2) */",
                f"/* c.h: (docs/{DOC_NAME} {S}2 steps 1-2) */",
                f"# d.sh: docs/{DOC_NAME} {S}1, {S}2 and {S}2 step 1"]
        bad = {"e.h": f"/* ({DOC_NAME} {S}1) */",
               "f.h": f"/* (docs/{DOC_NAME} {S}3) */",
               "g.h": f"/* (docs/{DOC_NAME} {S}2 step 3) */",
               "h.h": f"/* (docs/{DOC_NAME} {S}2 steps 2-4) */",
               "i.py": f"# see {RECIPE_NAME}",
               "j.md": f"see docs/{DOC_NAME} for details",
               "k.c": f"/* /work/shared/{DOC_NAME} {S}1 */",
               "l.h": f"/* docs/{DOC_NAME} {S}1, {S}7 */",
               "m.py": f"# docs/{DOC_NAME} section 1"}
        for i, line in enumerate(good):
            write(root, f"good/{i}.txt", line + "\n")
        for name, line in bad.items():
            write(root, f"bad/{name}", "ok line\n" + line + "\n")
        problems, n = check_tree(root)
        if n != len(good) + len(bad) - 1:  # the recipe line cites no design section
            failures.append(f"self-test: counted {n} citations, expected {len(good) + len(bad) - 1}")
        for i in range(len(good)):
            hit = [p for p in problems if p.startswith(f"good/{i}.txt")]
            if hit:
                failures.append(f"self-test: a valid citation was flagged: {hit}")
        for name in bad:
            if not any(p.startswith(f"bad/{name}:2:") for p in problems):
                failures.append(f"self-test: the fault in bad/{name} was not found")
        # h.h's range 2-4 has two missing steps, each named.
        if sum(p.startswith("bad/h.h:2:") for p in problems) != 2:
            failures.append("self-test: bad/h.h should give one problem per missing step (2)")
        # The heading inside the code block is not a section: no §9.
        if any(p.startswith(DOC_PATH) for p in problems):
            failures.append(f"self-test: the made-up design file was flagged: {problems}")

        # Out-of-order headings and a dangling cross-reference in the document.
        write(root, DOC_PATH, "## 1. One\n\n## 3. Three\n\nsee " + S + "5\n")
        problems, _ = check_tree(root)
        if not any("section 3 follows section 1" in p for p in problems):
            failures.append("self-test: a gap in the section numbers was not found")
        if not any(f"refers to {S}5" in p for p in problems):
            failures.append("self-test: a cross-reference to a missing section was not found")
        os.remove(os.path.join(root, DOC_PATH))
        problems, _ = check_tree(root)
        if problems != [f"{DOC_PATH} is missing"]:
            failures.append(f"self-test: a missing design file gave {problems}")
    return failures


def main():
    failures = self_test()
    for f in failures:
        print("FAIL", f)
    problems, n = check_tree(ROOT)
    for p in problems:
        print("FAIL", p)
    if n == 0:
        print(f"FAIL no citation of {DOC_PATH} found in the tree (is the file list empty?)")
    if failures or problems or n == 0:
        return 1
    print(f"ok: {n} citations of {DOC_PATH} point at existing sections and steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
