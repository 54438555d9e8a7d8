/* config_keys.c: every run-config key, its type, default, range and one-line
 * doc, and for the defaults the recipe sets, the source they follow. This
 * table is the single source of truth: config.c parses, checks, prints, saves
 * and documents (configs/README.md) by walking it. To add a key, add a field
 * to dk_config (trainer/config.h) and a row here; then regenerate
 * configs/README.md (`build/tests/unit_test_config_readme --write`). */
#include "trainer/config_keys.h"

#include "trainer/config.h"

/* The macros check the field's C type at compile time: _Generic with a single
 * association fails to compile when a row's macro does not match its field.
 * An enum row names the field's enum type, which two different enum types do
 * not match, and the name table of that enum, whose length it takes. */
#define FIELD(sec, f) (((dk_config *)0)->sec.f)
#define OFF(sec, f) offsetof(dk_config, sec.f)
#define K_INT_FROM(sec, f, def, rng, src, script, doc) \
    {#sec, #f, CK_INT, _Generic(FIELD(sec, f), int: OFF(sec, f)), def, NULL, 0, rng, 0, doc, src, script}
#define K_FLOAT_FROM(sec, f, def, rng, src, script, doc) \
    {#sec, #f, CK_FLOAT, _Generic(FIELD(sec, f), double: OFF(sec, f)), def, NULL, 0, rng, 0, doc, src, script}
#define K_ENUM_FROM(sec, f, type, names, def, src, script, doc)                                          \
    {#sec, #f, CK_ENUM, _Generic(FIELD(sec, f), type: OFF(sec, f)), def, names,                            \
     (int)(sizeof names / sizeof *names), CR_ANY, 0, doc, src, script}
#define K_INT(sec, f, def, rng, doc) K_INT_FROM(sec, f, def, rng, CS_OURS, NULL, doc)
#define K_FLOAT(sec, f, def, rng, doc) K_FLOAT_FROM(sec, f, def, rng, CS_OURS, NULL, doc)
#define K_ENUM(sec, f, type, names, def, doc) K_ENUM_FROM(sec, f, type, names, def, CS_OURS, NULL, doc)
#define K_BOOL(sec, f, def, flags, doc) \
    {#sec, #f, CK_BOOL, _Generic(FIELD(sec, f), bool: OFF(sec, f)), def, NULL, 0, CR_ANY, flags, doc, CS_OURS, NULL}
#define K_STRING(sec, f, def, doc) \
    {#sec, #f, CK_STRING, _Generic(FIELD(sec, f), char *: OFF(sec, f)), def, NULL, 0, CR_ANY, 0, doc, CS_OURS, NULL}

/* config.c reads and writes an enum field as an int. */
_Static_assert(sizeof(dk_run_mode) == sizeof(int) && sizeof(dk_device) == sizeof(int) &&
                   sizeof(dk_arch) == sizeof(int) && sizeof(lr_kind) == sizeof(int) &&
                   sizeof(model_recompute) == sizeof(int) && sizeof(adv_estimator) == sizeof(int) &&
                   sizeof(ppo_agg) == sizeof(int) && sizeof(prs_mode) == sizeof(int) &&
                   sizeof(dk_env_kind) == sizeof(int) && sizeof(kg_device) == sizeof(int) &&
                   sizeof(dk_comm_backend) == sizeof(int),
               "enum keys are stored as int");

const char *const config_run_mode_names[DK_MODE_EVAL + 1] = {
    [DK_MODE_SFT] = "sft", [DK_MODE_RL] = "rl", [DK_MODE_EVAL] = "eval"};
const char *const config_env_kind_names[DK_ENV_TOY + 1] = {[DK_ENV_KERNELGYM] = "kernelgym", [DK_ENV_TOY] = "toy"};
const char *const config_comm_backend_names[DK_COMM_MPI + 1] = {
    [DK_COMM_AUTO] = "auto", [DK_COMM_NCCL] = "nccl", [DK_COMM_MPI] = "mpi"};
const char *const config_device_names[DK_DEVICE_CUDA + 1] = {[DK_DEVICE_CPU] = "cpu", [DK_DEVICE_CUDA] = "cuda"};
const char *const config_recompute_names[MODEL_N_RECOMPUTE + 1] = {
    [MODEL_RECOMPUTE_NONE] = "none", [MODEL_RECOMPUTE_LAYER] = "layer",
    [MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION] = "layer_keep_attention", [MODEL_N_RECOMPUTE] = "auto"};

const config_section config_sections[] = {
    {"run", "what to run and where its outputs go"},
    {"model", "the transformer: a Hugging Face checkpoint, or a shape to initialise at random"},
    {"tokenizer", "the tokenizer"},
    {"data", "training and evaluation data"},
    {"train", "optimizer, learning-rate schedule and batching"},
    {"rl", "multi-turn rollouts, rewards and the PPO objective"},
    {"kernelgym", "the kernel-evaluation environment"},
    {"ckpt", "checkpoints"},
    {"dist", "ranks, communication and the per-GPU memory plan"},
};
const int config_n_sections = sizeof config_sections / sizeof config_sections[0];

const config_key config_keys[] = {
    K_ENUM(run, mode, dk_run_mode, config_run_mode_names, "rl",
           "sft: supervised cold start on data.train; rl: multi-turn RL on data.tasks; "
           "eval: Fast@p of the model on data.tasks"),
    K_STRING(run, dir, "",
             "run directory: `config.ini` snapshot, `metrics.jsonl`, logs, `ckpt/`; "
             "empty: `runs/<config file name>` without the extension"),
    K_ENUM(run, device, dk_device, config_device_names, "cpu",
           "compute backend: cpu (fp32 reference) or cuda (bf16, one GPU per rank)"),
    K_INT(run, seed, "1", CR_NONNEG, "seed of every random stream (init, data order, sampling)"),
    K_INT(run, steps, "100", CR_POS, "optimizer steps to run (rl: RL steps; eval: ignored)"),
    K_INT(run, log_every, "1", CR_POS, "print a progress line every this many steps (metrics.jsonl gets every step)"),

    K_STRING(model, path, "",
             "Hugging Face checkpoint directory (`config.json`, `*.safetensors`); "
             "its `config.json` then defines the model"),
    K_ENUM(model, arch, dk_arch, model_arch_names, "qwen3", "architecture family (qwen2 covers Qwen2.5)"),
    K_INT(model, vocab_size, "0", CR_NONNEG, "vocabulary size (required when path is empty)"),
    K_INT(model, hidden_size, "0", CR_NONNEG, "model width (required when path is empty)"),
    K_INT(model, intermediate_size, "0", CR_NONNEG, "SwiGLU MLP width (required when path is empty)"),
    K_INT(model, n_layers, "0", CR_NONNEG, "decoder layers (required when path is empty)"),
    K_INT(model, n_heads, "0", CR_NONNEG, "query heads (required when path is empty)"),
    K_INT(model, n_kv_heads, "0", CR_NONNEG, "key/value heads, dividing n_heads (0: n_heads)"),
    K_INT(model, head_dim, "0", CR_NONNEG, "dimension of one head (0: hidden_size / n_heads)"),
    K_INT(model, max_position, "4096", CR_POS, "longest sequence the model supports (max_position_embeddings)"),
    K_FLOAT(model, rope_theta, "1000000", CR_POS, "RoPE base frequency"),
    K_FLOAT(model, rms_eps, "1e-06", CR_POS, "RMSNorm epsilon"),
    K_BOOL(model, tie_embeddings, "false", 0, "the lm head shares the embedding table"),
    K_BOOL(model, qkv_bias, "false", CF_ARCH_DEFAULT,
           "q/k/v projections carry a bias (qwen2: always; qwen3, llama: together with o_bias)"),
    K_BOOL(model, o_bias, "false", CF_ARCH_DEFAULT, "the attention output projection carries a bias (never for qwen2)"),
    K_BOOL(model, qk_norm, "true", CF_ARCH_DEFAULT, "RMSNorm on each q and k head before RoPE (qwen3 only, always)"),
    K_INT(model, bos_token_id, "-1", CR_ID, "beginning-of-sequence token written to config.json (-1: none)"),
    K_INT(model, eos_token_id, "-1", CR_ID, "end-of-sequence token written to config.json (-1: none)"),
    K_FLOAT(model, init_std, "0.02", CR_POS, "standard deviation of the random initial weights"),

    K_STRING(tokenizer, path, "",
             "`tokenizer.json` (byte-level BPE) or a sentencepiece `.model`; empty: `<model.path>/tokenizer.json`"),

    K_STRING(data, train, "", "SFT conversations, JSONL (one `{\"messages\": [...]}` per line)"),
    K_STRING(data, tasks, "", "RL and eval tasks: a tasks JSONL or a KernelBench level folder"),
    K_INT(data, max_length, "4096", CR_POS,
          "tokens per sequence; longer SFT conversations are dropped (and counted), rollouts stop at this length"),

    K_FLOAT(train, lr, "1e-05", CR_POS, "peak learning rate, reached after warmup"),
    K_FLOAT(train, min_lr, "0", CR_NONNEG, "final learning rate of the cosine and linear schedules (at most lr)"),
    K_INT(train, warmup_steps, "0", CR_NONNEG, "linear warmup from 0 to lr over this many steps"),
    K_ENUM_FROM(train, schedule, lr_kind, lr_kind_names, "cosine", CS_WRITEUP, NULL,
                "learning-rate decay after warmup, from lr to min_lr"),
    K_INT(train, batch_size, "8", CR_POS, "sequences per optimizer step, over all ranks"),
    K_INT(train, grad_accum, "1", CR_POS, "micro-batches per optimizer step; must divide batch_size"),
    K_INT(train, micro_batch_tokens, "0", CR_NONNEG,
          "pack each step's sequences in order into micro-batches of at most this many tokens (needs grad_accum = 1 "
          "and at least data.max_length); 0: batch_size / grad_accum sequences per micro-batch"),
    K_FLOAT(train, weight_decay, "0.01", CR_NONNEG, "AdamW decoupled weight decay (matrices only)"),
    K_FLOAT(train, beta1, "0.9", CR_UNIT_LT1, "AdamW first-moment decay"),
    K_FLOAT(train, beta2, "0.999", CR_UNIT_LT1, "AdamW second-moment decay"),
    K_FLOAT(train, eps, "1e-08", CR_POS, "AdamW epsilon"),
    K_FLOAT_FROM(train, grad_clip, "1", CR_NONNEG, CS_SCRIPT, NULL,
                 "clip the global gradient norm to this (0: no clipping)"),
    K_ENUM(train, recompute, model_recompute, config_recompute_names, "auto",
           "none: keep every layer's activations (fastest); layer: keep only each layer's input and recompute the "
           "rest in backward (least memory); layer_keep_attention: also keep each layer's attention output and "
           "logsumexp, so the backward does not run the attention again (one [tokens, heads x head_dim] buffer "
           "more per layer); auto: the first of none, layer_keep_attention, layer whose memory plan fits the "
           "GPU (the host on the CPU backend) without shrinking the rollout KV cache below what layer leaves "
           "(train --plan shows the pick)"),
    K_BOOL(train, keep_logits, "true", 0,
           "on cuda, keep the lm head's fp32 logits (tokens x vocab) from forward to backward, which then skips "
           "their recompute (one lm-head GEMM fewer per micro-batch), where the memory plan fits with them and "
           "they leave the rollout KV cache as many tokens as it holds without them (or every conversation at "
           "full length); false: always recompute"),

    K_INT_FROM(rl, n_samples, "16", CR_POS, CS_SCRIPT, NULL, "rollouts per task (the group of the advantage baseline)"),
    K_INT_FROM(rl, max_turns, "3", CR_POS, CS_WRITEUP, NULL,
               "model turns per rollout; KernelGym's feedback follows each one"),
    K_FLOAT_FROM(rl, gamma, "1", CR_UNIT, CS_WRITEUP, NULL, "discount of later turns' rewards in the return"),
    K_ENUM_FROM(rl, advantage, adv_estimator, adv_estimator_names, "trloo", CS_WRITEUP, NULL,
                "trloo: turn-level leave-one-out over the (task, turn) group; grpo, rloo for comparison"),
    K_FLOAT_FROM(rl, clip_low, "0.2", CR_UNIT, CS_BRIEF, NULL, "PPO clip below: ratio >= 1 - clip_low"),
    K_FLOAT_FROM(rl, clip_high, "0.2", CR_NONNEG, CS_BRIEF, "0.28", "PPO clip above: ratio <= 1 + clip_high"),
    K_FLOAT_FROM(rl, dual_clip, "0", CR_NONNEG, CS_BRIEF, "3",
                 "dual clip for negative advantages, > 1 (0: off)"),
    K_ENUM_FROM(rl, loss_agg, ppo_agg, ppo_agg_names, "seq-mean-token-sum", CS_SCRIPT, NULL,
                "how token losses become the batch loss"),
    K_ENUM_FROM(rl, prs, prs_mode, prs_mode_names, "hard", CS_WRITEUP, "soft",
                "profiling-based rejection sampling of correct turns by kernel coverage (hard: drop below the "
                "threshold; soft: keep with probability clip((coverage - threshold) / 0.1, 0, 1))"),
    K_FLOAT_FROM(rl, prs_threshold, "0.3", CR_UNIT, CS_WRITEUP, NULL, "coverage threshold of prs"),
    K_FLOAT(rl, hack_penalty, "0", CR_NONPOS,
            "reward of a turn flagged as reward hacking (0: as a failure; negative punishes)"),
    K_FLOAT_FROM(rl, temperature, "1", CR_NONNEG, CS_SCRIPT, NULL, "sampling temperature (0: greedy)"),
    K_FLOAT(rl, top_p, "1", CR_PROB, "nucleus sampling: keep the smallest token set with this much probability"),
    K_INT(rl, top_k, "0", CR_NONNEG, "sample among the k most likely tokens (0: all)"),
    K_INT_FROM(rl, max_new_tokens, "8192", CR_POS, CS_SCRIPT, NULL, "token budget of one model turn"),
    K_FLOAT_FROM(rl, reward_alpha, "0.7", CR_UNIT, CS_WRITEUP, NULL,
                 "reward = correct * (alpha * min(speedup, speedup_cap) + (1 - alpha) * coverage)"),
    K_FLOAT(rl, speedup_cap, "10", CR_POS, "speedups above this earn no more reward"),
    K_ENUM(rl, env, dk_env_kind, config_env_kind_names, "kernelgym",
           "what scores a turn: kernelgym (evaluate the last python block) or toy (a verifiable digit-pattern "
           "reward that checks learning without a judge)"),
    K_FLOAT(rl, kv_cache_fraction, "0.5", CR_PROB,
            "share of the GPU memory free when the rollout phase begins (after the model, or after the shards and the inference copy when sharded; divided among ranks that share a GPU) that the KV cache takes"),
    K_BOOL(rl, decode_graphs, "true", 0,
           "rollout decode steps replay captured CUDA graphs (fewer kernel launches; cuda only; false launches "
           "every kernel)"),
    K_INT(rl, ppo_epochs, "1", CR_POS, "passes of PPO updates over each step's rollouts"),
    K_INT(rl, mini_batches, "1", CR_POS, "optimizer steps per PPO epoch (the rollouts are split evenly)"),
    K_FLOAT_FROM(rl, kl_coef, "0", CR_NONNEG, CS_SCRIPT, NULL, "k3 KL penalty to the initial policy (0: off)"),
    K_FLOAT_FROM(rl, entropy_coef, "0", CR_NONNEG, CS_SCRIPT, NULL, "entropy bonus (0: off)"),
    K_FLOAT(rl, tis_cap, "0", CR_NONNEG,
            "truncated importance sampling on the rollout-vs-trainer logprob mismatch: cap of the weight (0: off)"),
    K_STRING(rl, prompt_template, "",
             "file with the first-turn prompt template ({name}, {source} are filled in); empty: the built-in one"),
    K_STRING(rl, feedback_template, "",
             "file with the follow-up prompt template ({feedback} is filled in); empty: the built-in one"),
    K_INT(rl, feedback_max_tokens, "1024", CR_NONNEG,
          "KernelGym feedback is cut to this many tokens (estimated as bytes / 4), keeping its head: status, "
          "hint, mismatch location, bottleneck, then the error text; 0: no limit"),

    K_STRING(kernelgym, redis, "auto",
             "Redis of the KernelGym fleet: a URL (redis://host:port, unix:///path), or auto to start a private one (under mpirun: rank 0 starts it for every rank, on TCP with a random password when the job spans several nodes, and each node starts its own workers)"),
    K_FLOAT(kernelgym, timeout_s, "120", CR_POS, "wall-clock limit of one evaluation, in seconds"),
    K_ENUM(kernelgym, device, kg_device, kg_device_names, "auto",
           "where a private fleet (redis = auto) evaluates: cuda, or cpu through the Triton interpreter "
           "(correctness and hack checks only, no timing); auto: cuda when run.device is cuda"),
    K_INT(kernelgym, workers, "1", CR_POS,
          "workers of a private fleet on each node of the job (one per GPU on cuda)"),
    K_FLOAT(kernelgym, gpu_memory_gb, "0", CR_NONNEG,
            "GPU memory, in GB of 10^9 bytes, that each worker of a private cuda fleet (redis = auto) may use "
            "beside the trainer on its GPU: given to the worker's harness as DK_KG_GPU_MEMORY_GB; 0: no cap"),
    K_FLOAT(kernelgym, reconnect_s, "300", CR_NONNEG,
            "how long the trainer keeps reconnecting to a lost Redis (and queueing again the jobs it lost) before "
            "the evaluations it waits for are scored 0"),
    K_BOOL(kernelgym, insecure, "false", 0,
           "allow a redis:// URL on a non-loopback address without a password (anyone who reaches it can forge "
           "results); a warning is printed"),
    K_INT(kernelgym, fail_step_after, "3", CR_NONNEG,
          "end the run (exit 1) when this many steps in a row had evaluations scored 0 because KernelGym could not "
          "be reached (0: never)"),

    K_INT(ckpt, every, "50", CR_NONNEG, "write a checkpoint every this many steps (0: only at the end)"),
    K_INT(ckpt, keep, "3", CR_NONNEG, "keep the newest this many checkpoints (0: keep all)"),
    K_STRING(ckpt, resume, "auto",
             "auto: continue from the newest complete checkpoint in run.dir that passes its checksums; none: start "
             "fresh (refused when run.dir has checkpoints, unless overwrite); or a checkpoint path"),
    K_BOOL(ckpt, overwrite, "false", 0,
           "with resume = none: delete the checkpoints already in run.dir and start clean (false: refuse to start)"),

    K_ENUM(dist, backend, dk_comm_backend, config_comm_backend_names, "auto",
           "collectives between ranks: nccl (GPU buffers, one GPU per rank), mpi (host buffers: the CPU backend, "
           "or CUDA ranks that share a GPU, staged through the host); auto: nccl on cuda when every rank has its own "
           "GPU, else mpi"),
    K_INT(dist, world, "0", CR_NONNEG, "`train --plan` only: the world size to plan for (0: the launcher's). The 8B/14B recipes set 8; a run whose launcher world differs prints a note and checks its memory at its own world"),
    K_FLOAT(dist, gpu_memory_gb, "0", CR_NONNEG,
            "`train --plan` only: memory of one GPU, in GB of 10^9 bytes (0: ask the device; 141 where there is "
            "none); a CUDA run checks its plan against the device's own memory"),
    K_FLOAT(dist, margin_gb, "2", CR_NONNEG,
            "memory the plan leaves free on every GPU, in GB: room for what it does not count (allocator rounding, "
            "library buffers)"),
    K_FLOAT(dist, timeout_s, "600", CR_POS,
            "a collective that waits longer than this ends the whole job, naming the rank that did not arrive"),
};
const int config_n_keys = sizeof config_keys / sizeof config_keys[0];

const config_alias config_aliases[] = {
    {"learning_rate", "train", "lr"},
    {"warmup", "train", "warmup_steps"},
    {"lr_scheduler", "train", "schedule"},
    {"global_batch_size", "train", "batch_size"},
    {"gradient_accumulation_steps", "train", "grad_accum"},
    {"max_grad_norm", "train", "grad_clip"},
    {"gradient_checkpointing", "train", "recompute"},
    {"adam_epsilon", "train", "eps"},
    {"max_steps", "run", "steps"},
    {"output_dir", "run", "dir"},
    {"num_hidden_layers", "model", "n_layers"},
    {"num_attention_heads", "model", "n_heads"},
    {"num_key_value_heads", "model", "n_kv_heads"},
    {"max_position_embeddings", "model", "max_position"},
    {"rms_norm_eps", "model", "rms_eps"},
    {"tie_word_embeddings", "model", "tie_embeddings"},
    {"attention_bias", "model", "qkv_bias"},
    {"max_seq_len", "data", "max_length"},
    {"sequence_length", "data", "max_length"},
    {"group_size", "rl", "n_samples"},
    {"num_turns", "rl", "max_turns"},
    {"clip_ratio", "rl", "clip_low"},
    {"clip_ratio_high", "rl", "clip_high"},
    {"response_length", "rl", "max_new_tokens"},
    {"save_every", "ckpt", "every"},
    {"save_total_limit", "ckpt", "keep"},
};
const int config_n_aliases = sizeof config_aliases / sizeof config_aliases[0];
