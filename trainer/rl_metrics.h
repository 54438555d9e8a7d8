/* rl_metrics.h: what one RL step reports: the console line and the
 * metrics.jsonl record (rewards per turn, outcome rates, coverage, PRS, PPO
 * statistics, timings and throughputs). */
#ifndef DK_RL_METRICS_H
#define DK_RL_METRICS_H

#include "rl/prs.h"
#include "rl/rollout.h"
#include "trainer/metrics.h"
#include "trainer/rl_update.h"

typedef struct {
    int max_turns;
    double reward_mean[RL_MAX_TURNS], reward_std[RL_MAX_TURNS];
    int n_turn[RL_MAX_TURNS];
    double reward_mean_all;
    double fast1;            /* samples whose best turn is correct with speedup > 1 */
    double correct_rate, hack_rate, compile_error_rate, no_code_rate, timeout_rate, error_rate;
    double coverage_mean;    /* over correct turns with a profile */
    double speedup_mean;     /* over correct timed turns */
    double prs_drop_rate;
    double response_len_mean;
    int n_evaluated;
    long judge_lost;         /* evaluations scored 0 because the judge stayed unreachable (rl_env.judge_lost) */
} rl_step_summary;

void rl_metrics_summarise(rl_step_summary *s, const rl_rollout *ro, int n, int max_turns, const float *rewards,
                          const prs_stats *ps);
void rl_metrics_write(metrics_log *ml, int step, const rl_step_summary *s, const rl_rollout_stats *rs,
                      const rl_update_stats *us, double lr, double step_s);
void rl_metrics_print(int step, int steps, const rl_step_summary *s, const rl_rollout_stats *rs,
                      const rl_update_stats *us, double step_s);

#endif
