"""Static anti-hacking checks on a candidate's source: the AST is read, nothing
runs. Every finding is a named reason ("static:<kind>") with the line it was
found on.

Names are resolved through the candidate's own imports, so `F.relu` is
torch.nn.functional.relu and `from os import environ` is os.environ; a module
reached through another module's attributes (`os.sys.modules`,
`torch.os.environ`) is judged by the module it reaches. A value reached
through a local variable (`m = torch; m.cuda.Stream()`) is beyond this layer
on purpose: this layer is a filter, not the wall. What decides the verdict
runs in the judge's process, which never executes candidate code (see
env.harness.evaluate).

The source is checked as Python will read it: a candidate that declares any
encoding but UTF-8 (a coding cookie, or a byte-order mark) is rejected, since
a declared encoding would make Python decode the file into other text than
the one checked here.

    python -m env.harness.static_checks CANDIDATE.py
prints one JSON object: {"ok", "hack": {"detected", "reasons"}, "details",
"kernels", "syntax_error"}.
"""

import ast
import io
import json
import re
import sys
import tokenize

# Import roots a candidate may use. Anything else is static:disallowed_import
# (the dangerous members of os and sys are caught by the rules below).
ALLOWED_IMPORT_ROOTS = {
    "torch", "triton", "math", "numpy", "functools", "itertools", "operator",
    "typing", "collections", "dataclasses", "enum", "abc", "__future__",
    "numbers", "copy", "einops", "os", "sys", "warnings",
}

