/* rl_update.c: PPO over packed micro-batches. The loss gradient per token
 * (rl/ppo.c) is uploaded as dL/dlogprob and backpropagated by the model; the
 * mini-batch's token or sequence count is the shared denominator, so the
 * micro-batch gradients add up to the mini-batch gradient exactly. Over
 * several ranks the same holds for the ranks' parts of a mini-batch: their
 * denominators are summed first, their gradients after (rl_update.h). */
#include "trainer/rl_update.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* The model batch of sequences [s0, s1). */
static model_batch micro(const rl_batch *b, int s0, int s1, int32_t *cu) {
    const int off = b->seq_start[s0];
    for (int s = s0; s <= s1; s++) cu[s - s0] = b->seq_start[s] - off;
    model_batch mb = {b->seq_start[s1] - off, s1 - s0, b->tokens + off, NULL, cu, b->targets + off};
    return mb;
}

/* Sequence lengths of the batch, for micro_next. */
static int *seq_lens(const rl_batch *b) {
    int *len = dk_malloc((size_t)(b->n_seqs ? b->n_seqs : 1) * sizeof(int));
    for (int s = 0; s < b->n_seqs; s++) len[s] = b->seq_start[s + 1] - b->seq_start[s];
    return len;
}

/* x[n] := the largest value over ranks, in place. */
static void max_over_ranks(comm *c, double *x, int n) {
    if (c->world == 1) return;
    double *all = NULL;
    comm_all_gather_host(c, x, (size_t)n * sizeof(double), (void **)&all, NULL);
    for (int r = 0; r < c->world; r++)
        for (int i = 0; i < n; i++)
            if (all[r * n + i] > x[i]) x[i] = all[r * n + i];
    free(all);
}

/* Micro-batches of sequences [s0, s1). */
static int micro_count(const micro_plan *plan, const int *len, int s0, int s1) {
    int n = 0;
    for (int a = s0; a < s1; a = micro_next(plan, len, a, s1)) n++;
    return n;
}

/* The micro-batches a rank with n of its own runs in all: the most any rank
 * has when the model is sharded (pad != NULL), whose gathers and scatters
 * are collectives every rank must call alike; else its own. */
static int micro_calls(comm *pad, int n) {
    if (!pad) return n;
    double x = n;
    max_over_ranks(pad, &x, 1);
    return (int)x;
}

/* What a rank runs in place of a micro-batch it does not have: one masked
 * token forward (and backward with a zero dL/dlogprob, which adds nothing
 * to the gradients). */
static dk_status idle_micro(model *m, int backward) {
    static const int32_t tok[1] = {0}, tgt[1] = {-1}, cu[2] = {0, 1};
    model_batch mb = {1, 1, tok, NULL, cu, tgt};
    DK_TRY(model_forward(m, &mb, 1.0f));
    if (backward) {
        ops_zero(m->ctx, m->dlogprob, sizeof(float));
        model_backward(m, m->dlogprob, NULL);
    }
    return DK_OK;
}

dk_status rl_forward_logprobs(model *m, const rl_batch *b, const micro_plan *plan, float inv_temp, float *logp,
                              float *entropy, comm *pad) {
    int32_t *cu = dk_malloc(((size_t)b->n_seqs + 1) * sizeof(int32_t));
    int *len = seq_lens(b);
    dk_status st = DK_OK;
    const int calls = micro_calls(pad, micro_count(plan, len, 0, b->n_seqs));
    int done = 0;
    for (int s0 = 0, s1; s0 < b->n_seqs && st == DK_OK; s0 = s1, done++) {
        s1 = micro_next(plan, len, s0, b->n_seqs);
        model_batch mb = micro(b, s0, s1, cu);
        st = model_forward(m, &mb, inv_temp);
        if (st != DK_OK) break;
        const int off = b->seq_start[s0];
        ops_download(m->ctx, logp + off, m->logprob, (size_t)mb.T * sizeof(float));
        if (entropy) ops_download(m->ctx, entropy + off, m->entropy, (size_t)mb.T * sizeof(float));
    }
    for (; done < calls && st == DK_OK; done++) st = idle_micro(m, 0);
    free(cu);
    free(len);
    return st;
}

static ppo_batch ppo_view(const rl_batch *b, const rl_update_config *c, int s0, int s1, const int32_t *cu) {
    const int off = b->seq_start[s0];
    ppo_batch pb = {
        .T = b->seq_start[s1] - off,
        .n_seqs = s1 - s0,
        .cu_seqlens = cu,
        .mask = b->mask + off,
        .logp = b->logp + off,
        .logp_old = b->logp_old + off,
        .adv = b->adv + off,
        .logp_ref = c->ppo.kl_coef > 0 ? b->logp_ref + off : NULL,
        .entropy = b->entropy + off,
        .logp_rollout = b->logp_rollout + off,
    };
    return pb;
}

