/* rl_run.h: the multi-turn RL run (docs/DESIGN.md §8): per step, rollouts of a
 * batch of tasks against the environment, turn rewards and returns,
 * rejection sampling, advantages, the PPO update, metrics and checkpoints. */
#ifndef DK_RL_RUN_H
#define DK_RL_RUN_H

#include "common/error.h"
#include "trainer/config.h"

dk_status rl_run(const dk_config *cfg);

#endif