# Qualified-name prefixes (matched at a '.' boundary) and the reason each one
# gives. Imports, attribute chains and getattr(x, "const") all resolve to such
# names.
PREFIX_RULES = [
    # compilers and graph capture take the work away from the candidate
    ("torch.compile", "static:torch_compile"),
    ("torch.jit", "static:torch_compile"),
    ("torch._dynamo", "static:torch_compile"),
    ("torch._inductor", "static:torch_compile"),
    ("torch.export", "static:torch_compile"),
    ("torch._export", "static:torch_compile"),
    ("torch.compiler", "static:torch_compile"),
    ("torch._functorch", "static:torch_compile"),
    ("functorch", "static:torch_compile"),
    ("torch._higher_order_ops", "static:torch_compile"),
    ("torch._prims", "static:torch_compile"),
    ("torch._refs", "static:torch_compile"),
    ("torch._lazy", "static:torch_compile"),
    # changing what torch's own operators compute, under the comparison
    ("torch.library", "static:torch_override"),
    ("torch._library", "static:torch_override"),
    ("torch.overrides", "static:torch_override"),
    ("torch.utils._python_dispatch", "static:torch_override"),
    ("torch._C._dispatch", "static:torch_override"),
    ("torch._C._set_torch_function_mode", "static:torch_override"),
    ("torch._C.DisableTorchFunction", "static:torch_override"),
    ("torch._C.DisableTorchFunctionSubclass", "static:torch_override"),
    ("torch._ops", "static:torch_override"),
    ("torch.ops", "static:torch_override"),
    ("torch._C._TensorMeta", "static:torch_override"),
    ("torch.Tensor._make_subclass", "static:torch_override"),
    ("torch.Tensor.as_subclass", "static:torch_override"),
    ("torch._C._TensorBase", "static:torch_override"),
    ("torch._C.TensorBase", "static:torch_override"),
    ("torch.fx", "static:torch_compile"),
    ("torch.cuda.graph", "static:cuda_graph"),
    ("torch.cuda.graphs", "static:cuda_graph"),
    ("torch.cuda.CUDAGraph", "static:cuda_graph"),
    ("torch.cuda.make_graphed_callables", "static:cuda_graph"),
    # work on other streams escapes the timed stream's events
    ("torch.cuda.Stream", "static:streams"),
    ("torch.cuda.stream", "static:streams"),
    ("torch.cuda.streams", "static:streams"),
    ("torch.cuda.set_stream", "static:streams"),
    ("torch.cuda.ExternalStream", "static:streams"),
    ("torch.Stream", "static:streams"),
    ("torch.cuda.StreamContext", "static:streams"),
    # concurrency and processes
    ("threading", "static:threads"),
    ("_thread", "static:threads"),
    ("multiprocessing", "static:threads"),
    ("torch.multiprocessing", "static:threads"),
    ("concurrent", "static:threads"),
    ("asyncio", "static:threads"),
    ("subprocess", "static:subprocess"),
    ("os.system", "static:subprocess"),
    ("os.popen", "static:subprocess"),
    ("os.fork", "static:subprocess"),
    ("os.forkpty", "static:subprocess"),
    ("os.posix_spawn", "static:subprocess"),
    ("os.posix_spawnp", "static:subprocess"),
    ("pty", "static:subprocess"),
    # looking at the harness's frames or objects
    ("inspect", "static:frame_inspection"),
    ("gc", "static:frame_inspection"),
    ("traceback", "static:frame_inspection"),
    ("sys._getframe", "static:frame_inspection"),
    ("sys._current_frames", "static:frame_inspection"),
    ("sys.settrace", "static:frame_inspection"),
    ("sys.setprofile", "static:frame_inspection"),
    ("sys.gettrace", "static:frame_inspection"),
    ("sys.modules", "static:monkeypatch"),
    ("builtins", "static:monkeypatch"),
    ("unittest.mock", "static:monkeypatch"),
    ("ctypes", "static:ctypes"),
    ("cffi", "static:ctypes"),
    # running code the checks never saw
    ("importlib", "static:dynamic_code"),
    ("pickle", "static:dynamic_code"),
    ("marshal", "static:dynamic_code"),
    ("types.FunctionType", "static:dynamic_code"),
    ("types.CodeType", "static:dynamic_code"),
    ("code", "static:dynamic_code"),
    ("codeop", "static:dynamic_code"),
    # files
    ("io.open", "static:file_access"),
    ("io.FileIO", "static:file_access"),
    ("os.open", "static:file_access"),
    ("os.fdopen", "static:file_access"),
    ("os.read", "static:file_access"),
    ("os.write", "static:file_access"),
    ("os.remove", "static:file_access"),
    ("os.unlink", "static:file_access"),
    ("os.rename", "static:file_access"),
    ("os.renames", "static:file_access"),
    ("os.replace", "static:file_access"),
    ("os.mkdir", "static:file_access"),
    ("os.makedirs", "static:file_access"),
    ("os.rmdir", "static:file_access"),
    ("os.removedirs", "static:file_access"),
    ("os.listdir", "static:file_access"),
    ("os.scandir", "static:file_access"),
    ("os.walk", "static:file_access"),
    ("os.chdir", "static:file_access"),
    ("os.chmod", "static:file_access"),
    ("os.chown", "static:file_access"),
    ("os.link", "static:file_access"),
    ("os.symlink", "static:file_access"),
    ("os.truncate", "static:file_access"),
    ("os.dup", "static:file_access"),
    ("os.dup2", "static:file_access"),
    ("os.pipe", "static:file_access"),
    ("os.mkfifo", "static:file_access"),
    ("os.sendfile", "static:file_access"),
    ("pathlib", "static:file_access"),
    ("shutil", "static:file_access"),
    ("tempfile", "static:file_access"),
    ("glob", "static:file_access"),
    ("fileinput", "static:file_access"),
    ("mmap", "static:file_access"),
    ("shelve", "static:file_access"),
    ("sqlite3", "static:file_access"),
    ("torch.save", "static:file_access"),
    ("torch.load", "static:file_access"),
    ("numpy.save", "static:file_access"),
    ("numpy.savez", "static:file_access"),
    ("numpy.load", "static:file_access"),
    ("numpy.fromfile", "static:file_access"),
    ("numpy.savetxt", "static:file_access"),
    ("numpy.loadtxt", "static:file_access"),
    ("numpy.memmap", "static:file_access"),
    ("numpy.fromregex", "static:file_access"),
    ("numpy.genfromtxt", "static:file_access"),
    ("numpy.DataSource", "static:file_access"),
    ("numpy.lib.npyio", "static:file_access"),
    ("numpy.lib.format", "static:file_access"),
    ("numpy.ctypeslib", "static:ctypes"),
    # environment
    ("os.environ", "static:env_access"),
    ("os.environb", "static:env_access"),
    ("os.getenv", "static:env_access"),
    ("os.getenvb", "static:env_access"),
    ("os.putenv", "static:env_access"),
    ("os.unsetenv", "static:env_access"),
    ("triton.knobs", "static:env_access"),
    # network
    ("socket", "static:network"),
    ("ssl", "static:network"),
    ("http", "static:network"),
    ("urllib", "static:network"),
    ("urllib3", "static:network"),
    ("requests", "static:network"),
    ("httpx", "static:network"),
    ("aiohttp", "static:network"),
    ("ftplib", "static:network"),
    ("smtplib", "static:network"),
    ("telnetlib", "static:network"),
    ("xmlrpc", "static:network"),
    ("websocket", "static:network"),
    ("websockets", "static:network"),
    ("torch.distributed", "static:network"),
    # leaving the process
    ("sys.exit", "static:exit_call"),
    ("os._exit", "static:exit_call"),
    ("os.abort", "static:exit_call"),
    ("os.kill", "static:exit_call"),
    ("os.killpg", "static:exit_call"),
    ("signal", "static:exit_call"),
    ("atexit", "static:exit_call"),
    # branching on autograd state is a training-mode branch in disguise
    ("torch.is_grad_enabled", "static:training_branch"),
    ("torch.is_inference_mode_enabled", "static:training_branch"),
]

