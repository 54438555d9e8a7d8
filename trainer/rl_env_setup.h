/* rl_env_setup.h: the environment a run scores turns with, from the config:
 * the toy environment, or KernelGym through a Redis URL or a private fleet
 * (redis = auto: a private redis-server plus workers started here and
 * stopped at the end of the run). Also the task set of the run.
 *
 * In a job of several ranks one fleet serves them all: with redis = auto,
 * rank 0 starts Redis and sends its URL to every rank, whose client submits
 * to the one queue, and the local rank 0 of every node starts that node's
 * kernelgym.workers workers (one per GPU on cuda) on it. On one node Redis
 * is a unix socket; over several it listens on TCP on rank 0's host, with a
 * random password (env/redis_auto.h). redis = URL uses a fleet of its own
 * (`kernelgym serve` or workers on dedicated GPUs) and starts nothing. */
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
