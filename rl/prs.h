/* prs.h: profiling-based rejection sampling (docs/DESIGN.md §8 step 4). A correct
 * kernel that leaves most of the GPU time to PyTorch's own kernels (low
 * coverage: the "lazy optimisation" of docs/DESIGN.md §9) would otherwise be
 * reinforced as a success, so such turns are taken out of training:
 *
 *   hard  drop a correct turn whose coverage < threshold (0.3, the recipe
 *         write-up; the default); coverage == threshold is kept.
 *   soft  keep a correct turn with probability
 *         clip((coverage - threshold) / width, 0, 1), width 0.1 (the public
 *         14B training script): always dropped at or below 0.3, always kept
 *         from 0.4 on.
 *   off   keep everything.
 *
 * What is dropped is exactly one turn of one sample: its valid flag goes to
 * 0, so its tokens leave the PPO loss and it leaves its (task, turn)
 * advantage group. The sample's other turns are untouched, and the dropped
 * turn's reward still counts in the returns of the turns before it (see
 * advantage.h). Turns that are not correct (compile error, incorrect, hack,
 * timeout, crash, no code) are never dropped: their low reward is already
 * the signal. A correct turn without a profile (coverage NaN, as on the CPU)
 * is kept and counted as unprofiled: there is no evidence of laziness.
 *
 * The soft draw is a counter-based function of (seed, step, task, sample,
 * turn), so it depends neither on batch order nor on world size; pass a
 * stable task id (its index in the task set), not the position in a batch. */
#ifndef DK_RL_PRS_H
#define DK_RL_PRS_H

#include <stdint.h>

#include "common/error.h"

typedef enum { PRS_OFF = 0, PRS_HARD = 1, PRS_SOFT = 2 } prs_mode;
enum { PRS_N_MODES = PRS_SOFT + 1 };
/* The modes' names, indexed by prs_mode: the one table that prs_mode_name,
 * prs_mode_parse and the run config's rl.prs key read. */
extern const char *const prs_mode_names[PRS_N_MODES];

typedef struct {
    prs_mode mode;
    double threshold; /* 0.3 */
    double width;     /* soft ramp width (0.1) */
    uint64_t seed;
} prs_config;

typedef struct {
    int n_correct;    /* valid correct turns seen */
    int n_dropped;    /* of those, dropped */
    int n_unprofiled; /* of those, kept because coverage was NaN */
} prs_stats;

void prs_config_default(prs_config *c); /* hard, 0.3, 0.1, seed 0 */
const char *prs_mode_name(prs_mode m);
dk_status prs_mode_parse(const char *s, prs_mode *out);
/* Rejects a threshold outside [0, 1] and a soft width <= 0. */
dk_status prs_config_check(const prs_config *c);

/* Keep probability of one turn (1 for incorrect or unprofiled turns). */
double prs_keep_prob(const prs_config *c, int correct, double coverage);
/* The uniform draw in [0, 1) for one turn. */
double prs_uniform(uint64_t seed, int64_t step, int64_t task, int sample, int turn);
/* 1 to keep the turn, 0 to drop it. */
int prs_keep(const prs_config *c, int64_t step, int64_t task, int sample, int turn, int correct, double coverage);

/* Over a batch in advantage.h's [n_tasks x n_samples x max_turns] layout:
 * clears valid[] of the dropped turns (invalid turns stay invalid and are not
 * counted). task_ids[n_tasks] are the stable ids that key the draw (NULL: the
 * position). stats may be NULL. */
void prs_apply(const prs_config *c, int64_t step, int n_tasks, int n_samples, int max_turns, const int64_t *task_ids,
               const uint8_t *correct, const float *coverage, uint8_t *valid, prs_stats *stats);

#endif
