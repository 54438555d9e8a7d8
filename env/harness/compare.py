"""Output comparison for correctness: shape and dtype checks, allclose with
the task's tolerance, input-mutation and output-reuse tests. Outputs may be a
tensor or a (nested) tuple/list of tensors and Python numbers."""

import math

import torch

from env.harness import protocol


def raw_leaves(x):
    """The values of a (nested) output as they are: what the type, dtype,
    shape and layout checks read."""
    if isinstance(x, (list, tuple)):
        for e in x:
            yield from raw_leaves(e)
    else:
        yield x


def leaves(x):
    """The values every numeric check reads: raw_leaves, with each complex
    tensor seen as its real view (torch.view_as_real: [..., 2] of real and
    imaginary parts), so a check that casts to float64 reads both parts; a
    complex tensor cast to a real dtype keeps only its real part, and an
    output right in that part alone would pass."""
    for e in raw_leaves(x):
        if isinstance(e, torch.Tensor) and e.is_complex():
            yield torch.view_as_real(e.resolve_conj())
        else:
            yield e


def tolerance(opts, task, ref_output):
    """atol, rtol: the job's options win, then the task's module-level ATOL /
    RTOL, then the default for the output dtype (1e-4 fp32, 1e-2 half)."""
    half = any(isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)
               for t in leaves(ref_output))
    default = protocol.DEFAULT_TOL_HALF if half else protocol.DEFAULT_TOL_FP32
    atol = opts.get("atol")
    rtol = opts.get("rtol")
    if atol is None:
        atol = float(getattr(task, "ATOL", default))
    if rtol is None:
        rtol = float(getattr(task, "RTOL", default))
    return float(atol), float(rtol)


def structure_problem(ref, out):
    """Why out cannot be compared with ref value by value (leaf count, a
    tensor where a number is expected, shape, dtype, device), or None."""
    ref_leaves = list(raw_leaves(ref))
    out_leaves = list(raw_leaves(out))
    if len(ref_leaves) != len(out_leaves):
        return f"output has {len(out_leaves)} values, the reference {len(ref_leaves)}"
    for i, (r, o) in enumerate(zip(ref_leaves, out_leaves)):
        where = f"output {i}" if len(ref_leaves) > 1 else "output"
        if isinstance(r, torch.Tensor):
            if not isinstance(o, torch.Tensor):
                return f"{where} is {type(o).__name__}, expected a tensor"
            if tuple(o.shape) != tuple(r.shape):
                return f"{where} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
            if o.dtype != r.dtype:
                return f"{where} has dtype {o.dtype}, expected {r.dtype}"
            if o.device != r.device:
                return f"{where} is on {o.device}, expected {r.device}"
        elif isinstance(r, (int, float)):
            if not isinstance(o, (int, float)) or isinstance(o, bool) != isinstance(r, bool):
                return f"{where} is {type(o).__name__}, expected {type(r).__name__}"
    return None


def compare(ref, out, atol, rtol):
    """Returns (ok, max_abs_diff, message). max_abs_diff is None when the
    outputs cannot be compared element by element. atol is one number, or
    a list with one per leaf (leaves()), each a number or a tensor of the
    leaf's shape (error_budget.sequence_allowance)."""
    problem = structure_problem(ref, out)
    if problem:
        return False, None, problem
    ref_leaves = list(leaves(ref))
    out_leaves = list(leaves(out))
    worst = 0.0
    for i, (r, o) in enumerate(zip(ref_leaves, out_leaves)):
        where = f"output {i}" if len(ref_leaves) > 1 else "output"
        a = atol[i] if isinstance(atol, (list, tuple)) else atol
        if isinstance(r, torch.Tensor):
            if r.numel() == 0:
                continue
            rf, of = r.detach().double(), o.detach().double()
            diff = (rf - of).abs()
            nan_out = torch.isnan(of) & ~torch.isnan(rf)
            if bool(nan_out.any()):
                return False, math.inf, f"{where} holds NaN where the reference does not"
            d = float(torch.nan_to_num(diff, nan=0.0, posinf=math.inf).max())
            worst = max(worst, d)
            a_t = a.to(device=rf.device, dtype=torch.float64) if isinstance(a, torch.Tensor) else a
            r_t = rtol
            if not r.is_floating_point():
                # integer and bool outputs must be exact, in their own dtype
                # (float64 reads int64 values 256 apart at 2^60 as equal)
                wrong = o.detach().to(r.device) != r.detach()
                if bool(wrong.any()):
                    return False, max(worst, 1.0), (f"{where} differs from the reference in {int(wrong.sum())} of "
                                                    f"{r.numel()} elements; integer and bool outputs must be exact")
                continue
            same = (of == rf) | (torch.isnan(of) & torch.isnan(rf))
            # as torch.isclose: an infinite reference is matched only by itself
            outside = ~same & ~((diff <= a_t + r_t * rf.abs()) & torch.isfinite(rf))
            if bool(outside.any()):
                a_text = f"{a:g}" if not isinstance(a, torch.Tensor) else f"{float(a.min()):.3g} to {float(a.max()):.3g}"
                return False, worst, (f"{where} differs from the reference: max abs diff {d:.3g}, "
                                      f"{int(outside.sum())} of {r.numel()} elements outside atol={a_text} "
                                      f"rtol={r_t:g}")
        elif isinstance(r, (int, float)):
            a = float(a.max()) if isinstance(a, torch.Tensor) else a
            if isinstance(r, int):  # a count or an index: exact, in integers
                if isinstance(o, int) and o == r or isinstance(o, float) and o.is_integer() and int(o) == r:
                    continue
                return False, abs(float(o) - float(r)) or 1.0, f"{where} is {o}, expected {r}"
            fr, fo = float(r), float(o)
            if fr == fo or (math.isnan(fr) and math.isnan(fo)):
                continue
            d = abs(fo - fr)
            worst = max(worst, d) if not math.isnan(d) else math.inf
            # NaN compares false, and an infinite reference is matched only by itself
            if not (math.isfinite(fr) and d <= a + rtol * abs(fr)):
                return False, worst, f"{where} is {o}, expected {r}"
        elif r != o:
            return False, None, f"{where} is {o!r}, expected {r!r}"
    return True, worst, ""


