"""make_ppo_fixtures.py: the PPO objective of rl/ppo.c re-implemented in
PyTorch, with autograd for its gradients, on random packed batches; writes
tests/fixtures/ppo/cases.json for tests/unit/test_ppo.c.

One case per aggregation mode x option combination (dual clip, reference KL,
entropy bonus, truncated importance sampling, rollout-mismatch rejection),
plus, per mode, a case with a mini-batch denominator, one without any
optional input and one for each rejection rule alone. Inputs are float32 values (stored with a round-tripping repr); the
reference computes in float64 from them. Each batch has prompt and feedback
tokens masked out, a sequence with no model-written token, and rollout
logprobs whose mismatch is tiny, moderate, systematic, catastrophic on one
token, or large, so every rejection rule and the TIS cap fire somewhere.

Run: .venv/bin/python tests/make_ppo_fixtures.py
"""

import itertools
import json
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ppo")
AGGS = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]


def f32(a):
    """float32 values as the shortest decimal that reads back to the same float32."""
    return [float(f"{v:.9g}") for v in np.asarray(a, dtype=np.float32).reshape(-1).tolist()]


def short(x):
    """Expected values: 13 significant digits, far below the test's 1e-6."""
    if isinstance(x, list):
        return [short(v) for v in x]
    return float(f"{x:.13g}") if isinstance(x, float) else x


KINDS = ["tiny", "moderate", "veto", "systematic", "large", "tiny", "empty"]


