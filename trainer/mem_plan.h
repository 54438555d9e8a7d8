/* mem_plan.h: the per-GPU memory plan of a run. For a resolved config, a
 * model shape and a world size it says how many bytes every item takes on
 * one GPU in each phase of a step, and whether the peak leaves
 * dist.margin_gb free. A pure function: no GPU, no MPI launch. `train --plan`
 * prints it; a CUDA run checks it at start against the device's memory.
 *
 * What it plans (ZeRO-3, dist/shard.h). Every rank owns one equal, padded
 * slice of each flat parameter unit (model/params.h: the embedding, each
 * decoder layer, the final norm, the lm head): the bf16 parameters, the fp32
 * masters, the AdamW moments m and v, and the fp32 gradients. The train
 * phase also holds what trainer/zero.c allocates gathered: the embedding,
 * final norm and lm head (weights and fp32 gradients) for the whole step,
 * and two layer slots of each (one in use, the next arriving). The
 * activations are what model_create plans for the rank's micro-batch. RL gathers the full bf16
 * weights into an inference copy after each optimizer step; that copy, the
 * generation engine's buffers and the paged KV cache exist only in the
 * rollout phase, and the training activations and gather buffers only in the
 * train phase (trainer/rollout_session.h), so the two phases reuse the same
 * memory and the peak is the larger of them. In the rollout phase the KV
 * cache takes rl.kv_cache_fraction of what the other items leave free (the
 * CPU: the budget rollout_session_gen_config gives), as the engine sizes it
 * when the phase begins. The KL reference
 * of a sharded run is one more act shard.
 *
 * At world 1 a run is not sharded unless asked (DK_ZERO=1, mem_plan_make_ex):
 * the shards are whole units, nothing is gathered, the engine reads the
 * training weights in place and the model's activations stay through the
 * rollout phase, which is what the single-GPU trainer allocates. Sizes are
 * bytes; the table prints GB of 10^9 bytes. */
#ifndef DK_TRAINER_MEM_PLAN_H
#define DK_TRAINER_MEM_PLAN_H

#include <stdio.h>

#include "model/model.h"
#include "trainer/config.h"

/* The CUDA context, its loaded kernel images and the communicator's buffers:
 * an estimate (0.5 GB measured for the context alone on an H200 is typical;
 * NCCL adds a few hundred MB across ranks). */
#define MEM_PLAN_CONTEXT_BYTES ((size_t)1000000000)
/* The GPU memory planned for where dist.gpu_memory_gb is 0 and no GPU
 * answers: an H200's 141 GB. */
#define MEM_PLAN_DEFAULT_GPU_GB 141.0

typedef enum {
    MEM_PARAMS,        /* parameter shard (act: bf16) */
    MEM_MASTER,        /* fp32 master shard (where parameters are not fp32) */
    MEM_ADAM_M,        /* fp32 AdamW first moments, shard */
    MEM_ADAM_V,        /* fp32 AdamW second moments, shard */
    MEM_GRADS,         /* fp32 gradient shard */
    MEM_GATHER_PARAMS, /* gathered embedding, final norm, lm head and two layer slots, act (world > 1) */
    MEM_GATHER_GRADS,  /* their fp32 gradients, the same units (world > 1) */
    MEM_ACTIVATIONS,   /* model_create's activations for the rank's micro-batch */
    MEM_KEEP_LOGITS,   /* model_keep_logits: the lm head's fp32 logits, forward to backward */
    MEM_SCRATCH,       /* ops scratch: lm-head chunk logits, attention statistics */
    MEM_BLASLT,        /* cuBLASLt workspace */
    MEM_REFERENCE,     /* frozen KL reference policy (rl.kl_coef > 0): a second model_create */
    MEM_INFER_COPY,    /* gathered act weights the generation engine reads (world > 1) */
    MEM_GEN_ACTS,      /* the generation engine's step buffers (model/gen_forward.c) */
    MEM_KV_CACHE,      /* paged KV cache: whole pages of its share of what the rollout phase leaves free */
    MEM_CONTEXT,       /* MEM_PLAN_CONTEXT_BYTES on CUDA */
    MEM_ROWS
} mem_row;

typedef enum { MEM_TRAIN = 0, MEM_ROLLOUT = 1, MEM_PHASES = 2 } mem_phase;