# os.exec* and os.spawn* come as families.
PREFIX_FAMILY_RULES = [("os.exec", "static:subprocess"), ("os.spawn", "static:subprocess")]

# The os module's names a kernel file may use; any other os.X that no rule
# above names is judged file access. A list of what is refused would miss
# each new way to hold resources outside the sandbox's limits (memory in a
# memfd no process maps: os.memfd_create, os.posix_fallocate,
# os.ftruncate), so os is read by what is allowed.
OS_ALLOWED = {"path", "sep", "altsep", "extsep", "pathsep", "linesep", "curdir", "pardir", "devnull", "name",
              "cpu_count", "getpid", "fspath", "PathLike"}

# Bare builtin names (when the candidate did not rebind them).
BUILTIN_RULES = {
    "open": "static:file_access",
    "exit": "static:exit_call",
    "quit": "static:exit_call",
    "eval": "static:dynamic_code",
    "exec": "static:dynamic_code",
    "compile": "static:dynamic_code",
    "__import__": "static:dynamic_code",
    "globals": "static:frame_inspection",
    "locals": "static:frame_inspection",
    "vars": "static:frame_inspection",
    "breakpoint": "static:exit_call",
    "__builtins__": "static:monkeypatch",
}

# Attribute names that only serve introspection of frames and code objects.
INTROSPECTION_ATTRS = {
    "f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame",
    "gi_frame", "cr_frame", "ag_frame", "__globals__", "__code__",
    "__closure__", "co_code", "__subclasses__", "__builtins__", "cell_contents",
    "__defaults__", "__kwdefaults__",
}

# Callables of the standard library that take attribute names as strings
# (operator.attrgetter("a.b"), operator.methodcaller("m")): a computed name
# is as opaque to these checks as getattr's.
ATTR_BY_STRING = {"operator.attrgetter", "operator.methodcaller"}

# A string constant that is an identifier or a dotted path of them: what an
# attribute-by-string call takes. Free text is not read.
DOTTED_NAME_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

# Methods that tie a tensor to another stream.
STREAM_ATTRS = {"wait_stream", "record_stream"}

# Raising these ends the process or the evaluation loop.
EXIT_EXCEPTIONS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit"}

TRITON_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics",
                     "triton.runtime.jit", "triton.runtime.autotune",
                     "triton.runtime.heuristics", "triton.runtime.jit.jit",
                     "triton.runtime.autotuner.autotune",
                     "triton.runtime.autotuner.heuristics"}

REASON_TEXT = {
    "static:no_modelnew": "no class ModelNew is defined at module level",
    "static:no_triton_kernel": "no @triton.jit kernel is defined",
    "static:kernel_not_launched": "no Triton kernel is launched from ModelNew.forward",
    "static:try_except_fallback": "try/except blocks can hide a fallback to torch",
    "static:training_branch": "behaviour depends on training mode or autograd state",
    "static:torch_compile": "torch.compile / TorchScript / graph capture is not allowed",
    "static:cuda_graph": "CUDA graph capture can replay stale results",
    "static:threads": "threads, processes pools or async code are not allowed",
    "static:subprocess": "starting processes is not allowed",
    "static:streams": "extra CUDA streams escape the timed stream",
    "static:monkeypatch": "assigning to attributes of imported modules (monkeypatching)",
    "static:frame_inspection": "frame, gc or code-object introspection",
    "static:ctypes": "ctypes / cffi give raw memory access",
    "static:dynamic_code": "running code built at runtime (eval, exec, importlib, pickle)",
    "static:dynamic_attribute": "getattr with a computed name on an imported module",
    "static:file_access": "file system access",
    "static:env_access": "environment variable access",
    "static:network": "network access",
    "static:exit_call": "exiting the process or sending signals",
    "static:disallowed_import": "import of a module outside the allowed set",
    "static:source_encoding": "a source encoding other than UTF-8 (coding declaration or byte-order mark)",
    "static:torch_override": "__torch_function__ / __torch_dispatch__, Tensor subclasses or torch.library change what torch computes",
}

# Modules that, reached as an attribute of another module (os.sys,
# torch.os), are judged as themselves: os.sys.modules is sys.modules.
REACHABLE_MODULES = {
    "sys", "os", "builtins", "importlib", "gc", "inspect", "ctypes", "subprocess", "types", "imp",
    "runpy", "marshal", "pickle", "threading", "socket", "signal", "io", "shutil", "pathlib", "tempfile",
    "traceback", "weakref", "_thread", "multiprocessing", "functools", "operator", "codecs", "linecache",
    "tokenize", "warnings", "abc", "copyreg", "atexit", "mmap",
}

