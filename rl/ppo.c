/* ppo.c: the per-token clipped PPO loss with dual clip, k3 reference KL,
 * entropy bonus, truncated importance sampling and rollout-mismatch
 * rejection; its three aggregations and the analytic gradient (see ppo.h).
 * Everything is computed in double from the float inputs. */
#include "rl/ppo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void ppo_config_default(ppo_config *c) {
    memset(c, 0, sizeof *c);
    c->clip_low = 0.2;
    c->clip_high = 0.2;
    c->dual_clip = 0.0;
    c->agg = PPO_AGG_SEQ_MEAN_TOKEN_SUM;
}

const char *const ppo_agg_names[PPO_N_AGG] = {[PPO_AGG_TOKEN_MEAN] = "token-mean",
                                               [PPO_AGG_SEQ_MEAN_TOKEN_SUM] = "seq-mean-token-sum",
                                               [PPO_AGG_SEQ_MEAN_TOKEN_MEAN] = "seq-mean-token-mean"};

const char *ppo_agg_name(ppo_agg a) {
    return (unsigned)a < PPO_N_AGG ? ppo_agg_names[a] : "?";
}

dk_status ppo_agg_parse(const char *s, ppo_agg *out) {
    for (int i = 0; i < PPO_N_AGG; i++)
        if (strcmp(s, ppo_agg_names[i]) == 0) {
            *out = (ppo_agg)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown loss aggregation '%s' (token-mean|seq-mean-token-sum|seq-mean-token-mean)", s);
}

dk_status ppo_config_check(const ppo_config *c) {
    const struct {
        const char *name;
        double v, lo, hi; /* v must lie in [lo, hi) */
    } r[] = {
        {"clip_low", c->clip_low, 0, 1},        {"clip_high", c->clip_high, 0, INFINITY},
        {"kl_coef", c->kl_coef, 0, INFINITY},   {"entropy_coef", c->entropy_coef, 0, INFINITY},
        {"tis_cap", c->tis_cap, 0, INFINITY},   {"rs_token_band", c->rs_token_band, 0, 1},
        {"rs_seq_band", c->rs_seq_band, 0, 1},  {"rs_veto", c->rs_veto, 0, 1},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (!(r[i].v >= r[i].lo && r[i].v < r[i].hi))
            return dk_fail(DK_ERR_USAGE, "ppo: %s = %g is outside [%g, %g)", r[i].name, r[i].v, r[i].lo, r[i].hi);
    if (!(c->dual_clip == 0 || (c->dual_clip > 1 && isfinite(c->dual_clip))))
        return dk_fail(DK_ERR_USAGE, "ppo: dual_clip = %g must be 0 (off) or > 1", c->dual_clip);
    if ((unsigned)c->agg > PPO_AGG_SEQ_MEAN_TOKEN_MEAN)
        return dk_fail(DK_ERR_USAGE, "ppo: unknown aggregation %d", (int)c->agg);
    return DK_OK;
}

static int needs_rollout(const ppo_config *c) {
    return c->tis_cap > 0 || c->rs_token_band > 0 || c->rs_seq_band > 0 || c->rs_veto > 0;
}

/* Checks the batch's arrays and values on the masked tokens. */
static dk_status check_batch(const ppo_config *c, const ppo_batch *b) {
    DK_TRY(ppo_config_check(c));
    if (b->T < 0 || b->n_seqs < 0 || !b->cu_seqlens || !b->mask || !b->logp || !b->logp_old || !b->adv)
        return dk_fail(DK_ERR_USAGE, "ppo: batch lacks cu_seqlens, mask, logp, logp_old or adv");
    if (c->kl_coef > 0 && !b->logp_ref) return dk_fail(DK_ERR_USAGE, "ppo: kl_coef > 0 needs reference logprobs");
    if (c->entropy_coef > 0 && !b->entropy) return dk_fail(DK_ERR_USAGE, "ppo: entropy_coef > 0 needs entropies");
    if (needs_rollout(c) && !b->logp_rollout)
        return dk_fail(DK_ERR_USAGE, "ppo: importance sampling or rejection needs the rollout logprobs");
    if (b->cu_seqlens[0] != 0 || b->cu_seqlens[b->n_seqs] != b->T)
        return dk_fail(DK_ERR_USAGE, "ppo: cu_seqlens must run from 0 to T = %d", b->T);
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->cu_seqlens[s + 1] < b->cu_seqlens[s])
            return dk_fail(DK_ERR_USAGE, "ppo: cu_seqlens decreases at sequence %d", s);
        for (int t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) {
            if (!b->mask[t]) continue;
            const struct {
                const char *name;
                const float *v;
            } a[] = {{"logp", b->logp},         {"logp_old", b->logp_old}, {"adv", b->adv},
                     {"logp_ref", b->logp_ref}, {"entropy", b->entropy},   {"logp_rollout", b->logp_rollout}};
            for (size_t k = 0; k < sizeof a / sizeof a[0]; k++)
                if (a[k].v && !isfinite(a[k].v[t]))
                    return dk_fail(DK_ERR_RUNTIME, "ppo: %s of token %d (sequence %d) is %g", a[k].name, t, s,
                                   a[k].v[t]);
        }
    }
    return DK_OK;
}

