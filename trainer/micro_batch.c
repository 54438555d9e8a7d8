/* micro_batch.c: the two micro-batch plans of micro_batch.h. */
#include "trainer/micro_batch.h"

#include <limits.h>

micro_plan micro_plan_make(const dk_config *cfg, int n_seqs, int parts) {
    micro_plan p;
    if (cfg->train.micro_batch_tokens > 0) {
        p.max_seqs = INT_MAX;
        p.max_tokens = cfg->train.micro_batch_tokens;
    } else {
        p.max_seqs = n_seqs / (parts * cfg->train.grad_accum);
        if (p.max_seqs < 1) p.max_seqs = 1;
        p.max_tokens = (long)p.max_seqs * cfg->data.max_length;
    }
    return p;
}

int micro_next(const micro_plan *p, const int *len, int s0, int end) {
    int s1 = s0 + 1;
    long tokens = len[s0];
    while (s1 < end && s1 - s0 < p->max_seqs && tokens + len[s1] <= p->max_tokens) tokens += len[s1++];
    return s1;
}
