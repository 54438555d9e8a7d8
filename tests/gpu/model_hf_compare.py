"""model_hf_compare.py: the transformers side of tests/gpu/test_model_hf_cuda.sh.

  model_hf_compare.py make WORK [--tiny]
      A random-init Qwen3-0.6B-shaped model (Qwen3ForCausalLM(config), fp32,
      seed fixed; HF's own initialisation, norm weights then spread over
      [0.75, 1.25] so a misplaced norm weight shows) rounded to bf16 and saved
      with save_pretrained in bf16 to WORK/model, and one packed batch of three
      random sequences (512 tokens; the first 16 targets masked like a prompt,
      none after a sequence's last token) to WORK/batch.safetensors. --tiny: a
      2-layer model of the same structure and 32 tokens.

  model_hf_compare.py compare WORK [--device cuda|cpu] [--expect bf16|fp32]
      Runs the same forward and backward of loss = -mean(logprob of the target)
      in transformers (sdpa attention, each sequence on its own with positions
      from 0: what a packed batch with cu_seqlens means) from the saved bf16
      weights, once in fp32 (the reference; TF32 off) and once in bf16 as
      from_pretrained(dtype=bfloat16) gives it, and compares both, and ours
      (WORK/ours.safetensors from model_hf_dump), with the fp32 reference:
      logits (max abs and max abs / max|ref|), per-token logprob and entropy
      (max abs over the targets), loss, and for every parameter the gradient's
      relative error max|a - b| / max|b| and cosine similarity.

      --expect bf16 (our CUDA backend): each of our errors must be at most
      2 x HF-bf16's error + a floor, for when HF-bf16's error is small by
      chance: logits 2 bf16 roundings (2^-7) of max|logits|; logprob 0.02;
      entropy 0.01; loss the logprob limit / sqrt(targets) (the mean of that
      many per-token errors of independent sign); gradients 0.02 relative,
      and every gradient's cosine >= 0.99. Both sides keep bf16 weights and
      activations; ours accumulates parameter gradients in fp32 where HF-bf16
      keeps bf16 gradients, so twice HF's error leaves room for different
      summation orders, not for a wrong formula (O(1) errors). Measured at
      this shape (HF bf16 vs fp32, on the CPU): logits 0.057 (max|logits|
      3.5), logprob 0.031, entropy 3e-4, loss 6e-5, gradients 0.011 .. 0.055
      relative with cosine >= 0.9994.
      --expect fp32 (our CPU backend): ours must match the fp32 reference to
      fp32 accuracy: logits 1e-4 absolute, loss 1e-5, gradients 1e-3 relative.

Exit 0 when every check holds, 1 otherwise."""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
import transformers  # noqa: E402

transformers.logging.disable_progress_bar()

BF16_U = 2.0 ** -8  # bf16 unit roundoff

QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128)
TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32)


def make(work, tiny):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**(TINY if tiny else QWEN3_0_6B), max_position_embeddings=40960, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(1234)
    model = Qwen3ForCausalLM(cfg).float()
    gen = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.75 + 0.5 * torch.rand(p.shape, generator=gen))
    model.to(torch.bfloat16).save_pretrained(os.path.join(work, "model"), safe_serialization=True)

    lens = [13, 7, 12] if tiny else [200, 137, 175]
    n_prompt = 3 if tiny else 16
    tokens, targets, cu = [], [], [0]
    for s, n in enumerate(lens):
        seq = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()
        tgt = seq[1:] + [-1]
        if s == 0:
            tgt[:n_prompt] = [-1] * n_prompt
        tokens += seq
        targets += tgt
        cu.append(cu[-1] + n)
    f32 = lambda xs: torch.tensor(xs, dtype=torch.float32)  # ids < 2^24 are exact
    save_file({"tokens": f32(tokens), "cu_seqlens": f32(cu), "targets": f32(targets)},
              os.path.join(work, "batch.safetensors"), metadata={"format": "pt"})
    n_params = sum(p.numel() for p in model.parameters())
    print(f"made {'tiny' if tiny else 'Qwen3-0.6B-shaped'} model ({n_params / 1e6:.1f}M parameters, bf16) and a "
          f"batch of {len(tokens)} tokens in {len(lens)} sequences, {sum(t >= 0 for t in targets)} targets")


