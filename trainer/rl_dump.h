/* rl_dump.h: the step's conversations as JSONL (RUN_DIR/rollouts.jsonl), one
 * object per rollout: task, sample, and per turn the response text, its
 * outcome, reward, speedup, coverage and the feedback it got. This is what
 * a user reads to see what the model actually writes. */
#ifndef DK_RL_DUMP_H
#define DK_RL_DUMP_H

#include "data/tokenizer.h"
#include "rl/rollout.h"

dk_status rl_dump_rollouts(const char *run_dir, int step, const rl_rollout *ro, int n, const rl_task *tasks,
                           tokenizer *tok);

#endif
