#!/usr/bin/env bash
# End to end on a GPU: the tiny model trained by SFT on the GPU, then 3 RL
# steps of 2 turns whose answers a private KernelGym fleet evaluates with real
# Triton on the GPU; every metric present; then the run resumed from its
# step-2 checkpoint redoes step 3 with the same rewards. Skips (77) without
# a GPU.
set -eu
train="${DK_BUILD:-build}/train"
py="${DK_PYTHON:-python3}"
. "$(dirname "$0")/need_gpu.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$train" configs/tiny-sft.ini run.device=cuda run.dir="$tmp/sft" > "$tmp/sft.log" || { tail -20 "$tmp/sft.log"; exit 1; }
ck=$(ls -d "$tmp"/sft/ckpt/step_* | tail -1)
rl=(configs/tiny.ini run.device=cuda model.path="$ck" kernelgym.device=cuda ckpt.every=2 ckpt.keep=0)
t0=$(date +%s)
"$train" "${rl[@]}" run.dir="$tmp/rl" > "$tmp/rl.log" || { tail -30 "$tmp/rl.log"; exit 1; }
echo "3 RL steps in $(( $(date +%s) - t0 )) s"
grep "^step " "$tmp/rl.log"
# Resume: keep only the step-2 checkpoint and redo step 3.
mkdir -p "$tmp/rl2/ckpt"
cp -r "$tmp/rl/ckpt/step_00000002" "$tmp/rl2/ckpt/"
"$train" "${rl[@]}" run.dir="$tmp/rl2" ckpt.resume=auto > "$tmp/rl2.log" || { tail -30 "$tmp/rl2.log"; exit 1; }
grep -q "resumed from" "$tmp/rl2.log" || { echo "did not resume"; exit 1; }
"$py" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a = [json.loads(l) for l in open(f"{d}/rl/metrics.jsonl")]
b = [json.loads(l) for l in open(f"{d}/rl2/metrics.jsonl")]
need = ["reward_mean", "reward_mean_turn1", "reward_std_turn1", "reward_mean_turn2", "fast1", "correct_rate",
        "hack_rate", "compile_error_rate", "coverage_mean", "prs_drop_rate", "response_len_mean", "clip_frac",
        "approx_kl", "entropy", "logprob_mismatch_mean", "grad_norm", "lr", "rollout_s", "env_s", "train_s",
        "rollout_tokens_per_s", "train_tokens_per_s"]
assert len(a) == 3, len(a)
for k in need:
    assert all(k in r for r in a), f"metrics lack {k}"
r = a[-1]
print("time split of step 3: rollout %.2fs, env %.2fs, train %.2fs of %.2fs" % (r["rollout_s"], r["env_s"], r["train_s"], r["step_s"]))
print("logprob mismatch rollout vs trainer: mean %.2e max %.2e" % (r["logprob_mismatch_mean"], r["logprob_mismatch_max"]))
outcomes = {}
for l in open(f"{d}/rl/rollouts.jsonl"):
    for t in json.loads(l)["turns"]:
        outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
print("outcomes over 3 steps:", outcomes)
# Resume redoes step 3 identically in rewards (generation on the GPU is deterministic).
assert b[-1]["step"] == 3
for k in ("reward_mean", "correct_rate", "response_len_mean"):
    assert a[-1][k] == b[-1][k] or (a[-1][k] is None and b[-1][k] is None), (k, a[-1][k], b[-1][k])
print("resume: step 3 redone with the same rewards")
PY