def hf_run(model_dir, dtype, dev, batch):
    """Logits [T, V] (fp32 copy), logprob and entropy [T], loss, and every
    parameter's gradient (fp32 copy) of -mean(logprob) over the targets."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(dev)
    model.train()  # dropout is 0; train mode as in a training step
    tokens, targets, cu = batch["tokens"], batch["targets"], batch["cu"]
    n_valid = int((targets >= 0).sum())
    logits, logprob, entropy = [], [], []
    total = 0.0
    for s in range(len(cu) - 1):
        a, b = cu[s], cu[s + 1]
        z = model(input_ids=tokens[a:b].unsqueeze(0), use_cache=False).logits[0]
        lp = torch.log_softmax(z.float(), dim=-1)  # what HF's causal LM loss does: upcast the logits
        tgt = targets[a:b]
        valid = tgt >= 0
        tok_lp = lp.gather(1, tgt.clamp(min=0).unsqueeze(1)).squeeze(1) * valid
        total = total - tok_lp.sum()
        logits.append(z.detach().float())
        logprob.append(tok_lp.detach())
        entropy.append(-(lp.exp() * lp).sum(-1).detach())
    loss = total / n_valid
    loss.backward()
    grads = {name: p.grad.detach().float() for name, p in model.named_parameters()}
    out = dict(logits=torch.cat(logits), logprob=torch.cat(logprob), entropy=torch.cat(entropy),
               loss=float(loss.detach()), grads=grads)
    del model
    return out


def max_abs(a, b, mask=None):
    d = (a.double() - b.double()).abs()
    if mask is not None:
        d = d[mask]
    return float(d.max()) if d.numel() else 0.0


def grad_stats(a, b):
    """(relative error max|a-b| / max|b|, cosine similarity), in float64."""
    a, b = a.double().flatten(), b.double().flatten()
    bmax = float(b.abs().max())
    rel = float((a - b).abs().max()) / bmax if bmax > 0 else float((a - b).abs().max())
    na, nb = float(a.norm()), float(b.norm())
    cos = float((a @ b) / (na * nb)) if na > 0 and nb > 0 else (1.0 if na == nb else 0.0)
    return rel, cos


def kind_of(name):
    """model.layers.7.self_attn.q_proj.weight -> self_attn.q_proj (pooled over layers)."""
    parts = name.split(".")
    if parts[:2] == ["model", "layers"]:
        return ".".join(parts[3:-1])
    return ".".join(parts[:-1])


def compare(work, dev, expect):
    t0 = time.time()
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    b = load_file(os.path.join(work, "batch.safetensors"))
    batch = dict(tokens=b["tokens"].long().to(dev), targets=b["targets"].long().to(dev),
                 cu=[int(x) for x in b["cu_seqlens"].tolist()])
    mask = batch["targets"] >= 0
    model_dir = os.path.join(work, "model")
    ref = hf_run(model_dir, torch.float32, dev, batch)
    hfb = hf_run(model_dir, torch.bfloat16, dev, batch)
    ours_raw = load_file(os.path.join(work, "ours.safetensors"), device=dev)
    T, V = ours_raw["logits"].shape
    print(f"T={T} in {len(batch['cu']) - 1} sequences, {int(mask.sum())} targets, V={V}; HF fp32 and bf16 ran in "
          f"{time.time() - t0:.1f} s; loss: fp32 {ref['loss']:.6f}, HF bf16 {hfb['loss']:.6f}, "
          f"ours {float(ours_raw['loss'][0]):.6f}")

    failures = []

    def limit(hf_err, floor):
        return 2.0 * hf_err + floor

    # ---- forward -------------------------------------------------------------------
    lmax = float(ref["logits"].abs().max())
    n_valid = int(mask.sum())
    e_lp = (max_abs(ours_raw["logprob"], ref["logprob"], mask), max_abs(hfb["logprob"], ref["logprob"], mask))
    lp_limit = limit(e_lp[1], 0.02)
    fwd = [  # name, ours error, HF-bf16 error, bf16 floor, fp32 bound
        ("logits max|d|", max_abs(ours_raw["logits"], ref["logits"]), max_abs(hfb["logits"], ref["logits"]),
         2 * BF16_U * lmax, 1e-4),
        ("logprob max|d| (targets)", e_lp[0], e_lp[1], 0.02, 1e-4),
        ("entropy max|d|", max_abs(ours_raw["entropy"], ref["entropy"]), max_abs(hfb["entropy"], ref["entropy"]),
         0.01, 1e-4),
        ("loss |d|", abs(float(ours_raw["loss"][0]) - ref["loss"]), abs(hfb["loss"] - ref["loss"]),
         lp_limit / math.sqrt(n_valid), 1e-5),
    ]
    print(f"\n{'forward vs HF fp32':<28} {'ours':>10} {'HF bf16':>10} {'limit':>10}  (max|logits fp32| = {lmax:.3f})")
    for name, eo, eh, floor, f32b in fwd:
        lim = limit(eh, floor) if expect == "bf16" else f32b
        ok = eo <= lim
        print(f"{name:<28} {eo:10.3g} {eh:10.3g} {lim:10.3g}  {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"{name}: ours {eo:.3g} > limit {lim:.3g}")
    lrel_o = max_abs(ours_raw["logits"], ref["logits"]) / lmax
    lrel_h = max_abs(hfb["logits"], ref["logits"]) / lmax
    print(f"{'logits max|d| / max|ref|':<28} {lrel_o:10.3g} {lrel_h:10.3g}")

    # ---- gradients -----------------------------------------------------------------
    rows = []
    names = set(ref["grads"])
    ours_g = {k[5:]: v for k, v in ours_raw.items() if k.startswith("grad.")}
    for extra in sorted(set(ours_g) - names):
        failures.append(f"ours has gradient {extra}, HF has no such parameter")
    rel_floor = 0.02 if expect == "bf16" else 0.0
    for name in sorted(names):
        r = ref["grads"][name]
        if name not in ours_g or tuple(ours_g[name].shape) != tuple(r.shape):
            failures.append(f"gradient {name} {tuple(r.shape)}: ours has "
                            f"{tuple(ours_g[name].shape) if name in ours_g else 'none'}")
            continue
        ro, co = grad_stats(ours_g[name], r)
        rh, ch = grad_stats(hfb["grads"][name], r)
        lim = limit(rh, rel_floor) if expect == "bf16" else 1e-3
        cmin = 0.99 if expect == "bf16" else 0.99999
        ok = ro <= lim and co >= cmin and math.isfinite(ro)
        rows.append((name, ro, co, rh, ch, lim, ok))
        if not ok:
            failures.append(f"gradient {name}: rel {ro:.3g} (limit {lim:.3g}), cos {co:.6f} (min {cmin})")

    kinds = {}
    for row in rows:
        kinds.setdefault(kind_of(row[0]), []).append(row)
    print(f"\n{'gradients vs HF fp32':<34} {'n':>3} {'ours rel':>9} {'HF rel':>9} {'ours cos':>10} {'HF cos':>10}"
          f"   (worst over the tensors of a kind)")
    for k, rs in kinds.items():
        print(f"{k:<34} {len(rs):3d} {max(x[1] for x in rs):9.3g} {max(x[3] for x in rs):9.3g} "
              f"{min(x[2] for x in rs):10.6f} {min(x[4] for x in rs):10.6f}")
    worst = sorted(rows, key=lambda x: x[1] / x[5] if x[5] > 0 else 0.0, reverse=True)[:6]
    print(f"\nclosest to the limit ({'2 x HF bf16 rel + 0.02' if expect == 'bf16' else 'fp32: rel <= 1e-3'}):")
    for name, ro, co, rh, ch, lim, ok in worst:
        print(f"  {name:<48} ours rel {ro:.3g} cos {co:.6f} | HF bf16 rel {rh:.3g} cos {ch:.6f} | limit {lim:.3g}"
              f"{'' if ok else '  FAIL'}")
    print(f"{len(rows)} gradients compared ({sum(r.numel() for r in ref['grads'].values()) / 1e6:.1f}M values); "
          f"compare took {time.time() - t0:.1f} s")

    if failures:
        print(f"\n{len(failures)} check(s) failed:")
        for f in failures[:20]:
            print("  FAIL " + f)
        return 1
    print(f"\nall checks passed (expect {expect})")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["make", "compare"])
    ap.add_argument("work")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--expect", default="bf16", choices=["bf16", "fp32"])
    args = ap.parse_args()
    if args.cmd == "make":
        make(args.work, args.tiny)
        return 0
    return compare(args.work, args.device, args.expect)


if __name__ == "__main__":
    sys.exit(main())
