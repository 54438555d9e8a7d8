/* rl_update.h: one RL step's policy update (docs/DESIGN.md §8 steps 7-8): the
 * old logprobs recomputed by the training forward, then PPO epochs over
 * mini-batches (one optimizer step each), each split into packed
 * micro-batches whose gradients accumulate into the mini-batch's.
 *
 * Data parallel: every rank holds a contiguous run of the batch's sequences
 * (global ids seq0 .. seq0 + b->n_seqs - 1 of n_global). Mini-batches are
 * cut from the global sequence order, so they do not depend on the world
 * size; each rank runs its part of each one and the denominators (counted
 * tokens or sequences) and the statistics are summed over ranks. A model
 * replicated on every rank has its gradients all-reduced before every
 * optimizer step, which every rank then takes alike. A sharded one (z,
 * trainer/zero.h) reduce-scatters them layer by layer during the backward
 * and steps its shards (zero_step, global-norm clipping); since its gathers
 * are collectives, a rank with fewer micro-batches in a mini-batch (or
 * none) runs one-token masked ones in their place, which add nothing. */
#ifndef DK_RL_UPDATE_H
#define DK_RL_UPDATE_H

#include "dist/comm.h"
#include "model/model.h"
#include "rl/ppo.h"
#include "trainer/optim.h"
#include "trainer/micro_batch.h"
#include "trainer/rl_batch.h"
#include "trainer/zero.h"

typedef struct {
    ppo_config ppo;
    int epochs, mini_batches;
    micro_plan plan;                      /* how mini-batches are cut into micro-batches */
    float inv_temp;                       /* 1 / sampling temperature: the rollout's distribution */
    double lr;
    comm *c;                              /* the ranks sharing the batch */
    int seq0, n_global;                   /* this rank's first sequence; sequences over all ranks */
    zero *z;                              /* the model's shards, or NULL: a replica (and optim o) */
} rl_update_config;

typedef struct {
    ppo_stats ppo;          /* token-weighted means over all micro-batches of the last epoch (all ranks) */
    double loss;            /* mean over mini-batches of the last epoch */
    double grad_norm;       /* of the last optimizer step */
    double entropy;         /* mean entropy over counted tokens (old policy, all ranks) */
    long train_tokens;      /* tokens through forward + backward (all ranks) */
    double train_s;
    int optimizer_steps;
    /* Device memory of the step (ops_mem_bytes, this rank): what both
     * phases keep (the shards or the replica and its optimizer state), the
     * rollout phase's peak, the train phase's, what is allocated after the
     * update, and the inference copy and KV cache the rollout phase made. */
    size_t mem_base, mem_rollout_peak, mem_train_peak, mem_bytes, mem_infer_copy, mem_kv_cache;
} rl_update_stats;

/* Per-token logprobs (and entropies when entropy != NULL) of the batch under
 * the model's current weights, forward only, into host arrays [b->T].
 * pad: the ranks of a sharded model, which all run as many forwards as the
 * rank with the most micro-batches; NULL for a replica. */
dk_status rl_forward_logprobs(model *m, const rl_batch *b, const micro_plan *plan, float inv_temp, float *logp,
                              float *entropy, comm *pad);
/* Fills b->logp_old, runs the update (o unused when c->z is set); b->logp_ref must be filled when
 * ppo.kl_coef > 0. */
dk_status rl_update(model *m, optim *o, rl_batch *b, const rl_update_config *c, rl_update_stats *st);

#endif