/* Adds a micro-batch's statistics with weight w (its counted tokens). */
static void stats_add(ppo_stats *acc, const ppo_stats *s, double w) {
    acc->clip_frac_low += w * s->clip_frac_low;
    acc->clip_frac_high += w * s->clip_frac_high;
    acc->clip_frac_dual += w * s->clip_frac_dual;
    acc->approx_kl += w * s->approx_kl;
    acc->ratio_mean += w * s->ratio_mean;
    if (s->ratio_max > acc->ratio_max) acc->ratio_max = s->ratio_max;
    acc->ref_kl += w * s->ref_kl;
    acc->tis_mean += w * s->tis_mean;
    acc->tis_capped_frac += w * s->tis_capped_frac;
    acc->mismatch_mean += w * s->mismatch_mean;
    if (s->mismatch_max > acc->mismatch_max) acc->mismatch_max = s->mismatch_max;
    acc->n_tokens += s->n_tokens;
    acc->n_seqs += s->n_seqs;
    acc->n_tokens_rejected += s->n_tokens_rejected;
    acc->n_seqs_rejected += s->n_seqs_rejected;
}

static void stats_finish(ppo_stats *acc, double w) {
    if (w <= 0) return;
    acc->clip_frac_low /= w;
    acc->clip_frac_high /= w;
    acc->clip_frac_dual /= w;
    acc->approx_kl /= w;
    acc->ratio_mean /= w;
    acc->ref_kl /= w;
    acc->tis_mean /= w;
    acc->tis_capped_frac /= w;
    acc->mismatch_mean /= w;
}

/* Sums every rank's gradients into every rank's (fp32, unit by unit). */
static void grads_all_reduce(comm *c, model *m) {
    const param_layout *pl = &m->layout;
    comm_all_reduce(c, m->grads.embed, pl->embed_size, COMM_F32);
    for (int l = 0; l < m->cfg.n_layers; l++) comm_all_reduce(c, m->grads.layers[l], pl->layer_size, COMM_F32);
    comm_all_reduce(c, m->grads.final_norm, pl->final_norm_size, COMM_F32);
    if (m->grads.lm_head) comm_all_reduce(c, m->grads.lm_head, pl->lm_head_size, COMM_F32);
}

/* An epoch's statistics summed over ranks (weighted means stay weighted
 * sums until stats_finish), its maxima maximised. */
static void stats_all_reduce(comm *c, ppo_stats *a, double *w_acc, double *loss_sum) {
    double x[] = {a->clip_frac_low, a->clip_frac_high, a->clip_frac_dual, a->approx_kl, a->ratio_mean,
                  a->ref_kl, a->tis_mean, a->tis_capped_frac, a->mismatch_mean, a->n_tokens, a->n_seqs,
                  a->n_tokens_rejected, a->n_seqs_rejected, *w_acc, *loss_sum};
    comm_all_reduce_host(c, x, sizeof x / sizeof *x);
    a->clip_frac_low = x[0];
    a->clip_frac_high = x[1];
    a->clip_frac_dual = x[2];
    a->approx_kl = x[3];
    a->ratio_mean = x[4];
    a->ref_kl = x[5];
    a->tis_mean = x[6];
    a->tis_capped_frac = x[7];
    a->mismatch_mean = x[8];
    a->n_tokens = (int)x[9];
    a->n_seqs = (int)x[10];
    a->n_tokens_rejected = (int)x[11];
    a->n_seqs_rejected = (int)x[12];
    *w_acc = x[13];
    *loss_sum = x[14];
    double mx[2] = {a->ratio_max, a->mismatch_max};
    max_over_ranks(c, mx, 2);
    a->ratio_max = mx[0];
    a->mismatch_max = mx[1];
}