def make_batch(rng):
    lens = [int(rng.integers(6, 15)) for _ in KINDS]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    T = int(cu[-1])
    mask = np.zeros(T, dtype=np.int64)
    for s, n in enumerate(lens):
        if KINDS[s] == "empty":
            continue  # a sequence with nothing the model wrote
        p = int(rng.integers(1, 3))  # prompt
        f0 = int(rng.integers(p + 1, n - 1))  # a feedback span inside
        f1 = min(n, f0 + int(rng.integers(1, 3)))
        mask[cu[s] + p : cu[s] + n] = 1
        mask[cu[s] + f0 : cu[s] + f1] = 0
    logp_old = -np.abs(rng.normal(0, 1.5, T)) - 0.01
    # Mostly small policy changes, some large ones so that the dual clip
    # (ratio > 3 with a negative advantage) is reached too.
    logp = logp_old + np.where(rng.random(T) < 0.2, rng.normal(0, 1.5, T), rng.normal(0, 0.3, T))
    adv = rng.normal(0, 1, T)
    adv[rng.random(T) < 0.1] = 0.0
    logp_ref = logp_old + rng.normal(0, 0.2, T)
    entropy = np.abs(rng.normal(1.0, 0.5, T))
    logp_roll = logp_old.copy()  # rollout-vs-trainer mismatch, per sequence kind
    for s, kind in enumerate(KINDS):
        a, b = cu[s], cu[s + 1]
        n = b - a
        if kind in ("tiny", "empty"):
            logp_roll[a:b] -= rng.normal(0, 1e-4, n)
        elif kind == "moderate":
            logp_roll[a:b] -= rng.normal(0, 3e-3, n)
        elif kind == "veto":
            logp_roll[a:b] -= rng.normal(0, 1e-4, n)
            on = np.nonzero(mask[a:b])[0]
            logp_roll[a + on[len(on) // 2]] = logp_old[a + on[len(on) // 2]] + 12.0
        elif kind == "systematic":
            logp_roll[a:b] -= 0.0015 + rng.normal(0, 2e-4, n)
        else:
            logp_roll[a:b] -= rng.normal(0, 1.0, n)
    return dict(cu_seqlens=cu, mask=mask, logp=logp, logp_old=logp_old, adv=adv,
                logp_ref=logp_ref, entropy=entropy, logp_rollout=logp_roll)


def reference(cfg, b, denom):
    d = lambda k: torch.tensor(np.asarray(b[k], dtype=np.float32), dtype=torch.float64)
    lp = d("logp").requires_grad_(True)
    old, A = d("logp_old"), d("adv")
    H = d("entropy").requires_grad_(True) if "entropy" in b else None
    mask = torch.tensor(b["mask"], dtype=torch.bool)
    cu = [int(v) for v in b["cu_seqlens"]]
    S_all = len(cu) - 1
    seq = torch.repeat_interleave(torch.arange(S_all), torch.tensor(np.diff(cu)))

    keep = mask.clone()
    roll = d("logp_rollout") if "logp_rollout" in b else None
    if roll is not None:
        log_rho = old - roll
        rho = torch.exp(log_rho)
        if cfg["rs_token_band"] > 0:
            keep &= (rho - 1).abs() <= cfg["rs_token_band"]
        for s in range(S_all):
            m = mask[cu[s] : cu[s + 1]]
            if not m.any():
                continue
            lr = log_rho[cu[s] : cu[s + 1]][m]
            drop = False
            if cfg["rs_veto"] > 0 and (torch.exp(lr) < cfg["rs_veto"]).any():
                drop = True
            if cfg["rs_seq_band"] > 0 and abs(torch.exp(lr.mean()).item() - 1) > cfg["rs_seq_band"]:
                drop = True
            if drop:
                keep[cu[s] : cu[s + 1]] = False
    kf = keep.double()

    ratio = torch.exp(lp - old)
    pg1 = -A * ratio
    pg2 = -A * torch.clamp(ratio, 1 - cfg["clip_low"], 1 + cfg["clip_high"])
    pg = torch.maximum(pg1, pg2)
    if cfg["dual_clip"] > 0:
        pg = torch.where(A < 0, torch.minimum(pg, -A * cfg["dual_clip"]), pg)
    w_tis = torch.ones_like(old)
    if cfg["tis_cap"] > 0:
        w_tis = torch.clamp(torch.exp(old - roll), max=cfg["tis_cap"])
    loss_t = w_tis * pg
    k3 = None
    if "logp_ref" in b:
        dd = d("logp_ref") - lp
        k3 = torch.exp(dd) - dd - 1
        loss_t = loss_t + cfg["kl_coef"] * k3
    if H is not None:
        loss_t = loss_t - cfg["entropy_coef"] * H

    n_s = torch.zeros(S_all, dtype=torch.float64).index_add(0, seq, kf)
    N, S = kf.sum().item(), (n_s > 0).sum().item()
    if cfg["agg"] == "token-mean":
        D = denom if denom > 0 else N
        wt = kf / D if D > 0 else kf * 0
    else:
        D = denom if denom > 0 else S
        wt = kf / D if D > 0 else kf * 0
        if cfg["agg"] == "seq-mean-token-mean":
            wt = wt / torch.clamp(n_s[seq], min=1)
    agg = lambda x: (wt * x).sum()
    loss = agg(loss_t)
    loss.backward()

    cnt = lambda x: (x & keep).double().sum().item() / N if N > 0 else 0.0
    kmean = lambda x: (x * kf).sum().item() / N if N > 0 else 0.0
    st = dict(
        loss=loss.item(),
        pg_loss=agg(w_tis * pg).item(),
        kl_loss=cfg["kl_coef"] * agg(k3).item() if k3 is not None else 0.0,
        entropy=agg(H).item() if H is not None else 0.0,
        clip_frac_low=cnt((A < 0) & (ratio < 1 - cfg["clip_low"])),
        clip_frac_high=cnt((A > 0) & (ratio > 1 + cfg["clip_high"])),
        clip_frac_dual=cnt((A < 0) & (-A * cfg["dual_clip"] < torch.maximum(pg1, pg2))) if cfg["dual_clip"] > 0 else 0.0,
        approx_kl=kmean(ratio - 1 - torch.log(ratio)),
        ratio_mean=kmean(ratio),
        ratio_max=ratio[keep].max().item() if N > 0 else 0.0,
        ref_kl=kmean(k3) if k3 is not None else 0.0,
        tis_mean=kmean(w_tis),
        tis_capped_frac=cnt(torch.exp(old - roll) > cfg["tis_cap"]) if cfg["tis_cap"] > 0 else 0.0,
        n_tokens=int(N),
        n_seqs=int(S),
        n_tokens_rejected=int(mask.sum().item() - N),
        n_seqs_rejected=sum(1 for s in range(S_all) if mask[cu[s] : cu[s + 1]].any() and not keep[cu[s] : cu[s + 1]].any()),
    )
    if roll is not None:
        mm = (old - roll).abs()[mask]
        st.update(mismatch_mean=mm.mean().item(), mismatch_max=mm.max().item())
    else:
        st.update(mismatch_mean=0.0, mismatch_max=0.0)
    st["dlogprob"] = lp.grad.tolist()
    st["dentropy"] = H.grad.tolist() if H is not None else None
    return st


def make_case(name, rng, agg, dual, kl, ent, tis, rej, denom=0.0, minimal=False):
    """rej: 1 = all three rejection rules, or one of "token", "seq", "veto"."""
    on = lambda rule: rej == 1 or rej == rule
    cfg = dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0 if dual else 0.0, agg=agg,
               kl_coef=0.05 if kl else 0.0, entropy_coef=0.01 if ent else 0.0,
               tis_cap=2.0 if tis else 0.0, rs_token_band=0.002 if on("token") else 0.0,
               rs_seq_band=0.001 if on("seq") else 0.0, rs_veto=1e-4 if on("veto") else 0.0)
    full = make_batch(rng)
    b = {k: full[k] for k in ("cu_seqlens", "mask", "logp", "logp_old", "adv")}
    if not minimal:
        b["entropy"] = full["entropy"]
        b["logp_rollout"] = full["logp_rollout"]
        if kl:
            b["logp_ref"] = full["logp_ref"]
    exp = reference(cfg, b, denom)
    case = dict(name=name, config=cfg, denom=denom)
    for k, v in b.items():
        case[k] = [int(x) for x in v] if k in ("cu_seqlens", "mask") else f32(v)
    case["expect"] = {k: short(v) for k, v in exp.items()}
    return case


def main():
    rng = np.random.default_rng(20240607)
    cases = []
    for agg, dual, kl, ent, tis, rej in itertools.product(AGGS, *[(0, 1)] * 5):
        opts = [n for n, on in zip(("dual", "kl", "ent", "tis", "rej"), (dual, kl, ent, tis, rej)) if on]
        cases.append(make_case(f"{agg}+{'+'.join(opts) or 'plain'}", rng, agg, dual, kl, ent, tis, rej))
    for agg in AGGS:
        cases.append(make_case(f"{agg}+denom", rng, agg, 1, 1, 1, 1, 1, denom=7.5))
        cases.append(make_case(f"{agg}+minimal", rng, agg, 1, 0, 0, 0, 0, minimal=True))
        for rule in ("token", "seq", "veto"):  # each rejection rule alone
            cases.append(make_case(f"{agg}+rej-{rule}", rng, agg, 1, 0, 0, 0, rule))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(dict(generator=f"tests/make_ppo_fixtures.py (torch {torch.__version__})", cases=cases), f)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}/cases.json")


if __name__ == "__main__":
    main()