typedef struct {
    /* What was planned for. */
    int world;
    int sharded;             /* ZeRO-3 (always at world > 1) */
    dk_device device;        /* the backend whose storage is planned (cuda: bf16 act) */
    size_t act_size;         /* bytes per act element */
    size_t gpu_bytes, margin_bytes;
    dk_run_mode mode;
    int has_phase[MEM_PHASES]; /* sft: train; rl: both; eval: rollout */
    int train_tokens;        /* tokens of the rank's micro-batch, what model_create is planned for */
    model_recompute recompute; /* the mode planned: the config's, or the pick of recompute = auto */
    int recompute_auto;      /* picked by auto; recompute_why says why the faster modes were passed over */
    char recompute_why[192];
    int keep_logits;         /* the model keeps the lm head's logits (model_keep_logits) */
    int rollout_seqs;        /* conversations per rank generated together (rl, eval) */
    int step_tokens;         /* tokens of one generation step */
    int max_length;
    size_t n_params;         /* the model's, unsharded */
    size_t largest_unit;     /* elements of the largest unit, padded for the world */

    size_t bytes[MEM_ROWS][MEM_PHASES]; /* 0 where an item is absent from a phase */
    size_t total[MEM_PHASES];
    size_t peak;
    mem_phase peak_phase;

    /* The KV cache of the rollout phase, in tokens of whole pages. */
    size_t kv_token_bytes;   /* K and V of one token over all layers */
    long kv_tokens;          /* what the cache holds */
    long kv_need_one;        /* one conversation at max_length */
    long kv_need_all;        /* every conversation of the rank at max_length */

    int fits;                /* every phase leaves the margin, and the cache holds one conversation */
} mem_plan;

/* Bytes model_create allocates on a backend with act_size-byte act elements
 * for everything but the parameters and their gradients: the activations,
 * the backward workspace and the batch arrays, for max_tokens tokens. */
size_t mem_plan_model_acts(const model_config *mc, int max_tokens, model_recompute rc, size_t act_size);
/* Bytes gen_forward_init allocates for steps of max_tokens tokens and
 * max_rows sampled rows. */
size_t mem_plan_gen_acts(const model_config *mc, int max_tokens, int max_rows, size_t act_size);

/* The plan of cfg's run mode for model mc at world size `world` on GPUs of
 * gpu_bytes (device: the backend whose storage sizes apply). train_tokens:
 * the micro-batch the model is created for, or 0 to derive the rank's from
 * the config (trainer/micro_batch.h over batch_size / world sequences).
 * Fails naming the keys when the config cannot be planned at this world
 * size; a plan that does not fit is not a failure (p->fits says so). */
dk_status mem_plan_make(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, dk_device device,
                        size_t gpu_bytes, int train_tokens);
/* As mem_plan_make; sharded = 1 plans ZeRO-3 at world 1 too (a run with
 * DK_ZERO=1). mem_plan_make is this with sharded = world > 1.
 * On CUDA a plan that fits also keeps the lm head's fp32 logits from forward
 * to backward (keep_logits, model_keep_logits: one lm-head GEMM fewer per
 * step) where it still fits with them and they leave the rollout KV cache
 * every conversation at full length (or what it held without them).
 * train.recompute = auto (config.h) is planned as the first of none,
 * layer_keep_attention and layer whose plan fits and whose rollout KV cache
 * holds as many tokens as layer's would (or every conversation of the rank
 * at full length, if fewer): the fastest backward that costs the rollouts
 * nothing; layer where neither does. */
dk_status mem_plan_make_ex(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                           dk_device device, size_t gpu_bytes, int train_tokens);

const char *mem_plan_row_name(mem_row r);
/* The table: one row per item, a column per phase, totals, the peak, the
 * free memory, the KV cache in tokens, FITS or DOES NOT FIT. */
void mem_plan_print(const mem_plan *p, FILE *f);

/* `train --plan`: prints to out the plan of cfg at dist.world (0: the
 * launcher's, 1 for a plain ./train) on GPUs of dist.gpu_memory_gb (0: the
 * device's memory, MEM_PLAN_DEFAULT_GPU_GB where none answers). Returns the
 * exit code: 0 fits, 1 does not fit, 2 a config it cannot plan. */
int mem_plan_command(const dk_config *cfg, FILE *out);
/* At the start of a CUDA run, before anything is allocated: the plan of
 * world ranks on GPUs of gpu_bytes (gpu_name says which, for the message),
 * for a model created for max_tokens. Prints the table to stderr and fails
 * (DK_ERR_USAGE) when it does not fit. */
dk_status mem_plan_check(const dk_config *cfg, const model_config *mc, int world, int max_tokens, size_t gpu_bytes,
                         const char *gpu_name);
/* At the start of a run, before anything is allocated: the recompute mode
 * its model is created with, train.recompute or auto's pick (printed with
 * why), from the plan of world ranks, sharded as mem_plan_make_ex says (a
 * run with DK_ZERO=1 at world 1), for max_tokens tokens, on CUDA device
 * `gpu`'s total memory, which must hold it (mem_plan_check), or on the CPU
 * backend the host's; and whether the model keeps its lm-head logits
 * (mem_plan_make_ex). Where no GPU answers, the config's mode (layer for
 * auto), no kept logits and DK_OK: context creation reports that. */
dk_status mem_plan_run_start(const dk_config *cfg, const model_config *mc, int gpu, int world, int sharded,
                             int max_tokens, model_recompute *rc, int *keep_logits);

#endif
