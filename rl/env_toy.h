/* env_toy.h: a toy environment with a verifiable reward, for checking that
 * the RL loop learns without a GPU or a judge: the reward of a response is
 * the fraction of its first `target_len` characters that are decimal digits
 * (a response shorter than target_len loses the missing ones). A randomly
 * initialised tiny model writes digits about 2% of the time, so learning
 * shows as the mean reward climbing towards 1. Its tasks are a fixed list of
 * short requests for a number. */
#ifndef DK_RL_ENV_TOY_H
#define DK_RL_ENV_TOY_H

#include "rl/env.h"

rl_env *rl_env_toy_new(int target_len);
/* The toy's task list (static storage). */
const rl_task *rl_env_toy_tasks(int *n);
/* The reward of one response (exposed for tests). */
double rl_env_toy_reward(const char *response, int target_len);

#endif
