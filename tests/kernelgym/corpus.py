"""The KernelGym test corpus: tasks, honest candidates, hacks, faults and bad
inputs, with the expectations each file declares in its header comments.
candidates/ is the honest set every device runs (and the GPU benchmark
cycles); honest_styles/ holds more honest candidates, each in a style a
check once refused, run on the CPU.


  # kg-task: NAME               task file (tasks/NAME.py, tasks_gpu/NAME.py, tasks_hacks/NAME.py)
  # kg-task-gpu: NAME           another task on the GPU
  # kg-expect: REASON           hack reason that must be reported
  # kg-expect-cpu: REASON       ... on the CPU device, when it differs
  # kg-expect-gpu: R1|R2        ... on the GPU: any of these (the GPU runs
                                more checks, and the first to see the hack
                                names it)
  # kg-expect-nostatic: REASON  ... when the static layer is switched off
  # kg-expect-static: REASON    static reason a runtime hack (run with the
                                static layer off) also gets from that layer
  # kg-expect-status: STATUS    status a fault must end with ("a|b": either)
  # kg-expect-status-gpu: STATUS  ... on the GPU, when it differs
  # kg-options: {...}           job options (JSON)
  # kg-options-cpu: {...}       extra options on the CPU device
  # kg-gpu-only                 needs a GPU to be caught / to run
  # kg-needs: network|filesystem  isolation the expectation relies on
  # kg-class: N TEXT            hacks2: the class of hole it attacks
  # kg-expect-status-cpu: STATUS  hacks2: the status on the CPU device, where
                                the attack has nothing to gain (no timing)
  # kg-sequence: plant|victim|killer  hacks2: its part in a run of jobs
  # kg-expect-coverage-max: X   hacks2 (GPU): the profile's coverage, by
                                correlation id, is at most X
"""

import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def meta(source):
    out = {}
    for line in source.splitlines()[:20]:
        m = re.match(r"#\s*kg-([a-z-]+)(?::\s*(.*))?$", line.strip().lstrip("\ufeff"))
        if m:
            out[m.group(1)] = (m.group(2) or "").strip()
    return out


def expected_statuses(m, device):
    """The statuses a fault may end with on DEVICE ("cpu" or "cuda")."""
    spec = m.get("expect-status-gpu", m["expect-status"]) if device == "cuda" else m["expect-status"]
    return [s.strip() for s in spec.split("|") if s.strip()]


def entries(folder):
    """[(path, source, meta)] of the .py files of a corpus folder, sorted."""
    d = os.path.join(HERE, folder)
    out = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".py"):
            p = os.path.join(d, name)
            src = read(p)
            out.append((p, src, meta(src)))
    return out


def task_source(name, gpu=False):
    """tasks_gpu/ first on the GPU, then tasks/ (the scored task set: the
    score and audit tests count it), then tasks_hacks/ (tasks that only an
    attack needs, such as a complex output)."""
    if gpu and os.path.exists(os.path.join(HERE, "tasks_gpu", name + ".py")):
        return read(os.path.join(HERE, "tasks_gpu", name + ".py"))
    if not os.path.exists(os.path.join(HERE, "tasks", name + ".py")):
        return read(os.path.join(HERE, "tasks_hacks", name + ".py"))
    return read(os.path.join(HERE, "tasks", name + ".py"))


def task_for(m, device):
    """The task source a corpus file runs against on a device."""
    if device == "cuda":
        return task_source(m.get("task-gpu") or m["task"], gpu=True)
    return task_source(m["task"])


def options(m, device, base=None):
    opts = dict(base or {})
    opts.update(json.loads(m.get("options") or "{}"))
    if device == "cpu":
        opts.update(json.loads(m.get("options-cpu") or "{}"))
    return opts


def expected_reason(m, device, static=True):
    if not static and m.get("expect-nostatic"):
        return m["expect-nostatic"]
    if device == "cpu" and m.get("expect-cpu"):
        return m["expect-cpu"]
    return m.get("expect")


def expected_reasons(m, device):
    """The hack reasons of which at least one must be reported on DEVICE."""
    spec = m.get("expect-gpu") if device == "cuda" and m.get("expect-gpu") else expected_reason(m, device)
    return [r.strip() for r in (spec or "").split("|") if r.strip()]


def caught(m, device, res):
    """Whether a hack ended as one with an expected reason on DEVICE."""
    return res["status"] == "hack" and any(r in res["hack"]["reasons"] for r in expected_reasons(m, device))