# Attribute names whose only use is reaching a module, a frame, the import
# system or an object's class machinery: flagged on any object.
DYNAMIC_DUNDERS = {
    "__dict__", "__class__", "__bases__", "__base__", "__mro__", "__self__", "__func__", "__wrapped__",
    "__loader__", "__spec__", "__import__", "__getattribute__", "__reduce__", "__reduce_ex__", "__module__",
    "__objclass__", "__init_subclass__", "__class_getitem__", "__set_name__", "__qualname__",
}

# Attribute names that reach a module of the machinery (or a frame, or raw
# memory) whatever object they are read from: `t = torch; t.sys` or
# `np.ctypeslib` name no import the rules above could resolve, so the name
# itself is flagged. None of them is an attribute an honest kernel reads.
MODULE_ATTRS = {
    "sys": "static:dynamic_attribute", "os": "static:dynamic_attribute", "builtins": "static:dynamic_attribute",
    "importlib": "static:dynamic_code", "gc": "static:frame_inspection", "inspect": "static:frame_inspection",
    "ctypes": "static:ctypes", "ctypeslib": "static:ctypes", "subprocess": "static:subprocess",
    "_thread": "static:threads", "multiprocessing": "static:threads", "marshal": "static:dynamic_code",
    "pickle": "static:dynamic_code", "socket": "static:network", "mmap": "static:file_access",
    "runpy": "static:dynamic_code", "linecache": "static:frame_inspection", "_getframe": "static:frame_inspection",
    "_current_frames": "static:frame_inspection", "tofile": "static:file_access",
}

# torch functions that take the training flag, and its position: there
# self.training may be passed positionally (F.dropout(x, p, self.training));
# anywhere else (torch.tensor(self.training)) it is a value to branch on.
TRAINING_SLOTS = {"dropout": 2, "dropout1d": 2, "dropout2d": 2, "dropout3d": 2, "alpha_dropout": 2,
                  "feature_alpha_dropout": 2, "batch_norm": 5, "rrelu": 3}

# Process-wide precision and algorithm switches of torch that a candidate
# may set: they change only how its own torch calls run, in its own process
# (the judge's reference is computed elsewhere), like
# torch.set_float32_matmul_precision, and every output is judged anyway.
BACKEND_FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
}

# Names whose definition or use changes what torch's operators do on the
# objects the judge compares.
TORCH_OVERRIDE_NAMES = {"__torch_function__", "__torch_dispatch__"}

# Builtins that take an attribute name: with a name that is not a literal,
# or a dunder literal, they reach what the checks cannot name.
ATTR_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}

# A coding declaration (PEP 263), in the first two lines only.
CODING_RE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
UTF8_NAMES = {"utf-8", "utf8", "utf_8", "u8", "utf"}


def _match_rules(qname):
    parts = qname.split(".")
    for i in range(1, len(parts)):
        if parts[i] in REACHABLE_MODULES:
            # os.sys.modules is sys.modules, torch.os.environ is os.environ.
            return _match_direct(".".join(parts[i:])) or "static:dynamic_attribute"
    return _match_direct(qname)


# PREFIX_RULES by prefix: (its place in the list, reason), the first when a
# prefix is listed twice. A name matches a rule when one of its dotted
# prefixes is the rule's; of several, the earliest in the list decides.
_PREFIX_INDEX = {}
for _i, (_prefix, _reason) in enumerate(PREFIX_RULES):
    _PREFIX_INDEX.setdefault(_prefix, (_i, _reason))


def _match_direct(qname):
    parts = qname.split(".")
    best = None
    for k in range(1, len(parts) + 1):
        hit = _PREFIX_INDEX.get(".".join(parts[:k]))
        if hit is not None and (best is None or hit[0] < best[0]):
            best = hit
    if best is not None:
        return best[1]
    for prefix, reason in PREFIX_FAMILY_RULES:
        if qname.startswith(prefix):
            return reason
    if len(parts) > 1 and parts[0] == "os" and parts[1] not in OS_ALLOWED:
        return "static:file_access"
    return None


