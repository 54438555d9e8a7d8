# rl_phases.py RUN_DIRS_PARENT
# The memory phases of an RL step (trainer/rollout_session.h), on the CPU
# backend, from the device-memory counts every step logs (ops_mem_bytes;
# rl_update.h's mem_* fields), in tests/mpi/test_rl_dist.sh's runs of
# configs/toy.ini for 6 steps at world 1 (a replica), world 1 with
# DK_ZERO=1, and worlds 2 and 3 (sharded). With N_u
# a unit's parameters, computed here from the config (embedding, 2 layers,
# final norm; tied), and s_u = ceil(N_u / world) its shard:
#   - no growth: what is allocated after the update and what both phases
#     keep are the same after every step (1 to 6);
#   - what both phases keep, sharded: 16 bytes x sum s_u (the fp32 shard,
#     which is its own master on the CPU, AdamW m and v, the gradient);
#   - the inference copy: 4 bytes x sum s_u x world (every unit gathered
#     whole, padding included); none for the replica, which the engine
#     reads in place;
#   - the KV cache: rollout_session's budget for the rank's conversations
#     at max_length, in whole pages;
#   - the rollout phase's peak over what both keep is the inference copy +
#     the KV cache + the engine's step buffers, and those buffers are the
#     same bytes for the replica and DK_ZERO=1 (one engine config), at most
#     2 MB;
#   - the train phase of DK_ZERO=1 adds to what both keep exactly the
#     replica's activations (its own keep minus its 16 x N) and zero's
#     working set (8 bytes x N at world 1: every unit gathered, weights and
#     gradients), and nothing is left of the rollout phase.
import json, sys
d = sys.argv[1]
# configs/toy.ini
V, C, I, L, Hq, Hkv, D = 512, 64, 128, 2, 4, 2, 16
B, S, max_len, page = 32, 8, 256, 16
layer = 2 * C + C * Hq * D + 2 * C * Hkv * D + Hq * D * C + 2 * D + 3 * C * I
units = [V * C] + [layer] * L + [C]
N = sum(units)
def rows(n): return [json.loads(l) for l in open(f"{d}/{n}/metrics.jsonl")]
def shard(n, w): return (n + w - 1) // w
def kv(w):
    seqs = -(-(B // S) // w) * S  # the largest share of the step's tasks, in conversations
    budget = seqs * max_len * 2 * L * Hkv * D * 4 + (64 << 20)
    pb = page * 2 * L * Hkv * D * 4
    return budget // pb * pb
engine = {}
for n, w, sharded in (("w1", 1, False), ("z1", 1, True), ("w2", 2, True), ("w3", 3, True)):
    r = rows(n)
    assert [x["step"] for x in r] == [1, 2, 3, 4, 5, 6], n
    for k in ("mem_bytes", "mem_base", "mem_rollout_peak", "mem_train_peak", "mem_infer_copy", "mem_kv_cache"):
        vals = {x[k] for x in r}
        assert len(vals) == 1, f"{n}: {k} changes over the steps: {[x[k] for x in r]}"
    x = r[-1]
    s = sum(shard(u, w) for u in units)
    infer = 4 * s * w if sharded else 0
    assert x["mem_infer_copy"] == infer, f"{n}: inference copy {x['mem_infer_copy']}, want {infer}"
    assert x["mem_kv_cache"] == kv(w), f"{n}: KV cache {x['mem_kv_cache']}, want {kv(w)}"
    if sharded:
        assert x["mem_base"] == 16 * s, f"{n}: both phases keep {x['mem_base']}, want {16 * s}"
    engine[n] = x["mem_rollout_peak"] - x["mem_base"] - infer - kv(w)
    assert 0 < engine[n] <= 2 << 20, f"{n}: the engine's step buffers take {engine[n]} bytes"
    assert x["mem_bytes"] == x["mem_train_peak"], f"{n}: {x['mem_bytes']} after the update, peak {x['mem_train_peak']}"
    print(f"{n}: keeps {x['mem_base']}, rollout peak {x['mem_rollout_peak']} (copy {infer}, KV {kv(w)}, "
          f"engine {engine[n]}), train peak {x['mem_train_peak']}: flat over 6 steps")
assert engine["w1"] == engine["z1"], f"engine buffers: replica {engine['w1']}, DK_ZERO=1 {engine['z1']}"
w1, z1 = rows("w1")[-1], rows("z1")[-1]
acts = w1["mem_base"] - 16 * N
assert z1["mem_train_peak"] - z1["mem_base"] == acts + 8 * N, \
    f"DK_ZERO=1 train phase adds {z1['mem_train_peak'] - z1['mem_base']}, want activations {acts} + working {8 * N}"
print(f"DK_ZERO=1: the train phase adds the replica's {acts} bytes of activations and {8 * N} of working set")