def deferred_verdict(ref, out, atol, rtol):
    """The allclose verdict of compare() left on the device: (ok, max_abs_diff)
    as 0-dim tensors, computed without waiting for the GPU, so a long run of
    checks costs one synchronisation instead of three each. None when the
    outputs need the host-side checks (structure, dtype, non-tensor leaves):
    call compare() then."""
    raw_ref, raw_out = list(raw_leaves(ref)), list(raw_leaves(out))
    if len(raw_ref) != len(raw_out) or not raw_ref:
        return None
    for r, o in zip(raw_ref, raw_out):
        if not isinstance(r, torch.Tensor) or not isinstance(o, torch.Tensor):
            return None
        if tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype or o.device != r.device:
            return None
    ok, worst = None, None
    for r, o in zip(leaves(ref), leaves(out)):
        if r.numel() == 0:
            continue
        rf, of = r.detach().double(), o.detach().double()
        # isclose with equal_nan also fails a NaN where the reference has none.
        leaf_ok = torch.isclose(of, rf, atol=atol, rtol=rtol, equal_nan=True).all()
        leaf_diff = torch.nan_to_num((rf - of).abs(), nan=0.0, posinf=math.inf).max()
        ok = leaf_ok if ok is None else ok & leaf_ok
        worst = leaf_diff if worst is None else torch.maximum(worst, leaf_diff)
    if ok is None:
        return None
    return ok, worst


class SampledVerdicts:
    """deferred_verdict over a fixed random subset of each large output
    leaf, for the timed call sequence: checking every element of a 64 MB
    output in double costs about a millisecond per call, more than many
    candidates' kernels. The positions are drawn in the child from a seed
    the candidate cannot see, and the reference side is gathered once per
    input set, so a call costs one small gather. An output wrong in a share
    q of its elements passes with probability (1 - q)^max_elements."""

    def __init__(self, refs, atol, rtol, max_elements, seed):
        self.atol, self.rtol = atol, rtol
        self.dtypes = [t.dtype if isinstance(t, torch.Tensor) else None for t in raw_leaves(refs[0])]
        first = list(leaves(refs[0]))
        self.shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in first]
        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        self.index = []
        for t in first:
            if isinstance(t, torch.Tensor) and t.numel() > max_elements:
                self.index.append(torch.randint(0, t.numel(), (max_elements,), generator=g).to(t.device))
            else:
                self.index.append(None)
        self.refs = [self._take(r) for r in refs]

    def _take(self, x):
        dtypes = [t.dtype if isinstance(t, torch.Tensor) else None for t in raw_leaves(x)]
        if dtypes != self.dtypes:  # a real [..., 2] standing for a complex output goes to compare()
            return None
        ls = list(leaves(x))
        if len(ls) != len(self.index):
            return None
        out = []
        for t, idx, shape in zip(ls, self.index, self.shapes):
            if idx is None:
                out.append(t)
                continue
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
                return None
            out.append(t.detach().reshape(-1)[idx])
        return out

    def verdict(self, out, p):
        """(ok, max_abs_diff) device tensors, or None when the output must go
        through compare()."""
        sampled = self._take(out)
        if sampled is None or self.refs[p] is None:
            return None
        return deferred_verdict(self.refs[p], sampled, self.atol, self.rtol)


def read_back(flags):
    """Device scalars (bools, diffs) as Python floats, with one synchronisation."""
    if not flags:
        return []
    return torch.stack([f.to(torch.float64) for f in flags]).cpu().tolist()


def _same_values(a, b):
    """Elementwise a == b on the device, NaN equal to NaN."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b)) if a.is_floating_point() else (a == b)


def deferred_unchanged(before, after):
    """mutated_input's test left on the device: a 0-dim bool tensor, true
    when every tensor input kept its values; None when the host must look
    (a shape or dtype changed, or there are no tensors)."""
    flag = None
    for b, a in zip(before, after):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
                return None
            same = _same_values(a, b).all()
            flag = same if flag is None else flag & same
    return flag


def mutated_input(before, after):
    """Index of the first tensor input whose values changed, else None."""
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return i
            if not bool(_same_values(a, b).all()):
                return i
    return None


def storage_ptrs(x):
    return {t.untyped_storage().data_ptr() for t in raw_leaves(x)
            if isinstance(t, torch.Tensor) and t.numel() > 0}


def shares_storage(a, b):
    return bool(storage_ptrs(a) & storage_ptrs(b))


def identical(a, b):
    la, lb = list(raw_leaves(a)), list(raw_leaves(b))
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True
