"""Reference timing: the task's Model timed in its own sandboxed child that
never imports the candidate, with the same call sequence as the candidate
(same input pool, L2 flush, CUDA events, device sync). Eager by default,
torch.compile with reference_mode "compile".

Timings are cached per (task source, GPU model, options that change the
measurement) as one JSON file each under the cache dir, written atomically
so several servers can share it.
"""

import hashlib
import json
import os
import time

import torch

from env.harness import evaluate, guards, loader, timing


def cache_key(task_source, gpu_name, opts, versions):
    fields = {
        "gpu": gpu_name,
        "mode": opts["reference_mode"],
        "perf_trials": opts["perf_trials"],
        "warmup": opts["warmup"],
        "input_sets": opts["input_sets"],
        "seed": opts["seed"],
        "versions": versions,
    }
    h = hashlib.sha256()
    h.update(task_source.encode("utf-8", errors="surrogateescape"))
    h.update(b"\0")
    h.update(json.dumps(fields, sort_keys=True).encode())
    return h.hexdigest()


def cache_read(cache_dir, key):
    path = os.path.join(cache_dir, "ref", key + ".json")
    try:
        with open(path) as f:
            data = json.load(f)
        return data.get("ref_runtime_ms")
    except (OSError, ValueError):
        return None


def cache_write(cache_dir, key, gpu_name, ref_runtime_ms):
    folder = os.path.join(cache_dir, "ref")
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{key}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({"gpu_name": gpu_name, "ref_runtime_ms": ref_runtime_ms, "written": time.time()}, f)
    os.replace(tmp, os.path.join(folder, key + ".json"))


def time_reference(job, opts, isolation):
    """Entry point in the reference child (CUDA only)."""
    res = {"status": "error", "error": "", "sandbox": isolation}
    t0 = time.perf_counter()
    try:
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
        torch.zeros(1, device=device)
        res["gpu_name"] = torch.cuda.get_device_name(0)
        timers = guards.Timers()
        task = loader.load_module(evaluate.TASK_MODULE, job["task_source"], os.getcwd())
        init_inputs = list(task.get_init_inputs())
        torch.manual_seed(opts["seed"])
        model = task.Model(*init_inputs).to(device)
        model.train(True)
        if opts["reference_mode"] == "compile":
            model = torch.compile(model)
        first = loader.inputs_from(task, evaluate.pool_seed(opts, 0), device)
        with torch.no_grad():
            out = model(*loader.clone_inputs(first))
        n = evaluate.pool_size(opts, "cuda", timing.input_bytes(first), timing.output_bytes(out), False)
        del out
        pool = [first] + [loader.inputs_from(task, evaluate.pool_seed(opts, p), device) for p in range(1, n)]
        calls, warmup = evaluate.sequence_plan(opts, "cuda", False, n)
        seq = timing.run_sequence(model, pool, lambda i: i % n, calls, warmup, device,
                                  timers=timers, flusher=timing.Flusher(device), check_reuse=False)
        res["ref_runtime_ms"] = timing.summarize(seq.times_ms)
        res["status"] = "ok"
    except BaseException as e:
        if evaluate.is_cuda_fault(e):
            res["status"] = "crash"
        res["error"] = f"reference timing failed: {type(e).__name__}: {e}\n{evaluate.exception_text(e, 2000)}"
    res["phases_ms"] = {"reference": timing.ms_since(t0)}
    return res
