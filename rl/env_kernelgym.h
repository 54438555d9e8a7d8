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
    double reconnect_s;  /* how long a lost Redis is retried before its evaluations are scored 0 */
    kg_reward_config reward;
    const char *device;  /* "cpu" | "cuda" | NULL (the worker's) */
    int feedback_max_tokens; /* the feedback text is cut to this (env/feedback_hint.h); 0: no limit */
} rl_kg_config;

/* Connects to the KernelGym Redis at url. A Redis that goes away during a
 * batch is reconnected to for up to reconnect_s (the jobs it lost are queued
 * again, client.h), and the batch's wait is extended by the time it was
 * away. Only past reconnect_s is a turn scored 0 with outcome error and a
 * feedback that says why; those turns are added to env->judge_lost, a
 * warning goes to stderr, and the next batch tries to connect again. */
rl_env *rl_env_kernelgym_new(const char *url, const rl_kg_config *cfg);

#endif