class _Checker:
    def __init__(self, tree):
        self.tree = tree
        self.aliases = {}          # local name -> qualified module/object name
        self.findings = []         # (reason, line, what)
        self.rebound = set()       # module-level names that shadow builtins
        self.parents = {}
        self._bindings = {}        # function node -> the names it binds
        # every node, in ast.walk's order: the passes below read this list
        # rather than walking the tree again each (a third of the check's time)
        self.nodes = list(ast.walk(tree))
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def add(self, reason, node, what):
        self.findings.append((reason, getattr(node, "lineno", 0), what))

    # ---- names ------------------------------------------------------------
    def qualified(self, node):
        """The dotted name an expression resolves to through the imports, or
        None when its root is not an imported name."""
        parts = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "getattr" and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str)):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                break
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id]] + parts[::-1])
        return None

    def root_is_import(self, node):
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return isinstance(node, ast.Name) and (node.id in self.aliases or node.id == "__builtins__")

    def collect_imports(self):
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
                    self.check_import(a.name, node)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    self.add("static:disallowed_import", node, "relative import")
                    continue
                mod = node.module or ""
                self.check_import(mod, node)
                for a in node.names:
                    if a.name == "*":
                        self.add("static:disallowed_import", node, f"from {mod} import *")
                        continue
                    full = f"{mod}.{a.name}"
                    self.aliases[a.asname or a.name] = full
                    reason = _match_rules(full)
                    if reason:
                        self.add(reason, node, f"import {full}")
        for node in self.tree.body:
            for tgt in _assigned_names(node):
                if tgt in BUILTIN_RULES:
                    self.rebound.add(tgt)

    def check_import(self, name, node):
        root = name.split(".")[0]
        if root not in ALLOWED_IMPORT_ROOTS:
            self.add("static:disallowed_import", node, f"import {name}")
        reason = _match_rules(name)
        if reason:
            self.add(reason, node, f"import {name}")

    def _class_name(self, node):
        """x.__class__.__name__ (a __repr__'s type name, as type(x).__name__):
        the class is read only for its name."""
        parent = self.parents.get(node)
        if node.attr == "__class__":
            return isinstance(parent, ast.Attribute) and parent.value is node and parent.attr == "__name__"
        return (node.attr == "__name__" and isinstance(node.value, ast.Attribute)
                and node.value.attr == "__class__")

    def loop_constants(self, name):
        """The strings a name takes when it is the target of an enclosing
        `for name in ("weight", "bias")` over string literals and is bound
        nowhere else in its function; else None."""
        if not isinstance(name, ast.Name):
            return None
        n, loop = self.parents.get(name), None
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
            if (isinstance(n, ast.For) and isinstance(n.target, ast.Name) and n.target.id == name.id
                    and isinstance(n.iter, (ast.Tuple, ast.List))
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.iter.elts)):
                loop = n
                break
            n = self.parents.get(n)
        if loop is None:
            return None
        scope = n
        while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            scope = self.parents.get(scope)
        stores = [x for x in ast.walk(scope) if isinstance(x, ast.Name) and x.id == name.id
                  and isinstance(x.ctx, (ast.Store, ast.Del))]
        if len(stores) != 1:
            return None
        return [e.value for e in loop.iter.elts]

    def bound_in_scope(self, node):
        """True when node's name is bound in a function enclosing it (a
        parameter, an assignment, a loop or with target, an import): there
        it is that local, not the builtin (vars = x.var(-1) is a variance)."""
        child, n = node, self.parents.get(node)
        while n is not None:
            # Only the body runs in the function's scope: its defaults,
            # decorators and annotations are evaluated where it is defined
            # (def f(x, exec=exec) reads the builtin).
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and child in n.body \
                    or isinstance(n, ast.Lambda) and child is n.body:
                if node.id in self._function_bindings(n):
                    return True
            child, n = n, self.parents.get(n)
        return False

    def _function_bindings(self, fn):
        cached = self._bindings.get(fn)
        if cached is not None:
            return cached
        a = fn.args
        names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        body = fn.body if isinstance(fn.body, list) else [fn.body]
        stack = list(body)
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)  # its own body is another scope
                continue
            if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                names.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names |= {(x.asname or x.name).split(".")[0] for x in n.names}
            elif isinstance(n, ast.ExceptHandler) and n.name:
                names.add(n.name)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                names -= set(n.names)
            stack.extend(ast.iter_child_nodes(n))
        self._bindings[fn] = names
        return names

    # ---- the generic walk ---------------------------------------------------
    def walk(self):
        for node in self.nodes:
            if isinstance(node, (ast.Attribute, ast.Name)) or _is_const_getattr(node):
                q = self.qualified(node)
                if q:
                    reason = _match_rules(q)
                    if reason and not self._inner_of_reported(node):
                        self.add(reason, node, q)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                # A module-level rebinding excuses nothing: a function can run
                # before it (or exec = exec reads the builtin), and a name of
                # this list is no loss to an honest module.
                if node.id in BUILTIN_RULES and node.id not in self.aliases and not self.bound_in_scope(node):
                    self.add(BUILTIN_RULES[node.id], node, node.id)
            if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in ATTR_BUILTINS
                    and node.id not in self.rebound):
                parent = self.parents.get(node)
                if not (isinstance(parent, ast.Call) and parent.func is node):
                    # getattr passed on or renamed (_g = getattr): its calls are out of check_call's sight
                    self.add("static:dynamic_attribute", node, f"{node.id} used as a value")
            if isinstance(node, ast.Attribute):
                if node.attr in MODULE_ATTRS and not self._inner_of_reported(node):
                    self.add(MODULE_ATTRS[node.attr], node, "." + node.attr)
                if node.attr in TORCH_OVERRIDE_NAMES:
                    self.add("static:torch_override", node, "." + node.attr)
                elif node.attr in DYNAMIC_DUNDERS and not self._class_name(node):
                    self.add("static:dynamic_attribute", node, "." + node.attr)
                if node.attr == "compile" and isinstance(self.parents.get(node), ast.Call):
                    self.add("static:torch_compile", node, ".compile()")
                if node.attr in INTROSPECTION_ATTRS:
                    self.add("static:frame_inspection", node, "." + node.attr)
                if node.attr in STREAM_ATTRS:
                    self.add("static:streams", node, "." + node.attr)
                if node.attr == "training" and isinstance(node.ctx, ast.Load) and not self._is_training_kwarg(node):
                    self.add("static:training_branch", node, "." + node.attr)
                if node.attr in ("__setattr__", "__delattr__") and self.root_is_import(node.value):
                    self.add("static:monkeypatch", node, "." + node.attr)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.check_name_string(node)
            if isinstance(node, ast.Call):
                self.check_call(node)
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    for leaf in _flatten_targets(t):
                        self.check_store(leaf)
            if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                if not self._is_import_only_try(node):
                    self.add("static:try_except_fallback", node, "try/except")
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in EXIT_EXCEPTIONS:
                    self.add("static:exit_call", node, f"raise {exc.id}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in TORCH_OVERRIDE_NAMES:
                self.add("static:torch_override", node, f"def {node.name}")
            if isinstance(node, ast.Name) and node.id in TORCH_OVERRIDE_NAMES:
                self.add("static:torch_override", node, node.id)
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    q = self.qualified(base)
                    if q and (q in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase")
                              or q.startswith("torch.nn.Parameter") or q.endswith("TorchFunctionMode")
                              or q.endswith("TorchDispatchMode")):
                        self.add("static:torch_override", node, f"class {node.name}({q})")
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in ("train", "eval"):
                        self.add("static:training_branch", item, f"{node.name}.{item.name} overridden")
            if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
                self.add("static:threads", node, "async code")
            if isinstance(node, ast.Global):
                pass

    def _inner_of_reported(self, node):
        """True when a longer chain containing this node already matches, so
        torch.cuda.Stream is reported once, not also as torch.cuda."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            q = self.qualified(parent)
            return bool(q and _match_rules(q))
        return False

    def _is_training_kwarg(self, node):
        """self.training handed on to torch (F.dropout(x, p, self.training)
        or training=self.training): the mode-dependent op is torch's own,
        which the reference runs the same way."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.keyword) and parent.arg == "training":
            return True
        if isinstance(parent, ast.Call) and node in parent.args:
            q = self.qualified(parent.func) or ""
            slot = TRAINING_SLOTS.get(q.rsplit(".", 1)[-1]) if q.startswith("torch.") else None
            return slot is not None and parent.args.index(node) == slot
        return False

    def _is_import_only_try(self, node):
        """A module-level try that only imports (an optional dependency), or
        one nested in the handler of such a try (a chain of fallbacks:
        try: from a import x / except ImportError: try: from b import x)."""
        if not all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body):
            return False
        parent = self.parents.get(node)
        if parent is self.tree:
            return True
        if isinstance(parent, ast.ExceptHandler):
            outer = self.parents.get(parent)
            return isinstance(outer, (ast.Try, getattr(ast, "TryStar", ast.Try))) and self._is_import_only_try(outer)
        return False

    def check_call(self, node):
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("setattr", "delattr") and f.id not in self.rebound:
            if node.args and self.root_is_import(node.args[0]):
                self.add("static:monkeypatch", node, f"{f.id} on an imported module")
        if isinstance(f, ast.Attribute) and f.attr in ("__setattr__", "__delattr__"):
            if node.args and self.root_is_import(node.args[0]):
                self.add("static:monkeypatch", node, f"{f.attr} on an imported module")
        if isinstance(f, ast.Name) and f.id in ATTR_BUILTINS and f.id not in self.rebound and len(node.args) >= 2:
            name = node.args[1]
            values = self.loop_constants(name)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                values = [name.value]
            if values is None:
                self.add("static:dynamic_attribute", node, f"{f.id} with a computed name")
            for value in values or []:
                if value.startswith("__") and value.endswith("__"):
                    reason = "static:torch_override" if value in TORCH_OVERRIDE_NAMES else "static:dynamic_attribute"
                    self.add(reason, node, f"{f.id}(..., {value!r})")
                    break
        if self.qualified(f) in ATTR_BY_STRING:
            # attrgetter's arguments are all names; methodcaller's first one is.
            names = node.args if self.qualified(f) == "operator.attrgetter" else node.args[:1]
            if not names or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in names):
                self.add("static:dynamic_attribute", node, f"{self.qualified(f)} with a computed name")
        if isinstance(f, ast.Name) and f.id in ("vars", "dir", "type", "super") and f.id not in self.rebound:
            if f.id in ("vars", "dir") or (f.id == "type" and len(node.args) == 3):
                self.add("static:dynamic_attribute", node, f"{f.id}()")
        if isinstance(f, ast.Attribute) and f.attr in ("suppress",):
            q = self.qualified(f)
            if q == "contextlib.suppress":
                self.add("static:try_except_fallback", node, "contextlib.suppress")

    def check_name_string(self, node):
        """A string naming an introspection or class-machinery attribute, in
        any position: getattr is not the only way to use one
        (operator.attrgetter, a lookup table, a dict's keys), so the name
        itself is what is flagged."""
        if not DOTTED_NAME_RE.match(node.value):
            return
        for part in node.value.split("."):
            reason = ("static:torch_override" if part in TORCH_OVERRIDE_NAMES else
                      "static:frame_inspection" if part in INTROSPECTION_ATTRS else
                      "static:dynamic_attribute" if part in DYNAMIC_DUNDERS else None)
            if reason:
                self.add(reason, node, repr(node.value))
                return

    def check_store(self, target):
        if isinstance(target, ast.Attribute) and self.qualified(target) in BACKEND_FLAGS:
            return
        if isinstance(target, ast.Attribute) and self.root_is_import(target.value):
            self.add("static:monkeypatch", target, f"assignment to {ast.unparse(target)}")
        if isinstance(target, ast.Subscript):
            v = target.value
            if isinstance(v, ast.Attribute) and v.attr == "__dict__":
                self.add("static:monkeypatch", target, "assignment through __dict__")
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("vars", "globals"):
                self.add("static:monkeypatch", target, f"assignment through {v.func.id}()")
            if self.root_is_import(v):
                self.add("static:monkeypatch", target, f"assignment into {ast.unparse(v)}")
        if isinstance(target, ast.Name) and target.id == "__builtins__":
            self.add("static:monkeypatch", target, "rebinding __builtins__")

    # ---- kernels and the forward -------------------------------------------
    def kernels(self):
        names = set()
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    d = dec.func if isinstance(dec, ast.Call) else dec
                    q = self.qualified(d)
                    if q in TRITON_DECORATORS:
                        names.add(node.name)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                q = self.qualified(node.value.func)
                inner = node.value
                # triton.jit(fn) or triton.autotune(...)(triton.jit(fn))
                while q is None and isinstance(inner.func, ast.Call):
                    inner = inner.func
                    q = self.qualified(inner.func)
                if q in TRITON_DECORATORS:
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
        return names

    def check_model_and_launch(self):
        classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        funcs = {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        kernels = self.kernels()
        if "ModelNew" not in classes:
            self.add("static:no_modelnew", self.tree, REASON_TEXT["static:no_modelnew"])
        if not kernels:
            self.add("static:no_triton_kernel", self.tree, REASON_TEXT["static:no_triton_kernel"])
        if "ModelNew" not in classes or not kernels:
            return sorted(kernels)
        methods = {}
        for cname, cnode in classes.items():
            for item in cnode.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    methods.setdefault(item.name, []).append(item)
        model = classes["ModelNew"]
        forward = [i for i in model.body if isinstance(i, ast.FunctionDef) and i.name == "forward"]
        if not forward:
            self.add("static:kernel_not_launched", model, "ModelNew has no forward method")
            return sorted(kernels)
        # Classes instantiated by ModelNew are submodules whose forward runs
        # when ModelNew calls them (self.block(x)).
        used_classes = {n.func.id for n in ast.walk(model)
                        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in classes}
        seen, queue = set(), list(forward)
        for c in used_classes - {"ModelNew"}:
            queue += [i for i in classes[c].body if isinstance(i, ast.FunctionDef) and i.name in ("forward", "__call__")]
        direct, indirect_call, refs_kernel = False, False, False
        while queue:
            fn = queue.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    f = n.func
                    if isinstance(f, ast.Subscript):
                        base = f.value
                        if (isinstance(base, ast.Name) and base.id in kernels) or \
                           (isinstance(base, ast.Attribute) and base.attr in kernels):
                            direct = True
                        else:
                            indirect_call = True
                    if isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name) and f.value.id in kernels:
                        direct = True
                    if isinstance(f, ast.Name) and f.id in funcs and f.id not in kernels:
                        queue.append(funcs[f.id])
                    if isinstance(f, ast.Name) and f.id in classes:
                        queue += [i for i in classes[f.id].body if isinstance(i, ast.FunctionDef)]
                    if isinstance(f, ast.Attribute):
                        queue += methods.get(f.attr, [])
                        if f.attr == "apply":
                            queue += methods.get("forward", [])
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                    if n.id in kernels:
                        refs_kernel = True
                    elif n.id in funcs:
                        queue.append(funcs[n.id])
                if isinstance(n, ast.Attribute) and n.attr in kernels:
                    refs_kernel = True
        if indirect_call and not refs_kernel:
            # a kernel kept on the module in __init__ (self.kernel = k) and
            # launched through it in forward (self.kernel[grid](...))
            init = [i for i in model.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"]
            refs_kernel = any((isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in kernels)
                              for fn in init for n in ast.walk(fn))
        if not (direct or (indirect_call and refs_kernel)):
            self.add("static:kernel_not_launched", forward[0], REASON_TEXT["static:kernel_not_launched"])
        return sorted(kernels)


def _is_const_getattr(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant))


