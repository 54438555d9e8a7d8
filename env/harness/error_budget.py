"""Correctness judged against an fp64 evaluation of the reference.

A fixed atol/rtol against the reference in its own dtype rejects honest
kernels on ill-conditioned outputs: a sum of 8192 alternating-sign terms
near 100 carries an fp32 error of about 0.3 in PyTorch's own matmul, far
outside atol = rtol = 1e-4, and a kernel that sums in another order lands
elsewhere inside that same error. So the judge also evaluates the reference
in float64 (a copy of the model and of its floating inputs cast) and asks
whether the candidate is about as close to that as the reference is.

The rule, per output element i, with e_ref = |ref - ref64| (the reference's
own error), e_c = |cand - ref64| and s = max(e_ref_i, E_i) where E_i is the
RMS of e_ref over the whole output tensor, lowered where the elements of
i's size err far less than that (class_scale):

    (a) |cand_i - ref_i| <= atol + rtol |ref_i|               (the task's rule)
    (b) e_c_i <= K s + atol + rtol |ref64_i|                  (the fp64 budget)

An output passes when every element meets (a) or (b); `correct_rule` says
"tolerance" when (a) held everywhere, "fp64_budget" when some element needed
(b), "none" when some element met neither. The error ratio is the largest
e_c_i / (K s + atol + rtol |ref64_i|): at most 1 means within budget.

Where the judge measured it, E is raised to the fp32 floor of the output
(fp64_magnitude_floor): u times the fp64 model's output on |x|, the
classic rounding-error scale of sums and products, capped at 1e-4 of the
output's RMS. PyTorch's GPU reductions can be far more accurate than that,
and an honest kernel is not asked to match them.

Why the RMS floor E. The reference's error at one element is a random
quantity that is near 0 by luck at some elements (the fp32 rounding landed
on the exact value); a kernel with the same accuracy but another summation
order has its error elsewhere, so a budget of K e_ref_i alone rejects it at
those elements. E is the size of the reference's error on this output, so
the budget never falls below K times that typical size; atol/rtol remain the
floor where the reference has no error at all (copies, exact sums).

Why K = 8 (not 4). Rounding errors of long sums are close to Gaussian; the
largest of N such errors is about sqrt(2 ln N) times their RMS: 5.3 at 1e6
elements, 6.1 at 1e8. A kernel exactly as accurate as PyTorch therefore has
its worst element near 5-6 E, and K = 4 would reject it on large outputs;
K = 8 accepts it with room for a kernel somewhat less accurate
(tests/unit/test_kg_error_budget.py: ratio 0.55 at K = 8, 1.09 at K = 4, on
1e6 elements). Computing in bf16 or fp16 where the reference computes in
fp32 multiplies the unit roundoff by 2^16 or 2^13; where the fp32
reference's error comes from accumulation and the low-precision kernel's
from rounding its inputs, the gap shrinks, but stays far above K: on a GEMM
summing 1024 products, bf16 inputs give an error ratio of 1500 and fp16 190;
on the cancellation task (tests/kernelgym/tasks/cancel_sum.py, torch.sum as
the reference) bf16 110 to 340 and fp16 about 20. The margin is thinnest
when the reference is itself a poor summation (there, PyTorch's CPU matmul
as the reference of the same sums: bf16 18, fp16 1.1), so fp16 inputs can
pass on a task whose fp32 reference is that inaccurate; bf16 cannot.

The train/eval check uses the same scale: a candidate's train() and eval()
outputs on the same inputs may differ by at most 2 K s + 1e-5 (1 + |ref64|)
(two runs each within budget differ by at most twice the budget; 1e-5 is the
recipe's bar), unless the reference's own outputs differ by that much.

Everything here works on torch tensors of any device; the rule's arithmetic
is plain elementwise torch so tests check it on hand-written lists.
"""

import copy
import math

import torch

from env.harness import compare, loader

K = 8.0  # the default; a job's option budget_k (env/harness/protocol.py) sets it
TRAIN_EVAL_TOL = 1e-5
# The fp64 copy runs on the GPU when this many times its parameter, input
# and output bytes (activations and the allocator's slack) fit in half the
# free GPU memory; else on the CPU.
FP64_FOOTPRINT = 4


# ---- the fp64 reference ------------------------------------------------------

