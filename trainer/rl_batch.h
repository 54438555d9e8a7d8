/* rl_batch.h: the training view of a step's rollouts. Each rollout becomes
 * one sequence (the whole conversation); position t predicts token t+1, and
 * counts only when token t+1 was sampled by the model in a turn that trains
 * (reached, not dropped by PRS). Its advantage is that turn's; the rollout
 * engine's logprob of token t+1 is kept for the mismatch statistics. */
#ifndef DK_RL_BATCH_H
#define DK_RL_BATCH_H

#include <stdint.h>

#include "rl/rollout.h"

typedef struct {
    int n_seqs;
    long T;               /* tokens over all sequences */
    int *seq_start;       /* [n_seqs + 1] offsets into the arrays below */
    int32_t *tokens, *targets; /* targets[t] = tokens[t+1] or -1 */
    uint8_t *mask;        /* 1 where targets[t] counts */
    float *adv, *logp_rollout, *logp_old, *logp_ref, *logp, *entropy;
} rl_batch;

/* The step's per-turn cells in advantage.h's [n_tasks x n_samples x
 * max_turns] layout from n rollouts: reward, correctness, coverage, and
 * valid = 1 for a turn that was generated and judged. A turn without a
 * verdict (RL_OUT_ERROR: the judge unreachable, no result by the batch's
 * deadline, a broken task) is not valid: scored 0 it would count as a
 * wrong answer in its group's baseline and its own advantage. Cells of
 * turns not reached stay 0. */
void rl_batch_cells(const rl_rollout *rollouts, int n, int max_turns, float *rewards, uint8_t *valid,
                    uint8_t *correct, float *coverage);

/* adv and valid are in advantage.h's [n_tasks x n_samples x max_turns]
 * layout; rollouts[i] is sample i % n_samples of task i / n_samples. */
void rl_batch_build(rl_batch *b, const rl_rollout *rollouts, int n, int max_turns, const float *adv,
                    const uint8_t *valid);
void rl_batch_free(rl_batch *b);

#endif
