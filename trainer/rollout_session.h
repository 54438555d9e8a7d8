/* rollout_session.h: what the rl and eval modes share: device, tokenizer and
 * model (model_setup.h), the generation engine with its KV cache, the
 * environment and task list, the prompt templates, the stop tokens, and the
 * progress bars of the rollout phases.
 *
 * Phases (RL): the engine, its KV cache and, for a sharded model, the
 * inference copy of the weights exist only between rollout_session_begin and
 * rollout_session_end. begin releases the training activations and gather
 * buffers of a sharded model (run_setup_train_release), all-gathers every
 * unit's act shards into the inference copy (verl's hybrid engine) and
 * creates the engine on it; an unsharded engine reads the training weights
 * in place. end frees the engine and the copy and makes the training
 * buffers again, so each phase reuses the other's memory and a run's
 * device memory does not grow over its steps. */
#ifndef DK_ROLLOUT_SESSION_H
#define DK_ROLLOUT_SESSION_H

#include "model/generate.h"
#include "rl/rollout.h"
#include "trainer/config.h"
#include "trainer/model_setup.h"
#include "trainer/progress.h"
#include "trainer/rl_env_setup.h"

typedef struct {
    run_setup r;
    gen_engine *eng;      /* during a rollout phase (eval: from init to free) */
    gen_config gc;        /* its settings, for every rollout phase */
    model infer;          /* sharded: the engine's view of the inference copy (cfg, layout, ctx, params) */
    int infer_live;       /* its params hold a gathered copy (zero_gather_full): during a rollout phase */
    size_t infer_bytes;   /* of the last rollout phase (0 unsharded) */
    size_t kv_bytes;      /* the last engine's KV cache */
    rl_env_setup es;
    char *first_t, *follow_t;
    int32_t stop_tokens[2];
    int n_stop;
    progress bar;
} rollout_session;

/* The generation engine's settings for max_batch conversations generated
 * together (the memory plan reads the same ones). */
void rollout_session_gen_config(const dk_config *cfg, const model_config *mc, int max_batch, gen_config *gc);
/* max_batch: conversations generated together; train_tokens: the largest
 * packed training batch (0 for eval, which gets its engine at once; rl
 * opens a rollout phase per step). */
dk_status rollout_session_init(rollout_session *s, const dk_config *cfg, int max_batch, int train_tokens);
void rollout_session_free(rollout_session *s);
/* The rollout phase: begin creates the engine (and the inference copy, a
 * collective when sharded), end frees them and restores the training
 * buffers. Each does nothing where the phase is already so. */
dk_status rollout_session_begin(rollout_session *s);
dk_status rollout_session_end(rollout_session *s);
/* The rollout settings of a step from [rl], with progress bars. */
void rollout_session_config(rollout_session *s, const dk_config *cfg, int64_t step, const int64_t *task_keys,
                            rl_rollout_config *rc);

#endif
