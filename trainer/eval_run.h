/* eval_run.h: the eval mode (`[run] mode = eval`): one rollout per task over
 * the whole task set (greedy when rl.temperature = 0), up to rl.max_turns
 * turns, and the Fast@p table users quote. Fast@p counts a task when its
 * kernel is correct, not a hack and faster than eager PyTorch by more than
 * p; the denominator is every task in the set, so a missing, failing or
 * untimed answer counts as not fast. */
#ifndef DK_EVAL_RUN_H
#define DK_EVAL_RUN_H

#include "common/error.h"
#include "trainer/config.h"

dk_status eval_run(const dk_config *cfg);

#endif
