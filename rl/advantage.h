/* advantage.h: per-turn returns and advantages of a multi-turn rollout batch
 * (docs/DESIGN.md §8 steps 5-6).
 *
 * Layout: every array is [n_tasks x n_samples x max_turns], element
 * (task, sample, turn) at ((task * n_samples) + sample) * max_turns + turn.
 * valid[] marks the turns that train: 0 for a turn that was never reached
 * (the rollout stopped earlier) and for a turn that PRS dropped.
 *
 * Returns: G_t = r_t + gamma * G_{t+1}, over every turn of the sample. The
 * mask does not enter the return: a turn that PRS dropped still happened, so
 * its reward stays in the returns of the turns before it. The rollout must
 * therefore leave the reward of a turn it never reached at 0.
 *
 * Estimators (advantages of invalid turns are 0):
 *   trloo  group = (task, turn) over the N valid samples:
 *          A_i = N/(N-1) * (G_i - mean G) = G_i - mean of the others;
 *          A = G when N = 1; no std normalisation.
 *   grpo   group = (task, turn) over the valid samples:
 *          A_i = (G_i - mean G) / (std G + eps), mean including G_i itself,
 *          std the sample standard deviation (N - 1, as the GRPO
 *          implementations compute it); without normalisation
 *          A_i = G_i - mean G. A = G when N = 1.
 *   rloo   group = task: a sample's whole-trajectory return G_1 against the
 *          mean G_1 of the task's other samples (leave one out); every valid
 *          turn of the sample gets that one advantage. A sample counts when at
 *          least one of its turns is valid; A = G_1 when it is alone. */
#ifndef DK_RL_ADVANTAGE_H
#define DK_RL_ADVANTAGE_H

#include <stdint.h>

#include "common/error.h"

typedef enum { ADV_TRLOO = 0, ADV_GRPO = 1, ADV_RLOO = 2 } adv_estimator;
enum { ADV_N_ESTIMATORS = ADV_RLOO + 1 };
/* The estimators' names, indexed by adv_estimator: the one table that
 * adv_estimator_name, adv_estimator_parse and the run config's rl.advantage
 * key read. */
extern const char *const adv_estimator_names[ADV_N_ESTIMATORS];

typedef struct {
    adv_estimator estimator;
    double gamma;     /* discount of later turns (1) */
    int grpo_std;     /* grpo: divide by the group std (1) */
    double grpo_eps;  /* grpo: added to the std (1e-6) */
} adv_config;

void adv_config_default(adv_config *c);
const char *adv_estimator_name(adv_estimator e);
/* "trloo", "grpo", "rloo"; anything else is a usage error naming it. */
dk_status adv_estimator_parse(const char *s, adv_estimator *out);

/* returns[] (may be NULL) gets G_t, adv[] the advantages, both in the layout
 * above. Fails on sizes < 1, gamma outside [0, 1], a non-finite reward (named
 * by task, sample and turn). */
dk_status adv_compute(const adv_config *c, int n_tasks, int n_samples, int max_turns, const float *rewards,
                      const uint8_t *valid, float *returns, float *adv);

#endif