class Unavailable(Exception):
    """The reference cannot run in fp64; the task's tolerance rule alone decides."""


def _tensor_bytes(xs):
    return sum(t.numel() * t.element_size() for t in compare.leaves(xs) if isinstance(t, torch.Tensor))


def _move(x, device, to64=False):
    """x (a tensor or nested tuple/list) on device; floating tensors cast to
    float64 when to64, integer ones never."""
    if isinstance(x, torch.Tensor):
        x = x.to(device)
        return x.to(torch.float64) if to64 and x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_move(e, device, to64) for e in x)
    return x


def fp64_device(model, inputs, out_bytes, device):
    """Where the fp64 copy runs: the judge's GPU when its estimated footprint
    fits in half the free memory (the driver's, plus what the judge's
    allocator holds unused), else the CPU."""
    if device.type != "cuda":
        return device
    params = sum(p.numel() for p in list(model.parameters()) + list(model.buffers()))
    need = FP64_FOOTPRINT * (8 * params + 2 * _tensor_bytes(inputs) + 2 * out_bytes)
    free, _ = torch.cuda.mem_get_info(device)
    # the judge's own cached blocks (timing.reserve_memory) are free for it
    free += max(0, torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return device if need < free // 2 else torch.device("cpu")


def snapshot(model):
    """A deep copy of the model as it is now, or the text of why it cannot
    be copied (the fp64 rule is then unavailable)."""
    try:
        return copy.deepcopy(model)
    except Exception as e:
        return f"the reference model cannot be copied: {type(e).__name__}: {str(e)[:300]}"


def fp64_model(model, device):
    """A deep copy of the reference model with its floating parameters and
    buffers in float64, on device."""
    m = copy.deepcopy(model)
    return m.to(device=device, dtype=torch.float64)


def fp64_forward(model64, inputs, seed, device, out_device):
    """One eval() forward of the fp64 copy on device, floating inputs cast,
    the others as they are; the output moved to out_device. Raises
    Unavailable when a floating output leaf is not float64 (the model casts
    inside)."""
    model64.train(False)
    with torch.no_grad():
        loader.seed_all(seed)
        out = model64(*[_move(x, device, to64=True) for x in inputs])
    for leaf in compare.leaves(out):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.dtype != torch.float64:
            raise Unavailable(f"the reference returns {leaf.dtype} when run in float64 (it casts inside)")
    return _move(out, out_device)


# The unit roundoff of float32, and the cap on the floor below as a share of
# the output's RMS (a model whose output explodes on |x|, exp for one, must
# not open the budget: at 1e-4 a bf16 kernel's 2^-9 relative error stays out).
FP32_UNIT = 2.0 ** -24
MAGNITUDE_CAP = 1e-4
FLOOR_ATTR = "fp32_floor_rms"


def fp64_magnitude_floor(model64, out64, inputs, seed, device, mag_rms=None):
    """Attaches to each floating leaf of out64 (as the attribute FLOOR_ATTR)
    an error scale no fp32 kernel can be asked to beat: FP32_UNIT times the
    RMS of the fp64 model run on |x| (every floating input made positive),
    capped at MAGNITUDE_CAP times the RMS of the output. For sums and
    products this is the classic rounding-error scale u sum |x_i| of the
    same computation: an output that is a small difference of large terms
    carries errors of that size in any fp32 summation order. The reference's
    own error E can be far below it where PyTorch's kernel is unusually
    accurate (on the H200 its tree reduction of 8192 alternating terms is
    about 10x closer to fp64 than a lane-blocked Triton sum), and a budget of
    K E alone then rejects honest kernels for a plainer summation order.
    bf16 or fp16 arithmetic errs 2^16 or 2^13 times u sum |x_i|, far above K
    times this floor.

    Returns the RMS of the magnitude run per leaf (None where a leaf has
    none). Given mag_rms from an earlier trial, that is used instead of a
    run of its own: the trials' inputs are draws of one distribution, whose
    magnitude RMS differs between draws by a fraction of a percent, and the
    run costs as much as an fp64 forward."""
    a_leaves = list(compare.leaves(out64))
    if mag_rms is None:
        pos = [x.to(device=device, dtype=torch.float64).abs()
               if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        mag = fp64_forward(model64, pos, seed, device, device)
        mag_rms = []
        for a, b in zip(a_leaves, compare.leaves(mag)):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.shape == b.shape and a.numel():
                fb = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
                mag_rms.append(math.sqrt(float((fb * fb).mean())))
            else:
                mag_rms.append(None)
    for a, m in zip(a_leaves, mag_rms):
        if m is not None and isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
            a64 = a.detach().to(dtype=torch.float64)
            fa = torch.where(torch.isfinite(a64), a64, torch.zeros_like(a64))
            out_rms = math.sqrt(float((fa * fa).mean()))
            setattr(a, FLOOR_ATTR, min(FP32_UNIT * m, MAGNITUDE_CAP * out_rms))
    return mag_rms


# ---- the rule ----------------------------------------------------------------

def leaf_scale(ref, ref64):
    """s = max(e_ref, E) elementwise, in float64 on ref's device, and E:
    the RMS of e_ref, or the fp32 floor (fp64_magnitude_floor) where the
    judge measured one and it is larger."""
    s, rms, r64 = _leaf_scale(ref.detach().to(torch.float64), ref64)
    return s, float(rms), r64


def _leaf_scale(r, ref64):
    """leaf_scale on r (the reference in float64) with E left on the device
    as a 0-dim tensor, so the rule reads it with its other figures in one
    go: each read waits for the device, and a device shared with the
    candidate's process and the next job's setup makes every wait cost."""
    floor = float(getattr(ref64, FLOOR_ATTR, 0.0))
    r64 = ref64.detach().to(device=r.device, dtype=torch.float64)
    e_ref = (r - r64).abs()
    finite = torch.isfinite(e_ref)
    e_fin = torch.where(finite, e_ref, torch.zeros_like(e_ref))
    e_rms = torch.sqrt((e_fin * e_fin).sum() / finite.sum().clamp(min=1))
    rms = torch.clamp(e_rms, min=floor) if math.isfinite(floor) else e_rms
    return torch.maximum(e_fin, class_scale(e_fin, r64, rms, e_rms)), rms, r64


# The magnitude classes of class_scale: decades of |ref64|, each pooled
# with its two neighbours (and more above it while thin: _class_windows); a
# class speaks only with BIN_MIN elements in its window.
DECADES = 45
BIN_MIN = 32
BIN_RATIO = 2.0


# Rows of the per-class scatter (_per_class): at least this many elements
# to a row, at most this many rows.
CLASS_ROW_MIN = 256
CLASS_ROWS = 4096


def _per_class(cls, w, v, n_cls):
    """The sum of w and the largest v (v >= 0; 0 for an empty class) per
    class, cls flat. The elements are scattered row by row into a
    [rows, n_cls] table and the rows then reduced: on a GPU the atomics of
    one flat scatter all land on the few addresses of the classes that
    hold most elements and serialise there (31 ms of a 38 ms judgement of
    a 16M-element output on an H100), while a row's land on its own ones
    (under 1 ms). w holds 0/1 weights, so the row sums are exact in any
    order and the figures equal the flat scatter's bit for bit."""
    n = cls.numel()
    rows = max(1, min(CLASS_ROWS, n // CLASS_ROW_MIN))
    per = -(-n // rows)
    pad = rows * per - n
    if pad:  # class 0, weight 0, value 0: changes neither figure
        cls, w, v = (torch.nn.functional.pad(x, (0, pad)) for x in (cls, w, v))
    z = torch.zeros(rows, n_cls, dtype=torch.float64, device=w.device)
    cnt = z.clone().scatter_add_(1, cls.view(rows, per), w.view(rows, per)).sum(0)
    top = z.scatter_reduce_(1, cls.view(rows, per), v.view(rows, per), reduce="amax").amax(0)
    return cnt, top


def _class_windows(cls, w, v, n_cls):
    """Per magnitude class b: the count (sum of the weights w) and the
    largest v over b's window, the classes from b - 1 up to b + 1, and on
    up while fewer than BIN_MIN elements are in it (a thin class of small
    values borrows from the larger ones above, never from smaller ones).
    Vectorised over an n_cls x n_cls mask: no wait for the device."""
    dev = w.device
    cnt, top = _per_class(cls, w, v, n_cls)
    b = torch.arange(n_cls, device=dev).unsqueeze(1)
    c = torch.arange(n_cls, device=dev).unsqueeze(0)
    start = (b - 1).clamp(min=0)
    cum = torch.cat([torch.zeros(1, dtype=torch.float64, device=dev), torch.cumsum(cnt, 0)])
    before_c = cum[c] - cum[start]  # the window's count before class c
    inside = (c >= start) & ((c <= b + 1) | (before_c < BIN_MIN))
    n_b = (cnt.unsqueeze(0) * inside).sum(1)
    max_b = torch.where(inside, top.unsqueeze(0), torch.zeros_like(before_c)).amax(1)
    return n_b, max_b


def class_scale(e_fin, r64, scale, e_rms):
    """The budget's scale per element: the tensor-wide scale E (`scale`,
    the RMS e_rms of e_ref or the fp32 floor) lowered for an element whose
    magnitude class errs far less than the tensor:

        S_b = E min(1, BIN_RATIO max_b / e_rms)

    where max_b is the largest error of the reference among the elements
    whose |ref64| lies within a decade of this one's. Zeros, non-finite
    values and classes of fewer than BIN_MIN elements keep E.

    Why. E is one number per tensor. Where the reference's errors scale
    with the value (exp, anything with a relative error), E is set by the
    largest elements, and an output spanning 1e-7 to 1e6 would let a
    candidate zero every element below 0.1 (tests/unit/test_kg_error_budget.py);
    the class caps that allowance at BIN_RATIO K times the worst error the
    reference itself makes at elements of that size. Where the errors do
    not depend on the value (sums and products of comparable terms: a
    GEMM's errors are as large at its near-zero outputs as at its large
    ones), every class of BIN_MIN or more elements holds an error above
    e_rms / BIN_RATIO (the largest of 32 draws falls below half their RMS
    with probability about 1e-13) and S_b = E: the rule is unchanged. The
    largest error, not the class's RMS, is the statistic: a class of small
    outputs can hold a few elements that are small by cancellation among
    large terms (a row of large values in an output whose rows differ by
    decades), whose errors are the large rows' size; the RMS of a class
    where they are few would fall below them and reject an honest kernel
    that errs at another such element than the reference does. The floor
    (fp64_magnitude_floor) is scaled with E: it stands for the errors that
    sums of this tensor's size carry, and a class that errs far below the
    tensor's errors carries far smaller ones. All on the device, without a
    wait."""
    a = r64.abs()
    cls, placed = _classes(a)
    cls = cls.reshape(-1)
    n_cls = 2 * DECADES + 1
    w = placed.reshape(-1).to(torch.float64)
    e = e_fin.reshape(-1) * w
    n_b, max_b = _class_windows(cls, w, e, n_cls)
    share = torch.clamp(BIN_RATIO * max_b / torch.where(e_rms > 0, e_rms, torch.ones_like(e_rms)), max=1.0)
    share = torch.where((n_b >= BIN_MIN) & (e_rms > 0), share, torch.ones_like(share))
    return scale * torch.where(placed, share[cls].reshape(a.shape), torch.ones_like(a))


def judge_leaf(ref, out, ref64, atol, rtol, k=K):
    """The rule on one floating tensor leaf of equal shape. Returns a dict:
    ok, rule ("tolerance" | "fp64_budget" | "none"), ratio (None without
    ref64), bad (bool tensor of elements meeting neither rule), tol_ratio
    (largest |cand - ref| / (atol + rtol |ref|)), max_rel (largest
    |cand - ref| / |ref|), scale_rms (E), max_abs_diff (largest
    |cand - ref|, equal values counting 0, NaN infinite). Every figure is
    computed on the device and read back at once."""
    r = ref.detach().to(torch.float64)
    o = out.detach().to(device=r.device, dtype=torch.float64)
    res = {"ratio": None, "tol_ratio": 0.0, "max_rel": 0.0, "scale_rms": None, "max_abs_diff": 0.0}
    if r.numel() and not ref.is_floating_point():
        # integers in their own dtype: float64 holds int64 exactly only up
        # to 2^53, and above that values 256 apart (at 2^60) read as equal
        bad = out.detach().to(ref.device) != ref.detach()
        d = (o - r).abs()
        d = torch.where(bad & (d == 0), torch.ones_like(d), torch.where(bad, d, torch.zeros_like(d)))
        n_bad = bool(bad.any())
        res.update(ok=not n_bad, rule="none" if n_bad else "tolerance", bad=bad, max_abs_diff=float(d.max()),
                   tol_ratio=math.inf if n_bad else 0.0)
        return res
    if r.numel() == 0:
        res.update(ok=True, rule="tolerance", bad=torch.zeros_like(r, dtype=torch.bool))
        if ref64 is not None:
            res["ratio"] = 0.0
        return res
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    diff = (o - r).abs()
    tol = atol + rtol * r.abs()
    # An infinite reference allows nothing but itself: inf <= atol + rtol inf
    # would let any finite value through (torch.isclose treats it so too).
    tol_ok = same | ((diff <= tol) & torch.isfinite(r))
    finite = torch.isfinite(diff)
    finite_diff = torch.where(finite, diff, torch.zeros_like(diff))
    figures = [(finite_diff / tol.clamp(min=1e-300)).max(),
               (~finite & ~same).any(),
               (finite_diff / r.abs().clamp(min=1e-30)).max(),
               torch.nan_to_num(torch.where(same, torch.zeros_like(diff), diff), nan=math.inf, posinf=math.inf).max(),
               tol_ok.all()]
    if ref64 is None:
        bad = ~tol_ok
    else:
        s, rms, r64 = _leaf_scale(r, ref64)
        allow = k * s + atol + rtol * r64.abs()
        e_c = (o - r64).abs()
        both_finite = torch.isfinite(r) & torch.isfinite(r64)
        bud_ok = both_finite & (e_c <= allow)  # a NaN error compares false
        bad = ~(tol_ok | bud_ok)
        ratio = torch.where(both_finite, e_c / allow, torch.where(same, torch.zeros_like(e_c),
                                                                   torch.full_like(e_c, math.inf)))
        figures += [torch.nan_to_num(ratio, nan=math.inf, posinf=math.inf).max(), rms]
    figures.append(bad.any())
    values = torch.stack([f.to(torch.float64) for f in figures]).tolist()
    tol_ratio, non_finite, max_rel, max_abs, tol_all = values[:5]
    res.update(tol_ratio=math.inf if non_finite else tol_ratio, max_rel=max_rel, max_abs_diff=max_abs, bad=bad)
    if ref64 is not None:
        res["ratio"], res["scale_rms"] = values[5], values[6]
    if values[-1]:
        res["ok"], res["rule"] = False, "none"
    elif tol_all:
        res["ok"], res["rule"] = True, "tolerance"
    else:
        res["ok"], res["rule"] = True, "fp64_budget"
    return res


RULE_ORDER = {"tolerance": 0, "fp64_budget": 1, "none": 2}


def judge(ref, out, ref64, atol, rtol, k=K):
    """The rule over a whole output (tensor or nested tuple/list). Returns a
    dict: ok, rule, ratio (max over leaves, None without ref64), max_abs_diff
    (against ref), message (why not ok), and for a value mismatch: leaf (its
    index), bad, tol_ratio, max_rel, leaf_ratio. Structure, dtype and shape
    are compare.structure_problem's; Python numbers get the tolerance alone."""
    verdict = {"ok": False, "rule": "none", "ratio": None, "max_abs_diff": None, "message": "", "leaf": None}
    problem = compare.structure_problem(ref, out)
    if problem:
        verdict["message"] = problem
        return verdict
    refs, outs = list(compare.leaves(ref)), list(compare.leaves(out))
    r64s = list(compare.leaves(ref64)) if ref64 is not None else []
    if len(r64s) != len(refs):
        r64s = [None] * len(refs)
    rule, ratio, worst = "tolerance", None, 0.0
    for i, (r, o, r64) in enumerate(zip(refs, outs, r64s)):
        where = f"output {i}" if len(refs) > 1 else "output"
        if not isinstance(r, torch.Tensor):
            ok, d, message = compare.compare(r, o, atol, rtol)
            worst = max(worst, d) if d is not None else worst
            if not ok:
                rule = "none"
                verdict["message"] = verdict["message"] or message.replace("output", where, 1)
            continue
        if r.numel() == 0:
            continue
        if not r.is_floating_point() or (r64 is not None and tuple(r64.shape) != tuple(r.shape)):
            r64 = None
        # Integer and bool outputs (indices, counts, masks) must be exact: a
        # relative tolerance would let an index near 1e4 be off by one.
        a_leaf, r_leaf = (atol, rtol) if r.is_floating_point() else (0.0, 0.0)
        leaf = judge_leaf(r, o, r64, a_leaf, r_leaf, k)
        # Equal values (equal infinities, NaN where the reference has NaN) differ by 0.
        worst = max(worst, leaf["max_abs_diff"])
        if leaf["ratio"] is not None:
            ratio = leaf["ratio"] if ratio is None else max(ratio, leaf["ratio"])
        if RULE_ORDER[leaf["rule"]] > RULE_ORDER[rule]:
            rule = leaf["rule"]
        if not leaf["ok"] and verdict["leaf"] is None:
            od, rd = o.detach().to(torch.float64), r.detach().to(device=o.device, dtype=torch.float64)
            diff = torch.where((od == rd) | (torch.isnan(od) & torch.isnan(rd)), torch.zeros_like(rd), (od - rd).abs())
            n_bad = int(leaf["bad"].sum())
            n_nan = int((torch.isnan(o) & ~torch.isnan(r)).sum()) if o.is_floating_point() else 0
            n_inf = int((torch.isinf(r) & (o != r)).sum()) if r.is_floating_point() else 0
            if n_nan:
                text = f"{where} holds NaN where the reference does not ({n_nan} of {r.numel()} elements)"
            elif n_inf:
                text = (f"{where} differs from the reference where it is infinite ({n_inf} of {r.numel()} "
                        f"elements; {n_bad} wrong in all)")
            else:
                text = (f"{where} differs from the reference: max abs diff {float(diff.max()):.3g}, "
                        f"{n_bad} of {r.numel()} elements outside atol={a_leaf:g} rtol={r_leaf:g}")
                if not r.is_floating_point():
                    text = (f"{where} ({r.dtype}) differs from the reference in {n_bad} of {r.numel()} elements "
                            f"(max abs diff {leaf['max_abs_diff']:.3g}); integer and bool outputs must be exact")
                if leaf["ratio"] is not None:
                    text += f" and outside the fp64 error budget (error ratio {leaf['ratio']:.3g}, K={k:g})"
            verdict.update(leaf=i, bad=leaf["bad"], tol_ratio=leaf["tol_ratio"], max_rel=leaf["max_rel"],
                           leaf_ratio=leaf["ratio"])
            verdict["message"] = verdict["message"] or text
    verdict.update(ok=rule != "none", rule=rule, ratio=ratio, max_abs_diff=worst)
    return verdict


# ---- the allowance of the calls after the trials -----------------------------

def _classes(a):
    """The magnitude class (class_scale's decades, shifted to start at 0) of
    every element of a float64 tensor of absolute values, and where one is
    placed (finite, non-zero)."""
    placed = torch.isfinite(a) & (a > 0)
    safe = torch.where(placed, a, torch.ones_like(a))
    return (torch.floor(torch.log10(safe)).clamp(-DECADES, DECADES) + DECADES).to(torch.long), placed


def sequence_table(ref, ref64):
    """For one floating output leaf of a trial: the largest budget scale s
    (leaf_scale) per magnitude class of |ref64| over its window
    (_class_windows), and in a last entry the largest over the whole
    leaf, which stands for classes of fewer than BIN_MIN elements, zeros
    and values the trials did not reach. A float64 tensor of
    2 DECADES + 2 entries on ref's device."""
    r = ref.detach().to(torch.float64)
    s, _, r64 = _leaf_scale(r, ref64)
    cls, placed = _classes(r64.abs())
    n_cls = 2 * DECADES + 1
    cls, w = cls.reshape(-1), placed.reshape(-1).to(torch.float64)
    n_b, max_b = _class_windows(cls, w, s.reshape(-1) * w, n_cls)
    whole = s.max()
    table = torch.where(n_b >= BIN_MIN, max_b, whole.expand_as(max_b))
    return torch.cat([table, whole.reshape(1)])


def merge_tables(a, b):
    """The tables of two trials as one (the larger entry of each)."""
    return b if a is None else torch.maximum(a, b.to(a.device))


def sequence_allowance(ref, tables, atol, k=K):
    """The atol of every leaf of ref (a later call's reference output) for
    the checks after the trials: atol + 2 (K + 1) T[class of |ref|] per
    element, where T is the leaf's sequence_table merged over the trials
    (or atol where it has none). A candidate accepted by the budget is off
    the reference by up to (K + 1) times the reference's own error at an
    element of like size; the factor 2 is for input sets whose errors run
    larger than the trials'. Per class rather than one widening for the
    whole leaf, for the reason of class_scale: the calls the judge checks
    after the trials must not let the small elements of an output that
    spans many decades go wrong by the large ones' error."""
    out = []
    for leaf, table in zip(compare.leaves(ref), tables):
        if table is None or not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            out.append(atol)
            continue
        cls, placed = _classes(leaf.detach().to(torch.float64).abs())
        t = table.to(leaf.device)
        scale = torch.where(placed, t[:-1][cls], t[-1])
        out.append(atol + 2 * (k + 1) * scale)
    return out


# ---- what a mismatch looks like -------------------------------------------------

def pattern(bad, shape):
    """A guess at the shape of the wrong elements, for the feedback: every
    element, a contiguous tail or block (flat order), the same trailing
    columns of every row, a fixed stride, or scattered."""
    flat = bad.reshape(-1)
    numel = flat.numel()
    idx = torch.nonzero(flat).reshape(-1).cpu()
    n = idx.numel()
    if n == 0:
        return "none"
    if n == numel:
        return "all elements wrong"
    first, last = int(idx[0]), int(idx[-1])
    if last - first + 1 == n:
        if last == numel - 1:
            return f"a contiguous tail: every element from flat index {first} on"
        return f"a contiguous block: flat indices {first} to {last}"
    if len(shape) >= 2 and shape[-1] > 1:
        cols = shape[-1]
        grid = bad.reshape(-1, cols).cpu()
        rows_bad = grid.any(dim=1)
        col_set = grid[rows_bad]
        if bool((col_set == col_set[0]).all()):
            c = torch.nonzero(col_set[0]).reshape(-1)
            c0, c1 = int(c[0]), int(c[-1])
            if c1 - c0 + 1 == c.numel():
                which = "every row" if bool(rows_bad.all()) else f"{int(rows_bad.sum())} rows"
                tail = " (the last partial block?)" if c1 == cols - 1 else ""
                return f"columns {c0} to {c1} of {which}{tail}"
    if n >= 3:
        steps = idx[1:] - idx[:-1]
        if bool((steps == steps[0]).all()):
            return f"strided: every {int(steps[0])}th element from flat index {first}"
    return "scattered"


def _unravel(flat_index, shape):
    out = []
    for d in reversed(shape):
        out.append(flat_index % d if d else 0)
        flat_index = flat_index // d if d else 0
    return list(reversed(out))


def _num(x):
    x = float(x)
    return x if math.isfinite(x) else str(x)


def finite_or_none(x):
    """x for the result JSON, which holds no NaN or infinity: None there."""
    return x if x is None or math.isfinite(x) else None


def mismatch_report(ref, out, ref64, verdict, atol, rtol, k=K, where=None):
    """The result's `mismatch` object for a verdict that failed on values:
    where the first bad element is (multi-dim index) and its three values,
    how many are bad, the largest errors, the ratios and the pattern. None
    when the failure was not about values."""
    i = verdict.get("leaf")
    if i is None:
        return None
    r = list(compare.leaves(ref))[i]
    o = list(compare.leaves(out))[i]
    r64 = list(compare.leaves(ref64))[i] if ref64 is not None else None
    bad = verdict["bad"]
    flat = torch.nonzero(bad.reshape(-1)).reshape(-1)
    first = int(flat[0])
    shape = tuple(r.shape)
    rf = r.detach().reshape(-1).to(torch.float64)
    of = o.detach().reshape(-1).to(device=rf.device, dtype=torch.float64)
    diff = torch.nan_to_num((of - rf).abs(), nan=math.inf, posinf=math.inf)
    m = {
        "output": i,
        "first_index": _unravel(first, shape),
        "candidate": _num(of[first]),
        "reference": _num(rf[first]),
        "fp64": _num(r64.reshape(-1)[first]) if r64 is not None and tuple(r64.shape) == shape else None,
        "n_bad": int(flat.numel()),
        "numel": int(r.numel()),
        "max_abs_diff": _num(diff.max()),
        "max_rel_diff": _num(verdict.get("max_rel", math.nan)),
        "atol": atol,
        "rtol": rtol,
        "max_ratio": _num(verdict.get("tol_ratio", math.nan)),
        "budget_ratio": _num(verdict["leaf_ratio"]) if verdict.get("leaf_ratio") is not None else None,
        "k": k,
        "pattern": pattern(bad, shape),
    }
    if where:
        m.update(where)
    return m


# ---- train() against eval() -------------------------------------------------------

def train_eval_divergence(out_eval, out_train, ref_eval, ref_train, ref64, atol, rtol, k=K):
    """A description of how the candidate's train() and eval() outputs on the
    same inputs differ beyond the allowance, when the reference's do not;
    None otherwise. The allowance is 2 K s + 1e-5 (1 + |ref64|) with the
    budget's scale s; without an fp64 reference, the task's atol/rtol."""
    le, lt = list(compare.leaves(out_eval)), list(compare.leaves(out_train))
    re_, rt = list(compare.leaves(ref_eval)), list(compare.leaves(ref_train))
    r64s = list(compare.leaves(ref64)) if ref64 is not None else [None] * len(re_)
    if not (len(le) == len(lt) == len(re_) == len(rt)) or len(r64s) != len(re_):
        return None
    for i, (oe, ot, r_e, r_t, r64) in enumerate(zip(le, lt, re_, rt, r64s)):
        if not isinstance(r_e, torch.Tensor):
            if oe != ot and r_e == r_t:
                return f"output {i} is {oe!r} in eval() mode and {ot!r} in train() mode"
            continue
        if not (isinstance(oe, torch.Tensor) and isinstance(ot, torch.Tensor) and isinstance(r_t, torch.Tensor)):
            continue
        if oe.shape != r_e.shape or ot.shape != r_e.shape or r_t.shape != r_e.shape or r_e.numel() == 0:
            continue
        if r_e.is_floating_point() and r64 is not None and tuple(r64.shape) == tuple(r_e.shape):
            s, _, r64d = leaf_scale(r_e, r64)
            allow = 2 * k * s + TRAIN_EVAL_TOL * (1 + r64d.abs())
        else:
            allow = atol + rtol * r_e.detach().to(torch.float64).abs()
        ref_d = (r_t.detach().to(torch.float64) - r_e.detach().to(torch.float64)).abs()
        if bool((torch.nan_to_num(ref_d, nan=math.inf, posinf=math.inf) > allow).any()):
            continue  # the reference itself depends on the mode
        d = (ot.detach().to(torch.float64) - oe.detach().to(device=ot.device, dtype=torch.float64)).abs()
        same = (ot == oe) | (torch.isnan(ot) & torch.isnan(oe)) if ot.is_floating_point() else (ot == oe)
        over = ~same.to(allow.device) & ~(d.to(allow.device) <= allow)
        if bool(over.any()):
            n = int(over.sum())
            first = int(torch.nonzero(over.reshape(-1))[0])
            dmax = float(torch.nan_to_num(d, nan=math.inf, posinf=math.inf).max())
            where = f"output {i} " if len(le) > 1 else ""
            return (f"{where}differs between train() and eval() mode on the same inputs in {n} of "
                    f"{r_e.numel()} elements (first at index {_unravel(first, tuple(r_e.shape))}, "
                    f"largest difference {dmax:.3g}) where the reference's does not")
    return None


def prewarm(device):
    """The judge's rule once on a small stand-in output (a float32 copy of a
    float64 reference spanning several decades, off by its rounding), with
    the sequence's table and allowance and the train/eval check: CUDA loads
    a kernel's module at its first launch, and the rule launches dozens of
    kernels a fresh process has not loaded. For a judge made ahead of its
    job, while the job before runs; best effort."""
    if device.type != "cuda":
        return
    try:
        r64 = torch.linspace(-3.0, 3.0, 4096, device=device, dtype=torch.float64).exp()
        ref = r64.to(torch.float32)
        out = ref * (1.0 + 1e-7)
        judge(ref, out, r64, 1e-5, 1e-5)
        judge(ref, out, None, 1e-5, 1e-5)
        sequence_allowance(ref, [sequence_table(ref, r64)], 1e-5)
        train_eval_divergence(out, ref, ref, ref, r64, 1e-5, 1e-5)
        torch.cuda.synchronize(device)
    except Exception:  # the job meets the same problem and reports it
        pass
