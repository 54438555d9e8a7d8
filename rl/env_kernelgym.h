/* env_kernelgym.h: the KernelGym environment: the last python block of each
 * response is the candidate; all candidates of a turn go to KernelGym at
 * once through env/client.h; the turn reward is recomputed from the result
 * with the trainer's reward settings (docs/DESIGN.md §8 step 3), and KernelGym's
 * feedback text becomes the next user turn. */
#ifndef DK_RL_ENV_KERNELGYM_H
#define DK_RL_ENV_KERNELGYM_H

#include "env/client.h"
#include "env/reward.h"
#include "rl/env.h"

typedef struct {
    double timeout_s;    /* per evaluation */
    double wait_s;       /* for a whole batch; past it the rest count as timeouts */
    kg_reward_config reward;
    const char *device;  /* "cpu" | "cuda" | NULL (the worker's) */
    int feedback_max_tokens; /* the feedback text is cut to this (env/feedback_hint.h); 0: no limit */
} rl_kg_config;

/* Connects to the KernelGym Redis at url. When it cannot be reached, the env
 * still works: every turn is scored 0 with outcome error and a feedback that
 * says why, a warning goes to stderr, and the next batch tries to connect
 * again, so a run survives a judge that comes and goes. */
rl_env *rl_env_kernelgym_new(const char *url, const rl_kg_config *cfg);

#endif
