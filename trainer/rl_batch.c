/* rl_batch.c: flattens rollouts into the per-token arrays of rl_batch.h. */
#include "trainer/rl_batch.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void rl_batch_cells(const rl_rollout *rollouts, int n, int max_turns, float *rewards, uint8_t *valid,
                    uint8_t *correct, float *coverage) {
    const size_t cells = (size_t)n * max_turns;
    memset(rewards, 0, cells * sizeof *rewards);
    memset(valid, 0, cells);
    memset(correct, 0, cells);
    memset(coverage, 0, cells * sizeof *coverage);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < rollouts[i].n_turns; t++) {
            const size_t c = (size_t)i * max_turns + t;
            const rl_turn_result *r = &rollouts[i].res[t];
            rewards[c] = (float)r->reward;
            valid[c] = r->outcome != RL_OUT_ERROR;
            correct[c] = (uint8_t)r->correct;
            coverage[c] = (float)r->coverage;
        }
}

void rl_batch_build(rl_batch *b, const rl_rollout *rollouts, int n, int max_turns, const float *adv,
                    const uint8_t *valid) {
    memset(b, 0, sizeof *b);
    b->n_seqs = n;
    b->seq_start = dk_calloc((size_t)n + 1, sizeof *b->seq_start);
    for (int i = 0; i < n; i++) b->seq_start[i + 1] = b->seq_start[i] + rollouts[i].seq->n_tokens;
    b->T = b->seq_start[n];
    size_t T = (size_t)b->T;
    b->tokens = dk_calloc(T, sizeof *b->tokens);
    b->targets = dk_calloc(T, sizeof *b->targets);
    b->mask = dk_calloc(T, 1);
    b->adv = dk_calloc(T, sizeof(float));
    b->logp_rollout = dk_calloc(T, sizeof(float));
    b->logp_old = dk_calloc(T, sizeof(float));
    b->logp_ref = dk_calloc(T, sizeof(float));
    b->logp = dk_calloc(T, sizeof(float));
    b->entropy = dk_calloc(T, sizeof(float));
    for (int i = 0; i < n; i++) {
        const rl_rollout *r = &rollouts[i];
        const gen_seq *s = r->seq;
        const int base = b->seq_start[i];
        const size_t cell = (size_t)i * max_turns; /* (task * n_samples + sample) * max_turns */
        memcpy(b->tokens + base, s->tokens, (size_t)s->n_tokens * sizeof(int32_t));
        for (int t = 0; t < s->n_tokens; t++) b->targets[base + t] = -1;
        for (int turn = 0; turn < r->n_turns; turn++) {
            if (!valid[cell + turn]) continue;
            for (int p = r->turn_start[turn]; p < r->turn_end[turn]; p++) {
                if (p == 0 || !s->sampled[p]) continue;
                const int t = base + p - 1;
                b->targets[t] = s->tokens[p];
                b->mask[t] = 1;
                b->adv[t] = adv[cell + turn];
                b->logp_rollout[t] = s->logprobs[p];
            }
        }
    }
}

void rl_batch_free(rl_batch *b) {
    free(b->seq_start);
    free(b->tokens);
    free(b->targets);
    free(b->mask);
    free(b->adv);
    free(b->logp_rollout);
    free(b->logp_old);
    free(b->logp_ref);
    free(b->logp);
    free(b->entropy);
    memset(b, 0, sizeof *b);
}