/* keep[t] = 1 for the tokens that count after rejection; returns the counts. */
static void select_tokens(const ppo_config *c, const ppo_batch *b, uint8_t *keep, ppo_stats *st) {
    for (int s = 0; s < b->n_seqs; s++) {
        const int t0 = b->cu_seqlens[s], t1 = b->cu_seqlens[s + 1];
        int n_mask = 0, n_keep = 0, vetoed = 0;
        double sum_log_rho = 0;
        for (int t = t0; t < t1; t++) {
            keep[t] = b->mask[t] != 0;
            if (!keep[t]) continue;
            n_mask++;
            if (!b->logp_rollout) continue;
            double log_rho = (double)b->logp_old[t] - b->logp_rollout[t];
            double rho = exp(log_rho);
            sum_log_rho += log_rho;
            if (c->rs_veto > 0 && rho < c->rs_veto) vetoed = 1;
            if (c->rs_token_band > 0 && fabs(rho - 1) > c->rs_token_band) keep[t] = 0;
        }
        int drop_seq = vetoed;
        if (c->rs_seq_band > 0 && n_mask > 0 && fabs(exp(sum_log_rho / n_mask) - 1) > c->rs_seq_band) drop_seq = 1;
        for (int t = t0; t < t1; t++) {
            if (drop_seq) keep[t] = 0;
            n_keep += keep[t];
        }
        st->n_tokens += n_keep;
        st->n_tokens_rejected += n_mask - n_keep;
        st->n_seqs += n_keep > 0;
        st->n_seqs_rejected += n_mask > 0 && n_keep == 0;
    }
}

dk_status ppo_count(const ppo_config *c, const ppo_batch *b, int *n_tokens, int *n_seqs) {
    DK_TRY(check_batch(c, b));
    uint8_t *keep = dk_malloc((size_t)b->T + 1);
    ppo_stats st = {0};
    select_tokens(c, b, keep, &st);
    free(keep);
    *n_tokens = st.n_tokens;
    *n_seqs = st.n_seqs;
    return DK_OK;
}

dk_status ppo_loss(const ppo_config *c, const ppo_batch *b, double denom, float *dlogprob, float *dentropy,
                   ppo_stats *stats) {
    DK_TRY(check_batch(c, b));
    if (c->entropy_coef > 0 && !dentropy)
        return dk_fail(DK_ERR_USAGE, "ppo: entropy_coef > 0 needs a dentropy array for its gradient");
    ppo_stats st = {0};
    uint8_t *keep = dk_malloc((size_t)b->T + 1);
    select_tokens(c, b, keep, &st);
    if (denom <= 0) denom = c->agg == PPO_AGG_TOKEN_MEAN ? st.n_tokens : st.n_seqs;

    const double lo = 1 - c->clip_low, hi = 1 + c->clip_high;
    int n_mask = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const int t0 = b->cu_seqlens[s], t1 = b->cu_seqlens[s + 1];
        int n_s = 0;
        for (int t = t0; t < t1; t++) n_s += keep[t];
        const double w = n_s == 0                                ? 0
                         : c->agg == PPO_AGG_SEQ_MEAN_TOKEN_MEAN ? 1.0 / (denom * n_s)
                                                                 : 1.0 / denom;
        for (int t = t0; t < t1; t++) {
            dlogprob[t] = 0;
            if (dentropy) dentropy[t] = 0;
            if (b->mask[t] && b->logp_rollout) {
                double mm = fabs((double)b->logp_old[t] - b->logp_rollout[t]);
                st.mismatch_mean += mm;
                if (mm > st.mismatch_max) st.mismatch_max = mm;
                n_mask++;
            }
            if (!keep[t]) continue;
            const double A = b->adv[t], log_r = (double)b->logp[t] - b->logp_old[t], r = exp(log_r);
            const double rc = r < lo ? lo : r > hi ? hi : r;
            double pg = -A * r, g = -A * r;
            if (-A * rc > pg) { /* the clipped branch is active: no gradient */
                pg = -A * rc;
                g = 0;
            }
            st.clip_frac_low += A < 0 && r < lo;
            st.clip_frac_high += A > 0 && r > hi;
            if (c->dual_clip > 0 && A < 0 && -A * c->dual_clip < pg) {
                pg = -A * c->dual_clip;
                g = 0;
                st.clip_frac_dual += 1;
            }
            double w_tis = 1;
            if (c->tis_cap > 0) {
                w_tis = exp((double)b->logp_old[t] - b->logp_rollout[t]);
                if (w_tis > c->tis_cap) {
                    w_tis = c->tis_cap;
                    st.tis_capped_frac += 1;
                }
            }
            double grad = w_tis * g, loss = w_tis * pg;
            st.pg_loss += w * w_tis * pg;
            if (b->logp_ref) {
                const double d = (double)b->logp_ref[t] - b->logp[t], k3 = exp(d) - d - 1;
                st.ref_kl += k3;
                st.kl_loss += w * c->kl_coef * k3;
                loss += c->kl_coef * k3;
                grad += c->kl_coef * (1 - exp(d));
            }
            if (b->entropy) {
                st.entropy += w * b->entropy[t];
                loss -= c->entropy_coef * b->entropy[t];
                if (dentropy) dentropy[t] = (float)(-c->entropy_coef * w);
            }
            st.loss += w * loss;
            dlogprob[t] = (float)(w * grad);
            st.approx_kl += r - 1 - log_r;
            st.ratio_mean += r;
            if (r > st.ratio_max) st.ratio_max = r;
            st.tis_mean += w_tis;
        }
    }
    free(keep);
    if (st.n_tokens > 0) {
        const double n = st.n_tokens;
        st.clip_frac_low /= n;
        st.clip_frac_high /= n;
        st.clip_frac_dual /= n;
        st.approx_kl /= n;
        st.ratio_mean /= n;
        st.ref_kl /= n;
        st.tis_mean /= n;
        st.tis_capped_frac /= n;
    }
    if (n_mask > 0) st.mismatch_mean /= n_mask;
    if (stats) *stats = st;
    return DK_OK;
}
