/* rl_env_setup.h: the environment a run scores turns with, from the config:
 * the toy environment, or KernelGym through a Redis URL or a private fleet
 * (redis = auto: a private redis-server plus workers started here and
 * stopped at the end of the run). Also the task set of the run.
 *
 * In a job of several ranks one fleet serves them all: with redis = auto,
 * rank 0 starts Redis and the workers (kernelgym.workers of them: one per
 * GPU on cuda) and sends the URL to every rank, whose client submits to the
 * one queue. The private Redis is a unix socket, so auto serves a job on one
 * node; a job over several nodes names a fleet they all reach (redis = URL:
 * `kernelgym serve` or workers started on each node), and starts nothing. */
#ifndef DK_RL_ENV_SETUP_H
#define DK_RL_ENV_SETUP_H

#include "data/tasks.h"
#include "dist/comm.h"
#include "env/fleet.h"
#include "rl/env.h"
#include "trainer/config.h"

typedef struct {
    rl_env *env;
    kg_fleet fleet;
    int have_fleet;
    task_set tasks;   /* KernelGym tasks (empty for the toy) */
    rl_task *list;    /* the tasks as the rollout sees them */
    int n_tasks;
} rl_env_setup;

/* Collective when kernelgym.redis = auto (the URL goes from rank 0 to all). */
dk_status rl_env_setup_init(rl_env_setup *s, const dk_config *cfg, comm *c);
void rl_env_setup_free(rl_env_setup *s);

#endif
