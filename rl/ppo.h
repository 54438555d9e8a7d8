/* ppo.h: the clipped PPO objective per token, its aggregation over a packed
 * batch and its gradient for the new logprobs (docs/DESIGN.md §8 step 8).
 * Host arrays in, host arrays out: the trainer downloads the model's
 * per-token logprobs (and entropies), calls ppo_loss, and uploads dlogprob
 * (and dentropy) for model_backward. Every per-token array is indexed like
 * model->logprob: entry t scores the token that follows position t.
 *
 * Per counted token, with r = exp(logp - logp_old) and advantage A:
 *   pg   = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))
 *          and, with dual clip c > 1, for A < 0: pg = min(pg, -A c)
 *   loss = w_tis * pg + kl_coef * k3 - entropy_coef * H
 * where k3 = exp(ref - logp) - (ref - logp) - 1 is the low-variance KL
 * estimate to the reference policy (not clamped), H the token's entropy and w_tis the
 * truncated importance weight min(exp(logp_old - logp_rollout), tis_cap) on
 * the mismatch between the trainer's old logprobs and the rollout engine's,
 * a constant (no gradient flows through it).
 *
 * Which tokens count: mask[t] != 0 (model-written tokens; prompts and
 * KernelGym feedback are 0), minus what rollout-mismatch rejection removes.
 * With rho = exp(logp_old - logp_rollout):
 *   rs_token_band d  drops a token with rho outside [1 - d, 1 + d];
 *   rs_seq_band d    drops a whole sequence whose geometric-mean rho over
 *                    its masked tokens is outside [1 - d, 1 + d];
 *   rs_veto v        drops a whole sequence holding a masked token with
 *                    rho < v (one catastrophic token vetoes it).
 * Rejected tokens count nowhere: not in the loss, not in the denominators.
 *
 * Aggregation over the counted tokens (n_s of them in sequence s; S the
 * sequences with n_s > 0, N the total):
 *   token-mean            L = sum_t loss_t / N
 *   seq-mean-token-sum    L = sum_s (sum_{t in s} loss_t) / S
 *   seq-mean-token-mean   L = sum_s (sum_{t in s} loss_t / n_s) / S
 * With gradient accumulation over micro-batches, pass the mini-batch's N (or
 * S) as `denom` so that the micro-batch gradients add up to the mini-batch
 * gradient; ppo_count gives a micro-batch's share. */
#ifndef DK_RL_PPO_H
#define DK_RL_PPO_H

#include <stdint.h>

#include "common/error.h"

typedef enum { PPO_AGG_TOKEN_MEAN = 0, PPO_AGG_SEQ_MEAN_TOKEN_SUM = 1, PPO_AGG_SEQ_MEAN_TOKEN_MEAN = 2 } ppo_agg;
enum { PPO_N_AGG = PPO_AGG_SEQ_MEAN_TOKEN_MEAN + 1 };
/* The aggregations' names, indexed by ppo_agg: the one table that
 * ppo_agg_name, ppo_agg_parse and the run config's rl.loss_agg key read. */
extern const char *const ppo_agg_names[PPO_N_AGG];

typedef struct {
    double clip_low;     /* 0.2 */
    double clip_high;    /* 0.2 (the public 14B script: 0.28) */
    double dual_clip;    /* 0: off (the public 14B script: 3); else > 1 */
    ppo_agg agg;         /* seq-mean-token-sum */
    double kl_coef;      /* 0: no reference policy needed */
    double entropy_coef; /* 0: no entropies needed */
    double tis_cap;      /* 0: off; else the cap (> 0) of the importance weight */
    double rs_token_band, rs_seq_band, rs_veto; /* 0: off */
} ppo_config;

/* One packed batch (host arrays, T tokens). cu_seqlens as in model_batch.
 * logp_ref is needed when kl_coef > 0, entropy when entropy_coef > 0,
 * logp_rollout for TIS or rejection; otherwise they may be NULL. When
 * logp_rollout is given the mismatch statistics are computed. */
typedef struct {
    int T, n_seqs;
    const int32_t *cu_seqlens; /* [n_seqs + 1] */
    const uint8_t *mask;       /* [T] 1 = a token the model wrote */
    const float *logp;         /* [T] current policy (the one being trained) */
    const float *logp_old;     /* [T] policy before this update (trainer's recompute) */
    const float *adv;          /* [T] the advantage of the token's turn */
    const float *logp_ref;     /* [T] reference policy */
    const float *entropy;      /* [T] */
    const float *logp_rollout; /* [T] recorded by the generation engine */
} ppo_batch;

typedef struct {
    double loss;          /* the aggregated objective */
    double pg_loss;       /* its terms, aggregated the same way */
    double kl_loss;       /* kl_coef * aggregated k3 (0 without reference) */
    double entropy;       /* aggregated entropy (0 without entropies) */
    /* Token means over the counted tokens: */
    double clip_frac_low;  /* A < 0 and r < 1 - clip_low: the low clip zeroes the gradient */
    double clip_frac_high; /* A > 0 and r > 1 + clip_high */
    double clip_frac_dual; /* A < 0 and the dual clip is the active branch */
    double approx_kl;      /* k3 estimate of KL(old || new): r - 1 - log r */
    double ratio_mean, ratio_max;
    double ref_kl;         /* k3 to the reference (0 without one) */
    double tis_mean;       /* mean importance weight (1 without TIS) */
    double tis_capped_frac;
    /* Over every masked token, before rejection (0 without logp_rollout): */
    double mismatch_mean, mismatch_max; /* |logp_old - logp_rollout| */
    int n_tokens, n_seqs;               /* counted */
    int n_tokens_rejected, n_seqs_rejected;
} ppo_stats;

void ppo_config_default(ppo_config *c);
const char *ppo_agg_name(ppo_agg a);
/* "token-mean", "seq-mean-token-sum", "seq-mean-token-mean". */
dk_status ppo_agg_parse(const char *s, ppo_agg *out);
/* Ranges: clip_low in [0, 1), clip_high >= 0, dual_clip 0 or > 1, coefs >= 0,
 * tis_cap >= 0, bands and veto in [0, 1), all finite. */
dk_status ppo_config_check(const ppo_config *c);

/* The counted tokens and sequences of a batch after rejection: the
 * micro-batch's share of the token-mean (N) and seq-mean (S) denominators. */
dk_status ppo_count(const ppo_config *c, const ppo_batch *b, int *n_tokens, int *n_seqs);

/* The objective (into stats->loss), dlogprob[T] = dL/dlogp and, when
 * dentropy is not NULL, dentropy[T] = dL/dH (zero outside counted tokens).
 * denom <= 0 takes this batch's own N or S. Fails, naming the token, on a
 * missing input array, bad cu_seqlens or a non-finite value on a masked
 * token. A batch with no counted token has loss 0 and zero gradients. */
dk_status ppo_loss(const ppo_config *c, const ppo_batch *b, double denom, float *dlogprob, float *dentropy,
                   ppo_stats *stats);

#endif
