/* micro_batch.h: how a step's sequences are cut into packed micro-batches
 * (one forward + backward each, gradients accumulated). Either a fixed count
 * of sequences (batch_size / grad_accum, planned at data.max_length tokens
 * each) or, with [train] micro_batch_tokens, a token budget filled greedily
 * in order, which keeps long-context steps within planned memory whatever
 * the length mix. */
#ifndef DK_MICRO_BATCH_H
#define DK_MICRO_BATCH_H

#include "trainer/config.h"

typedef struct {
    int max_seqs;    /* sequences per micro-batch at most */
    long max_tokens; /* tokens per micro-batch at most: what the model is planned for */
} micro_plan;

/* The plan for steps of n_seqs sequences split into `parts` optimizer steps
 * (RL mini-batches; 1 for SFT). */
micro_plan micro_plan_make(const dk_config *cfg, int n_seqs, int parts);
/* End (exclusive) of the micro-batch that starts at s0, among sequences
 * [s0, end) of lengths len[]: at least one sequence. */
int micro_next(const micro_plan *p, const int *len, int s0, int end);

#endif
