"""Run by tests/mpi/test_ckpt_reshard.sh: the HF files that the ranks of a
sharded checkpoint wrote in parallel, seen from the reference implementations.
safetensors reads every tensor of every file the index names, and
transformers' AutoModelForCausalLM.from_pretrained loads the directory with
no missing or unexpected keys; both must equal, tensor by tensor and bit for
bit, what one process wrote with weights_save_hf (SINGLE_DIR).

usage: check_sharded_hf.py SHARDED_DIR SINGLE_DIR"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def tensors(d):
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for f in sorted(set(index["weight_map"].values())):
        with safe_open(os.path.join(d, f), framework="pt") as h:
            for k in h.keys():
                assert index["weight_map"][k] == f, f"{d}: {k} is in {f}, the index says {index['weight_map'][k]}"
                out[k] = h.get_tensor(k)
    assert set(out) == set(index["weight_map"]), f"{d}: the files hold {sorted(out)}, the index names {sorted(index['weight_map'])}"
    return out


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


sharded, single = sys.argv[1], sys.argv[2]
got, want = tensors(sharded), tensors(single)
assert set(got) == set(want), f"tensor names differ: {sorted(set(got) ^ set(want))}"
bad = [k for k in want if not same_bits(got[k], want[k])]
assert not bad, f"{len(bad)} tensors differ from the single writer's: {bad[:5]}"
assert all(t.dtype == torch.bfloat16 for t in got.values())

models = []
for d in (sharded, single):
    m, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], f"{d}: loading info {info}"
    models.append(m.state_dict())
bad = [k for k in models[1] if not same_bits(models[0][k], models[1][k])]
assert set(models[0]) == set(models[1]) and not bad, f"from_pretrained parameters differ: {bad[:5]}"
print(f"{sharded}: {len(got)} tensors in {len(set(json.load(open(os.path.join(sharded, 'model.safetensors.index.json')))['weight_map'].values()))} files, "
      f"bit-identical to the single writer through safetensors and from_pretrained ({len(models[0])} parameters)")
