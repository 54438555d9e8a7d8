"""make_lmhead_fixtures.py: PyTorch references for the CPU fused lm head
(kernels/lmhead_cpu.c), written to tests/fixtures/lmhead/ and read by
tests/unit/test_lmhead_cpu.c.

Each case is one .safetensors file holding the fp32 inputs (h, W, target,
inv_temp, and the loss weights a, b) and the expected outputs computed in
float64 from the full logits z = (h W^T) * inv_temp with log_softmax:
  logprob[t] = log_softmax(z)[target]  (0 where target < 0)
  entropy[t] = -sum softmax(z) log_softmax(z),  lse[t] = logsumexp(z)
and torch autograd gradients of
  loss    = sum over unmasked t of a_t logprob_t + b_t entropy_t -> dh, dW
  loss_lp = sum over unmasked t of a_t logprob_t                  -> dh_lp, dW_lp
Masked tokens (target < 0) take no part in either loss: the op gives them no
gradient at all. V is prime so no chunk size but 1 and V divides it.

Run: .venv/bin/python tests/make_lmhead_fixtures.py
"""

import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "lmhead")

# name, T, C, V, inv_temp, weight scale (large -> peaked, large logits)
CASES = [
    ("t13_c24_v61", 13, 24, 61, 1.0 / 0.7, 0.3),
    ("peaked", 9, 16, 53, 1.25, 4.0),
    ("t70_c8_v29", 70, 8, 29, 0.8, 0.5),  # more tokens than the op's 64-token forward block
]


def make_case(gen, name, T, C, V, inv_temp, wscale):
    h = torch.randn(T, C, generator=gen)
    W = torch.randn(V, C, generator=gen) * wscale
    target = torch.randint(0, V, (T,), generator=gen, dtype=torch.int32)
    target[1] = -1
    target[T - 2] = -1
    a = torch.randn(T, generator=gen)
    b = torch.randn(T, generator=gen)
    live = (target >= 0).double()

    def forward(hd, Wd):
        z = (hd @ Wd.T) * inv_temp
        logp = torch.log_softmax(z, dim=-1)
        lp = logp.gather(1, target.clamp(min=0).long()[:, None])[:, 0] * live
        ent = -(logp.exp() * logp).sum(-1)
        return lp, ent, torch.logsumexp(z, dim=-1)

    hd = h.double().requires_grad_(True)
    Wd = W.double().requires_grad_(True)
    lp, ent, lse = forward(hd, Wd)
    ((a.double() * lp + b.double() * ent) * live).sum().backward()
    dh, dW = hd.grad.clone(), Wd.grad.clone()
    hd.grad, Wd.grad = None, None
    lp2, _, _ = forward(hd, Wd)
    (a.double() * lp2 * live).sum().backward()

    tensors = {
        "h": h, "W": W, "target": target, "a": a, "b": b,
        "inv_temp": torch.tensor([inv_temp], dtype=torch.float32),
        "logprob": lp.detach().float(), "entropy": ent.detach().float(), "lse": lse.detach().float(),
        "dh": dh.float(), "dW": dW.float(), "dh_lp": hd.grad.float(), "dW_lp": Wd.grad.float(),
    }
    path = os.path.join(OUT_DIR, name + ".safetensors")
    save_file({n: t.contiguous() for n, t in tensors.items()}, path)
    z = (h.double() @ W.double().T) * inv_temp
    print(f"{path}: T={T} C={C} V={V} inv_temp={inv_temp:.4f} |z|max={z.abs().max():.1f} "
          f"entropy {ent.min():.2e}..{ent.max():.2e}")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    gen = torch.Generator().manual_seed(4321)
    for case in CASES:
        make_case(gen, *case)


if __name__ == "__main__":
    main()
