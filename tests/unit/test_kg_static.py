"""KernelGym static checks (env/harness/static_checks.py): every static hack of
the corpus is caught with its reason, no honest candidate is flagged, the
hacks meant for the runtime layer pass the static layer (so the runtime
checks are what catches them), hand-written edge cases resolve names through
imports correctly, and the command line prints one JSON object."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.environ.get("DK_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "kernelgym"))

import corpus  # noqa: E402
from env.harness import static_checks  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
KERNEL = ("@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n"
          "    offs = tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, 0.0, mask=offs < n)\n")


def model(forward_body, extra="", init_body="        super().__init__()\n"):
    return (HEADER + extra + KERNEL + "class ModelNew(nn.Module):\n    def __init__(self):\n" + init_body +
            "    def forward(self, x):\n" + forward_body)


LAUNCH = "        k[(1,)](x, x.numel(), BLOCK=16)\n        return x\n"

# (name, source, reasons that must appear, reasons that must not appear)
CASES = [
    ("plain launch", model(LAUNCH), [], None),
    ("launch in a helper called from forward",
     model("        return helper(x)\n", extra="def helper(x):\n    k[(1,)](x, x.numel(), BLOCK=16)\n    return x\n"),
     [], None),
    ("launch through a kernel passed as an argument",
     model("        return run(k, x)\n", extra="def run(kern, x):\n    kern[(1,)](x, x.numel(), BLOCK=16)\n    return x\n"),
     [], None),
    ("launch only in __init__", model("        return x * 2\n",
                                      init_body="        super().__init__()\n        k[(1,)](torch.zeros(4), 4, BLOCK=16)\n"),
     ["static:kernel_not_launched"], None),
    ("from os import environ", model(LAUNCH, extra="from os import environ\n"), ["static:env_access"], None),
    ("getattr with a constant resolves", model("        f = getattr(torch, 'compile')\n" + LAUNCH),
     ["static:torch_compile"], None),
    ("from torch.cuda import Stream", model("        s = Stream()\n" + LAUNCH, extra="from torch.cuda import Stream\n"),
     ["static:streams"], None),
    ("training passed as a keyword is fine",
     model("        x = torch.nn.functional.dropout(x, 0.0, training=self.training)\n" + LAUNCH), [],
     ["static:training_branch"]),
    ("training in a condition", model("        y = 1 if self.training else 2\n" + LAUNCH),
     ["static:training_branch"], None),
    ("train() overridden", model(LAUNCH) + "    def train(self, mode=True):\n        return self\n",
     ["static:training_branch"], None),
    ("module-level import-only try is fine",
     "try:\n    import math\nexcept ImportError:\n    math = None\n" + model(LAUNCH), [],
     ["static:try_except_fallback"]),
    ("setattr on a torch module", model("        setattr(torch.nn.functional, 'relu', None)\n" + LAUNCH),
     ["static:monkeypatch"], None),
    ("setattr on self is fine", model("        setattr(self, 'y', 1)\n" + LAUNCH), [], ["static:monkeypatch"]),
    ("torch.backends precision switch (its own torch calls only; judged by the outputs)",
     model("        torch.backends.cuda.matmul.allow_tf32 = True\n" + LAUNCH), [], ["static:monkeypatch"]),
    ("computed getattr on torch", model("        s = getattr(torch.cuda, 'Str' + 'eam')\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("exec", model("        exec('y = 1')\n" + LAUNCH), ["static:dynamic_code"], None),
    ("raise SystemExit", model("        raise SystemExit(0)\n"), ["static:exit_call"], None),
    ("os.system", model("        import os\n        os.system('true')\n" + LAUNCH), ["static:subprocess"], None),
    ("ctypes", model(LAUNCH, extra="import ctypes\n"), ["static:ctypes"], None),
    ("numpy file load", model("        import numpy as np\n        a = np.load('x.npy')\n" + LAUNCH),
     ["static:file_access"], None),
    ("unknown import", model(LAUNCH, extra="import requests_toolbelt\n"), ["static:disallowed_import"], None),
    ("torch.cuda.graphs", model("        g = torch.cuda.CUDAGraph()\n" + LAUNCH), ["static:cuda_graph"], None),
    # what the static layer reads must be what Python runs
    ("a coding declaration other than UTF-8", "# -*- coding: unicode_escape -*-\n" + model(LAUNCH),
     ["static:source_encoding"], None),
    ("a coding declaration on line 2", "#!/usr/bin/env python\n# vim: set fileencoding=utf-7 :\n" + model(LAUNCH),
     ["static:source_encoding"], None),
    ("a byte-order mark", "\ufeff" + model(LAUNCH), ["static:source_encoding"], None),
    ("a UTF-8 coding declaration is fine", "# -*- coding: utf-8 -*-\n" + model(LAUNCH), [], None),
    ("a coding declaration after line 2 is a comment", model(LAUNCH) + "# coding: latin-1\n", [], None),
    # modules, frames and the import system reached dynamically
    ("os.sys.modules", model("        m = os.sys.modules\n" + LAUNCH, extra="import os\n"), ["static:monkeypatch"], None),
    ("torch.os.environ", model("        e = torch.os.environ\n" + LAUNCH), ["static:env_access"], None),
    ("a module reached through torch", model("        m = torch.sys\n" + LAUNCH), ["static:dynamic_attribute"], None),
    ("getattr with a computed name on self", model("        t = getattr(self, 'train' + 'ing')\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("getattr with a dunder", model("        g = getattr(x, '__class__')\n" + LAUNCH), ["static:dynamic_attribute"], None),
    ("a class's dict", model("        d = x.__class__.__dict__\n" + LAUNCH), ["static:dynamic_attribute"], None),
    ("getattr with a plain literal is fine", model("        w = getattr(self, 'weight', None)\n" + LAUNCH), [], None),
    ("vars() of an object", model("        d = vars(self)\n" + LAUNCH), ["static:dynamic_attribute"], None),
    ("os.memfd_create", model("        fd = os.memfd_create('m')\n" + LAUNCH, extra="import os\n"),
     ["static:file_access"], None),
    ("from os import posix_fallocate", model(LAUNCH, extra="from os import posix_fallocate\n"),
     ["static:file_access"], None),
    ("os.path and os.cpu_count are fine", model("        n = os.cpu_count()\n        p = os.path.join('a', 'b')\n" + LAUNCH,
                                                extra="import os\n"), [], ["static:file_access"]),
    # attribute names given as strings, by any path
    ("operator.attrgetter to a closure", model("        c = operator.attrgetter('run.__closure__')(k)\n" + LAUNCH,
                                               extra="import operator\n"), ["static:frame_inspection"], None),
    ("operator.attrgetter with a computed name", model("        v = operator.attrgetter('we' + 'ight')(self)\n" + LAUNCH,
                                                       extra="import operator\n"), ["static:dynamic_attribute"], None),
    ("operator.methodcaller with a plain literal is fine",
     model("        y = operator.methodcaller('contiguous')(x)\n" + LAUNCH, extra="import operator\n"), [],
     ["static:dynamic_attribute"]),
    ("an introspection name in a table", model("        n = ['__globals__']\n" + LAUNCH), ["static:frame_inspection"],
     None),
    ("a cell's contents", model("        v = c.cell_contents\n" + LAUNCH), ["static:frame_inspection"], None),
    ("a dunder named in free text is fine", model("        s = 'reads no __closure__ of anything'\n" + LAUNCH), [],
     ["static:frame_inspection"]),
    # what torch computes on the compared output
    ("__torch_function__", model(LAUNCH, extra="class T:\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n        return 0\n"),
     ["static:torch_override"], None),
    ("a Tensor subclass", model(LAUNCH, extra="class T(torch.Tensor):\n    pass\n"), ["static:torch_override"], None),
    ("torch.library", model(LAUNCH, extra="lib = torch.library.Library('aten', 'IMPL')\n"),
     ["static:torch_override"], None),
    ("torch.ops", model("        y = torch.ops.aten.relu(x)\n" + LAUNCH), ["static:torch_override"], None),
    ("from torch import library", model(LAUNCH, extra="from torch import library\n"), ["static:torch_override"], None),
    ("nn.Module.compile", model(LAUNCH, init_body="        super().__init__()\n        self.compile()\n"),
     ["static:torch_compile"], None),
    ("torch.compiler", model("        torch.compiler.reset()\n" + LAUNCH), ["static:torch_compile"], None),
    ("local alias is beyond the static layer", model("        m = torch.cuda\n        s = m.Stream()\n" + LAUNCH),
     [], ["static:streams"]),
    # reaching the machinery through a local alias or a renamed builtin
    ("getattr renamed", model("        g = getattr\n        f = g(x, 'f_' + 'back')\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("sys through a local alias of torch", model("        t = torch\n        f = t.sys\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("numpy.ctypeslib", model("        c = np.ctypeslib\n" + LAUNCH, extra="import numpy as np\n"),
     ["static:ctypes"], None),
    ("numpy.fromregex reads files", model("        a = np.fromregex('/etc/passwd', 'x', [])\n" + LAUNCH,
                                          extra="import numpy as np\n"), ["static:file_access"], None),
    ("a local named like a builtin in one function, the builtin in another",
     model("        vars = x.var(-1)\n" + LAUNCH, extra="def peek(o):\n    return vars(o)\n"),
     ["static:frame_inspection"], None),
    ("getattr over a literal tuple holding a dunder",
     model("        for n in ('weight', '__class__'):\n            a = getattr(self, n)\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("getattr over a loop variable bound again", model(
        "        for n in ('weight', 'bias'):\n            n = n + '_'\n            a = getattr(self, n)\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("__class__ for more than its name", model("        b = self.__class__.__bases__\n" + LAUNCH),
     ["static:dynamic_attribute"], None),
    ("a torch.backends name outside the switches", model(LAUNCH, extra="torch.backends.cudnn.enabled = False\n"),
     ["static:monkeypatch"], None),
    # a builtin read where a function is defined, not inside it
    ("a builtin as a parameter's default", model("        return probe('y = 1')\n",
                                                 extra="def probe(src, exec=exec):\n    exec(src)\n"),
     ["static:dynamic_code"], None),
    ("a builtin as a lambda's default", model("        f = lambda s, eval=eval: eval(s)\n" + LAUNCH),
     ["static:dynamic_code"], None),
    ("a builtin in an annotation", model(LAUNCH, extra="def g(exec) -> exec('y = 1'):\n    pass\n"),
     ["static:dynamic_code"], None),
    ("a builtin rebound to itself at module level", model(LAUNCH, extra="exec = exec\nexec('y = 1')\n"),
     ["static:dynamic_code"], None),
    ("self.training turned into a value by torch", model("        t = torch.tensor(self.training)\n" + LAUNCH),
     ["static:training_branch"], None),
    # what honest code writes (each once flagged)
    ("a local named vars is a variance", model("        vars = x.var(-1)\n" + LAUNCH), [], None),
    ("self.training passed on to torch positionally",
     model("        x = torch.nn.functional.dropout(x, 0.0, self.training)\n" + LAUNCH), [], None),
    ("a chain of import-only fallbacks", model(LAUNCH, extra=(
        "try:\n    from triton.language.extra.cuda import libdevice\nexcept ImportError:\n"
        "    try:\n        from triton.language.extra import libdevice\n    except ImportError:\n"
        "        libdevice = None\n")), [], None),
    ("getattr over a literal tuple of names", model(
        "        for n in ('weight', 'bias'):\n            a = getattr(self, n, None)\n" + LAUNCH), [], None),
    ("__class__.__name__ in a repr", model(LAUNCH + "    def __repr__(self):\n        return self.__class__.__name__\n"),
     [], None),
    ("TF32 switched off", model(LAUNCH, extra="torch.backends.cuda.matmul.allow_tf32 = False\n"
                                             "torch.backends.cudnn.allow_tf32 = False\n"), [], None),
]


def main():
    n_static = n_honest = n_runtime = 0
    for path, src, m in corpus.entries("hacks"):
        name = os.path.basename(path)
        res = static_checks.check_source(src)
        reason = m.get("expect", "")
        if reason.startswith("static:"):
            n_static += 1
            check(reason in res["hack"]["reasons"], f"{name}: expected {reason}, got {res['hack']['reasons']}")
        elif m.get("expect-static"):
            # a runtime hack the static layer now also stops (its runtime
            # expectation is checked with the static layer off)
            n_static += 1
            check(m["expect-static"] in res["hack"]["reasons"],
                  f"{name}: expected {m['expect-static']} from the static layer, got {res['hack']['reasons']}")
        else:
            n_runtime += 1
            check(res["ok"], f"{name}: meant for the runtime layer but the static layer flagged {res['hack']['reasons']}")
    for path, src, m in corpus.entries("candidates") + corpus.entries("honest_styles"):
        n_honest += 1
        res = static_checks.check_source(src)
        check(res["ok"] and res["kernels"], f"{os.path.basename(path)}: honest candidate flagged: {res['details']}")
    for name, src, must, must_not in CASES:
        res = static_checks.check_source(src)
        got = res["hack"]["reasons"]
        for r in must:
            check(r in got, f"case '{name}': expected {r}, got {got}")
        if not must:
            check(not (set(got) & set(must_not or got)) if must_not else res["ok"],
                  f"case '{name}': expected clean, got {got} {res['details']}")
        for r in must_not or []:
            check(r not in got, f"case '{name}': {r} must not be reported, got {got}")
    # syntax errors are reported, not raised
    res = static_checks.check_source("class ModelNew(:\n")
    check(res["syntax_error"] and not res["ok"], f"syntax error not reported: {res}")
    res = static_checks.check_source("x = (" * 300 + ")" * 300)
    check(res["syntax_error"] or res["ok"] is False, "deep nesting must not raise")

    # the command line: one JSON object on stdout, exit code 0
    py = os.environ.get("DK_PYTHON") or sys.executable
    hack = os.path.join(corpus.HERE, "hacks", "hack_try_except_fallback.py")
    p = subprocess.run([py, "-m", "env.harness.static_checks", hack], cwd=ROOT, capture_output=True, text=True)
    check(p.returncode == 0, f"CLI exit code {p.returncode}: {p.stderr}")
    out = json.loads(p.stdout)
    check(out["hack"]["detected"] and "static:try_except_fallback" in out["hack"]["reasons"] and out["ok"] is False,
          f"CLI output {out}")
    with tempfile.NamedTemporaryFile(suffix=".py", delete=False) as f:
        f.write(b"\xff\xfe not utf-8")
    p = subprocess.run([py, "-m", "env.harness.static_checks", f.name], cwd=ROOT, capture_output=True, text=True)
    os.unlink(f.name)
    out = json.loads(p.stdout)
    check(p.returncode == 0 and out["ok"] is False and "UTF-8" in out.get("error", ""), f"CLI on non-UTF-8: {out}")
    p = subprocess.run([py, "-m", "env.harness.static_checks"], cwd=ROOT, capture_output=True, text=True)
    check(p.returncode == 2, f"CLI without a file must exit 2, got {p.returncode}")

    print(f"static checks: {n_static} static hacks, {n_runtime} runtime hacks passing the static layer, "
          f"{n_honest} honest candidates, {len(CASES)} edge cases; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
