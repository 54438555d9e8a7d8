#!/usr/bin/env bash
# test_config_hf_roundtrip.sh: the config.json files that model_config_to_hf
# writes load in Hugging Face transformers (AutoConfig, then
# AutoModelForCausalLM on the meta device) and mean what we meant: for every
# fixture of tests/fixtures/config/ and for the model of every shipped
# configs/*.ini, transformers' reading (head size, biases, q/k norm, tied head,
# token ids, parameter count, ...) must equal ours field by field.
set -euo pipefail
build="${DK_BUILD:-build}"
py="${DK_PYTHON:-.venv/bin/python}"
bin="$build/tests/unit_test_hf_config"
[ -x "$bin" ] || bin="$build/unit_test_hf_config"
[ -x "$bin" ] || { echo "missing $build/tests/unit_test_hf_config"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" --export "$tmp"
"$py" - "$tmp" <<'PY'
import json, logging, os, sys, warnings
import torch
from transformers import AutoConfig, AutoModelForCausalLM

root = sys.argv[1]

class Complaints(logging.Handler):
    """Collects transformers' log warnings: a field it misreads shows up there."""
    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []
    def emit(self, record):
        self.seen.append(record.getMessage())

complaints = Complaints()
logging.getLogger("transformers").addHandler(complaints)

def first(x):
    if isinstance(x, (list, tuple)):
        return x[0] if x else -1
    return -1 if x is None else x

def describe(d):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a field transformers does not understand is a failure
        cfg = AutoConfig.from_pretrained(d)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    attn = model.model.layers[0].self_attn
    rope = getattr(cfg, "rope_parameters", None) or {}
    assert cfg.dtype == torch.bfloat16, cfg.dtype
    return {
        "arch": cfg.model_type, "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "n_layers": cfg.num_hidden_layers,
        "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads, "head_dim": attn.head_dim,
        "max_position": cfg.max_position_embeddings,
        "rope_theta": float(rope.get("rope_theta", getattr(cfg, "rope_theta", 0.0))),
        "rms_eps": float(cfg.rms_norm_eps),
        "tie_embeddings": int(model.lm_head.weight is model.model.embed_tokens.weight),
        "qkv_bias": int(attn.q_proj.bias is not None), "o_bias": int(attn.o_proj.bias is not None),
        "qk_norm": int(hasattr(attn, "q_norm")),
        "bos_token_id": first(cfg.bos_token_id), "eos_token_id": first(cfg.eos_token_id),
        "n_params": sum(p.numel() for p in model.parameters()),
    }

bad = 0
names = sorted(os.listdir(root))
for name in names:
    d = os.path.join(root, name)
    ours = json.load(open(os.path.join(d, "dk.json")))
    theirs = describe(d)
    diffs = [f"transformers warned: {m}" for m in complaints.seen]
    complaints.seen.clear()
    for k, v in ours.items():
        t = theirs[k]
        same = abs(t - v) <= 1e-6 * abs(v) if isinstance(v, float) and not isinstance(t, str) else t == v
        if not same:
            diffs.append(f"{k}: ours {v}, transformers {t}")
    bad += bool(diffs)
    print(f"{'FAIL' if diffs else 'ok  '} {name:16s} {theirs['arch']:5s} params {theirs['n_params']:>14,d}"
          + ("".join("\n     " + x for x in diffs)))
print(f"{len(names)} config.json files loaded by transformers, {bad} with differences")
sys.exit(1 if bad or len(names) < 10 else 0)
PY