def _flatten_targets(t):
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _flatten_targets(e)
    elif isinstance(t, ast.Starred):
        yield from _flatten_targets(t.value)
    else:
        yield t


def _assigned_names(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for tt in node.targets for t in _flatten_targets(tt) if isinstance(t, ast.Name)]
    return []


def encoding_problem(source):
    """(line, what) when Python would not read source as the UTF-8 text it
    is: a byte-order mark, or a coding declaration naming anything but
    UTF-8 in the first two lines. Checked on the bytes Python will read, with
    Python's own detection (tokenize.detect_encoding), and on the text."""
    if source.startswith("\ufeff"):
        return 1, "a byte-order mark"
    for i, line in enumerate(source.splitlines()[:2]):
        m = CODING_RE.match(line)
        if m and m.group(1).lower().replace("_", "-") not in UTF8_NAMES | {"utf-8"}:
            return i + 1, f"coding declaration {m.group(1)!r}"
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(source.encode("utf-8", "surrogatepass")).readline)
    except SyntaxError as e:
        return 1, f"the encoding cannot be detected ({e})"
    if enc != "utf-8":
        return 1, f"Python would read it as {enc}"
    return None


def check_source(source):
    """Runs every static check on a candidate's source text. Returns the dict
    printed by the command line (see the module comment)."""
    out = {"ok": False, "hack": {"detected": False, "reasons": []}, "details": [],
           "kernels": [], "syntax_error": None}
    problem = encoding_problem(source)
    if problem:
        out["hack"] = {"detected": True, "reasons": ["static:source_encoding"]}
        out["details"].append({"reason": "static:source_encoding", "line": problem[0], "what": problem[1]})
        return out
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        out["syntax_error"] = f"SyntaxError: {e.msg} (line {e.lineno})"
        return out
    except (ValueError, RecursionError, MemoryError) as e:
        out["syntax_error"] = f"{type(e).__name__}: {e}"
        return out
    checker = _Checker(tree)
    try:
        checker.collect_imports()
        checker.walk()
        out["kernels"] = checker.check_model_and_launch()
    except RecursionError:
        out["syntax_error"] = "RecursionError: the source is nested too deeply to check"
        return out
    reasons, seen = [], set()
    for reason, line, what in checker.findings:
        if reason not in reasons:
            reasons.append(reason)
        if (reason, line, what) not in seen:
            seen.add((reason, line, what))
            out["details"].append({"reason": reason, "line": line, "what": what})
    out["hack"] = {"detected": bool(reasons), "reasons": reasons}
    out["ok"] = not reasons
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python -m env.harness.static_checks CANDIDATE.py\n")
        return 2
    try:
        with open(argv[1], "rb") as f:
            raw = f.read()
    except OSError as e:
        print(json.dumps({"ok": False, "hack": {"detected": False, "reasons": []},
                          "error": f"cannot read {argv[1]}: {e.strerror}"}))
        return 2
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        print(json.dumps({"ok": False, "hack": {"detected": False, "reasons": []},
                          "error": f"{argv[1]} is not valid UTF-8 (byte {e.start})"}))
        return 0
    print(json.dumps(check_source(source)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
