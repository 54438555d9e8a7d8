/* eval_report.h: reduces eval rollouts to Fast@p per turn and best over
 * turns, correctness and hack rates, mean and geometric-mean speedups, and
 * writes the per-task table (stdout) and RUN_DIR/eval.json. */
#ifndef DK_EVAL_REPORT_H
#define DK_EVAL_REPORT_H

#include <stdio.h>

#include "rl/rollout.h"

#define EVAL_N_P 4
extern const double eval_p[EVAL_N_P]; /* 1.0, 1.2, 1.5, 2.0 */

typedef struct {
    int n_tasks, max_turns;
    double fast[RL_MAX_TURNS + 1][EVAL_N_P]; /* per turn; index max_turns = best over turns */
    double correct_rate[RL_MAX_TURNS + 1], hack_rate[RL_MAX_TURNS + 1];
    double speedup_mean, speedup_geomean; /* over tasks with a correct timed kernel (best turn) */
    int n_speedups;
} eval_summary;

/* rollouts[i] belongs to tasks[i] (one sample each). */
void eval_summarise(eval_summary *s, const rl_rollout *ro, int n, int max_turns);
void eval_print(FILE *f, const eval_summary *s, const rl_rollout *ro, const rl_task *tasks, int n);
dk_status eval_write_json(const char *path, const eval_summary *s, const rl_rollout *ro, const rl_task *tasks, int n);

#endif
