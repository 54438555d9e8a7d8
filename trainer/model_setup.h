/* model_setup.h: what every run mode does first: the compute context on the
 * configured device, the tokenizer, and the model with its weights (loaded
 * from model.path or initialised from run.seed), planned for a token budget. */
#ifndef DK_MODEL_SETUP_H
#define DK_MODEL_SETUP_H

#include "data/tokenizer.h"
#include "dist/comm.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "trainer/config.h"
#include "trainer/zero.h"

typedef struct {
    ops_ctx ctx;
    comm comm;        /* every rank of the job ([dist] backend), on ctx */
    tokenizer *tok;
    model model;
    zero zero;        /* the model's shards when `sharded` */
    int sharded;      /* ZeRO-3: an SFT or RL run at world > 1 (or with DK_ZERO=1) */
    int training;     /* the model's activations (and zero's working set) exist */
    int max_tokens;   /* what the model is planned for */
    model_recompute recompute;
    int keep_logits;  /* the memory plan has room for the lm head's kept logits (model_keep_logits) */
    int ctx_ready, model_ready, comm_ready;
} run_setup;

/* The rank's context on its device: run.device, and on cuda the GPU its
 * node-local rank picks ([dist] backend decides how ranks talk). Opens
 * r->comm over it. Collective: every rank calls it. */
dk_status run_setup_device(run_setup *r, const dk_config *cfg, size_t scratch);
/* max_tokens: the largest packed batch a forward will see; extra_scratch:
 * ops scratch some other user of the ctx needs (the generation engine).
 * An SFT or RL run at world > 1 shards the model (ZeRO-3, trainer/zero.h);
 * so does one at world 1 when the environment sets DK_ZERO=1 (tests,
 * benchmarks). */
dk_status run_setup_init(run_setup *r, const dk_config *cfg, int max_tokens, size_t extra_scratch);
/* A sharded model's train phase (RL): release frees the activations and
 * zero's working set, keeping the shards, so the rollout phase can use the
 * memory (r->model then holds its cfg and ctx only); restore makes them
 * again. Both do nothing for an unsharded model, whose weights the
 * activations' model owns. */
void run_setup_train_release(run_setup *r);
dk_status run_setup_train_restore(run_setup *r);
void run_setup_free(run_setup *r);
/* The run's initial weights into m: model.path's checkpoint, or the random
 * initialisation keyed by run.seed (also used for the frozen RL reference). */
dk_status run_setup_initial_weights(model *m, const dk_config *cfg);
/* AdamW's settings from [train]. */
optim_config run_setup_optim_config(const dk_config *cfg);

#endif
