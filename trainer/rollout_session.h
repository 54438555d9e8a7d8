/* rollout_session.h: what the rl and eval modes share: device, tokenizer and
 * model (model_setup.h), the generation engine with its KV cache, the
 * environment and task list, the prompt templates, the stop tokens, and the
 * progress bars of the rollout phases. */
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
    gen_engine *eng;
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
 * packed training batch (0 for eval). */
dk_status rollout_session_init(rollout_session *s, const dk_config *cfg, int max_batch, int train_tokens);
void rollout_session_free(rollout_session *s);
/* The rollout settings of a step from [rl], with progress bars. */
void rollout_session_config(rollout_session *s, const dk_config *cfg, int64_t step, const int64_t *task_keys,
                            rl_rollout_config *rc);

#endif