dk_status rl_update(model *m, optim *o, rl_batch *b, const rl_update_config *c, rl_update_stats *st) {
    memset(st, 0, sizeof *st);
    double t0 = dk_now();
    const int want_entropy = c->ppo.entropy_coef > 0;
    comm *pad = c->z ? c->c : NULL;
    DK_TRY(rl_forward_logprobs(m, b, &c->plan, c->inv_temp, b->logp_old, b->entropy, pad));
    double ent = 0;
    long n_masked = 0;
    for (long t = 0; t < b->T; t++)
        if (b->mask[t]) {
            ent += b->entropy[t];
            n_masked++;
        }
    double ent_n[2] = {ent, (double)n_masked};
    comm_all_reduce_host(c->c, ent_n, 2);
    st->entropy = ent_n[1] > 0 ? ent_n[0] / ent_n[1] : NAN;

    const size_t T = (size_t)b->T;
    float *dlogp = dk_calloc(T, sizeof(float));
    float *dent = want_entropy ? dk_calloc(T, sizeof(float)) : NULL;
    int32_t *cu = dk_malloc(((size_t)b->n_seqs + 1) * sizeof(int32_t));
    int *len = seq_lens(b);
    const int per_mini = (c->n_global + c->mini_batches - 1) / c->mini_batches;
    const int world = c->c->world;
    dk_status s = DK_OK;
    for (int epoch = 0; epoch < c->epochs && s == DK_OK; epoch++) {
        ppo_stats acc;
        memset(&acc, 0, sizeof acc);
        double w_acc = 0, loss_sum = 0;
        int n_mini = 0;
        for (int g0 = 0; g0 < c->n_global && s == DK_OK; g0 += per_mini) {
            /* This rank's part [m0, m1) of the global mini-batch [g0, g1). */
            const int g1 = g0 + per_mini < c->n_global ? g0 + per_mini : c->n_global;
            int m0 = g0 - c->seq0, m1 = g1 - c->seq0;
            m0 = m0 < 0 ? 0 : m0 > b->n_seqs ? b->n_seqs : m0;
            m1 = m1 < m0 ? m0 : m1 > b->n_seqs ? b->n_seqs : m1;
            /* The mini-batch's denominator: its counted tokens or sequences. */
            long N = 0, S = 0;
            for (int s0 = m0, s1; s0 < m1; s0 = s1) {
                s1 = micro_next(&c->plan, len, s0, m1);
                micro(b, s0, s1, cu);
                ppo_batch pb = ppo_view(b, c, s0, s1, cu);
                pb.logp = pb.logp_old; /* counting needs no new logprobs */
                int nt = 0, ns = 0;
                s = ppo_count(&c->ppo, &pb, &nt, &ns);
                if (s != DK_OK) break;
                N += nt;
                S += ns;
            }
            if (s != DK_OK) break;
            double counts[2] = {(double)N, (double)S};
            comm_all_reduce_host(c->c, counts, 2);
            N = (long)counts[0];
            S = (long)counts[1];
            double denom = c->ppo.agg == PPO_AGG_TOKEN_MEAN ? (double)N : (double)S;
            model_zero_grad(m);
            double mini_loss = 0;
            const int calls = micro_calls(pad, micro_count(&c->plan, len, m0, m1));
            int done = 0;
            for (int s0 = m0, s1; s0 < m1 && s == DK_OK; s0 = s1, done++) {
                s1 = micro_next(&c->plan, len, s0, m1);
                model_batch mb = micro(b, s0, s1, cu);
                s = model_forward(m, &mb, c->inv_temp);
                if (s != DK_OK) break;
                const int off = b->seq_start[s0];
                ops_download(m->ctx, b->logp + off, m->logprob, (size_t)mb.T * sizeof(float));
                if (want_entropy) ops_download(m->ctx, b->entropy + off, m->entropy, (size_t)mb.T * sizeof(float));
                ppo_batch pb = ppo_view(b, c, s0, s1, cu);
                ppo_stats ps;
                s = ppo_loss(&c->ppo, &pb, denom > 0 ? denom : 1.0, dlogp + off, want_entropy ? dent + off : NULL, &ps);
                if (s != DK_OK) break;
                mini_loss += ps.loss;
                stats_add(&acc, &ps, ps.n_tokens);
                w_acc += ps.n_tokens;
                ops_upload(m->ctx, m->dlogprob, dlogp + off, (size_t)mb.T * sizeof(float));
                if (want_entropy) ops_upload(m->ctx, m->dentropy, dent + off, (size_t)mb.T * sizeof(float));
                model_backward(m, m->dlogprob, want_entropy ? m->dentropy : NULL);
                st->train_tokens += mb.T;
            }
            for (; done < calls && s == DK_OK; done++) s = idle_micro(m, 1);
            if (s != DK_OK) break;
            if (c->z) {
                st->grad_norm = zero_step(c->z, c->lr);
            } else {
                if (world > 1) grads_all_reduce(c->c, m);
                st->grad_norm = optim_step(o, m->ctx, &m->params, &m->grads, c->lr);
            }
            st->optimizer_steps++;
            loss_sum += mini_loss;
            n_mini++;
        }
        stats_all_reduce(c->c, &acc, &w_acc, &loss_sum);
        stats_finish(&acc, w_acc);
        st->ppo = acc;
        st->loss = n_mini ? loss_sum / n_mini : 0;
    }
    double tokens = (double)st->train_tokens;
    comm_all_reduce_host(c->c, &tokens, 1);
    st->train_tokens = (long)tokens;
    ops_sync(m->ctx);
    st->train_s = dk_now() - t0;
    free(dlogp);
    free(dent);
    free(cu);
    free(len);
    return s;
}
