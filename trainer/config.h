/* config.h: the run configuration. A run is one ini file (see configs/) plus
 * `section.key=value` overrides from the command line, resolved into one typed
 * struct. Every key lives in a single table (config_keys.c) that drives
 * parsing, validation, printing, saving and the Markdown reference in
 * configs/README.md, so the code, the snapshot and the docs cannot disagree.
 *
 * Field names equal key names: `[train] lr` is cfg.train.lr. An enum key is
 * stored as the enum of the layer that uses it (rl.advantage is rl/'s
 * adv_estimator, train.recompute is model/'s model_recompute plus auto), and its values
 * are that layer's name table, so no value is spelled or numbered twice
 * (kernelgym.device is env/'s kg_device). The
 * enums below are the trainer's own. */
#ifndef DK_TRAINER_CONFIG_H
#define DK_TRAINER_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "common/error.h"
#include "env/evaluator.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "rl/advantage.h"
#include "rl/ppo.h"
#include "rl/prs.h"
#include "trainer/lr_schedule.h"

#define DK_CONFIG_STR 1024 /* capacity of a string value, NUL included */

typedef enum { DK_MODE_SFT = 0, DK_MODE_RL = 1, DK_MODE_EVAL = 2 } dk_run_mode;
typedef enum { DK_ENV_KERNELGYM = 0, DK_ENV_TOY = 1 } dk_env_kind;
typedef enum { DK_COMM_AUTO = 0, DK_COMM_NCCL = 1, DK_COMM_MPI = 2 } dk_comm_backend;

/* train.recompute = auto: the memory plan picks the fastest of model/'s
 * modes that fits (trainer/mem_plan.h); it is stored past model_recompute's
 * values and resolved before the model is created. Its names table is
 * model_recompute_names plus "auto" (test_config checks that they agree). */
#define DK_RECOMPUTE_AUTO ((model_recompute)MODEL_N_RECOMPUTE)
extern const char *const config_recompute_names[MODEL_N_RECOMPUTE + 1];

/* Value names of the trainer's enum keys, indexed by the enum. */
extern const char *const config_run_mode_names[DK_MODE_EVAL + 1];
extern const char *const config_env_kind_names[DK_ENV_TOY + 1];
extern const char *const config_comm_backend_names[DK_COMM_MPI + 1];
/* run.device's values: the names kernels/ops.c gives dk_device
 * (ops_device_name), which has no table of its own; test_config checks that
 * the two agree. */
extern const char *const config_device_names[DK_DEVICE_CUDA + 1];

typedef struct dk_config {
    struct {
        dk_run_mode mode;
        char dir[DK_CONFIG_STR]; /* resolved: never empty after config_load */
        dk_device device;
        int seed;
        int steps;
        int log_every;
    } run;
    struct {
        char path[DK_CONFIG_STR]; /* HF checkpoint dir; empty = random init from the shape below */
        dk_arch arch;
        int vocab_size, hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim, max_position;
        double rope_theta, rms_eps;
        bool tie_embeddings, qkv_bias, o_bias, qk_norm;
        int bos_token_id, eos_token_id;
        double init_std;
    } model;
    struct {
        char path[DK_CONFIG_STR]; /* resolved to <model.path>/tokenizer.json when empty */
    } tokenizer;
    struct {
        char train[DK_CONFIG_STR];
        char tasks[DK_CONFIG_STR];
        int max_length;
    } data;
    struct {
        double lr, min_lr;
        int warmup_steps;
        lr_kind schedule;
        int batch_size, grad_accum;
        int micro_batch_tokens;
        double weight_decay, beta1, beta2, eps, grad_clip;
        model_recompute recompute;
        bool keep_logits;
    } train;
    struct {
        int n_samples, max_turns;
        double gamma;
        adv_estimator advantage;
        double clip_low, clip_high, dual_clip;
        ppo_agg loss_agg;
        prs_mode prs;
        double prs_threshold, hack_penalty;
        double temperature, top_p;
        int top_k, max_new_tokens;
        double reward_alpha, speedup_cap;
        dk_env_kind env;
        int ppo_epochs, mini_batches;
        double kv_cache_fraction;
        bool decode_graphs;
        double kl_coef, entropy_coef, tis_cap;
        char prompt_template[DK_CONFIG_STR];
        char feedback_template[DK_CONFIG_STR];
        int feedback_max_tokens;
    } rl;
    struct {
        char redis[DK_CONFIG_STR];
        double timeout_s;
        kg_device device;
        int workers;
        double gpu_memory_gb; /* GPU memory each worker of a private fleet may use (0: no cap) */
        double reconnect_s;
        bool insecure;
        int fail_step_after;
    } kernelgym;
    struct {
        int every, keep;
        char resume[DK_CONFIG_STR];
        bool overwrite; /* resume = none on a run dir with checkpoints: delete them (else refuse) */
    } ckpt;
    struct {
        dk_comm_backend backend;
        int world;            /* --plan only: the world size to plan for (0: the launcher's) */
        double gpu_memory_gb; /* memory of one GPU for the plan (0: ask the device; 141 without one) */
        double margin_gb;     /* memory the plan leaves free on every GPU */
        double timeout_s;     /* a collective that takes longer ends the job */
    } dist;
} dk_config;

/* Every key at its default (the derived ones still empty / unresolved). */
void config_defaults(dk_config *cfg);
/* Defaults, then the file (path may be NULL: defaults and overrides only),
 * then the overrides ("section.key=value"), then derived values, then checks.
 * Errors are DK_ERR_USAGE and name FILE:LINE (or "command line"). */
dk_status config_load(dk_config *cfg, const char *path, int n_overrides, char **overrides);
/* Cross-key checks for a config built in code (config_load runs them too). */
dk_status config_validate(const dk_config *cfg);
/* The resolved config as ini text that config_load reads back identically. */
void config_print(const dk_config *cfg, FILE *f);
dk_status config_save(const dk_config *cfg, const char *path);
/* The key reference as Markdown: the content of configs/README.md. */
void config_describe(FILE *f);
/* True when every key has the same value in both. */
bool config_equal(const dk_config *a, const dk_config *b);
/* The model to build: from <model.path>/config.json when path is set, else
 * from the [model] shape keys; validated either way. */
dk_status config_model(const dk_config *cfg, model_config *out);

#endif
