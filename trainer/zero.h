/* zero.h: ZeRO-3 (fully sharded data parallel) over the model's flat units
 * (model/params.h): the embedding, each decoder layer, the final norm and
 * the untied lm head. Each rank keeps 1/world of every unit (dist/shard.h):
 * its act parameters, the fp32 masters (the act shard itself on fp32
 * backends), the AdamW moments and the fp32 gradients.
 *
 * The model runs with own_params = 0 and these hooks (model.h):
 *   forward:  a layer's weights are all-gathered into one of two working
 *             slots just before it runs, and the next layer's gather is
 *             issued at once, so it overlaps this layer's compute;
 *   backward: the same gathers in reverse (a slot that still holds the layer
 *             is not gathered again); a layer's gradients accumulate in one
 *             of two fp32 working slots and are reduce-scattered into the
 *             owners' shards as soon as its backward is queued, overlapping
 *             the next layer's backward. Gradient accumulation over
 *             micro-batches: the slot starts as zeros with this rank's slice
 *             holding its shard so far, so the reduce-scatter leaves
 *             shard + this micro-batch's sum.
 *   The embedding, final norm and lm head are gathered once per optimizer
 *   step into buffers of their own and stay until the next step.
 * zero_step clips by the global norm (one all-reduce of the sum of squares)
 * and runs AdamW on the local shards, which refreshes the act shards.
 * At world 1 the result is bit-identical to the unsharded model + optim.c. */
#ifndef DK_ZERO_H
#define DK_ZERO_H

#include <stddef.h>

#include "common/error.h"
#include "dist/comm.h"
#include "model/model.h"
#include "trainer/optim.h"

/* One unit's local shard: elements [begin, end) of the unit's n (end - begin
 * real ones; the slice is len long, the rest is padding and stays zero). */
typedef struct {
    size_t n, len, begin, end;
    void *param;         /* act [len] */
    float *master;       /* fp32 [len]; == (float *)param on fp32 backends */
    float *m, *v, *grad; /* fp32 [len] */
    void *ref;           /* act [len]: the frozen reference's shard (zero_keep_reference), or NULL */
} zero_unit;

typedef struct zero {
    comm *c;
    ops_ctx *ctx;
    model *model;
    param_layout pl;
    optim_config oc;
    int t;                 /* optimizer steps taken */
    int n_layers, n_units; /* units: 0 embed, 1..L layers, L+1 final norm, L+2 lm head (untied only) */
    int fp32;              /* act is fp32: the act shard is the master */
    zero_unit *u;
    void *full_param[3];   /* gathered embedding, final norm, lm head (padded) */
    float *full_grad[3];
    int full_fresh;        /* they hold this step's weights */
    void *slot_param[2];   /* layer l lives in slot l & 1 */
    float *slot_grad[2];
    int slot_layer[2];     /* the layer a slot holds (-1: none) */
    comm_req *slot_req[2]; /* its gather, while in flight */
    comm_req *grad_req[2]; /* a grad slot's reduce-scatter, while in flight */
    int dir;               /* +1 forward, -1 backward: where the next layer is */
    int working;           /* the working set (full_*, slot_*) is allocated */
    int ref_on;            /* the reference's shards stand in for the parameters */
    size_t device_bytes;
} zero;

/* Shards m (created with model_create_ex(..., own_params = 0)) over c's
 * ranks: allocates the shards and working sets on m's ctx and installs the
 * hooks. Parameters start at zero: zero_load_host next. */
dk_status zero_init(zero *z, model *m, comm *c, const optim_config *oc);
void zero_free(zero *z);

/* Points m (created with own_params = 0, after a model_free and
 * model_create_ex of the one zero_init had) at the working set and installs
 * the hooks. */
void zero_attach(zero *z, model *m);

/* Phases (RL): the working set exists for training only. Release frees it
 * (after the gathers and scatters in flight); restore makes it again and
 * re-attaches z->model. Bytes: what the working set takes. */
void zero_working_release(zero *z);
void zero_working_restore(zero *z);
size_t zero_working_bytes(const zero *z);

/* The frozen KL reference, sharded like the parameters: keep copies the
 * act shards as they are now (the run's initial weights) into shards of
 * their own, 1/world of the model in the act dtype, no master, moments or
 * gradients. use(1) makes every gather read the reference's shards, so the
 * hooked model's forward is the reference's; use(0) goes back. No
 * optimizer step while it is on. */
void zero_keep_reference(zero *z);
void zero_use_reference(zero *z, int on);

/* The inference copy: every unit's act shards all-gathered (collective) into
 * one buffer per unit (padded; the allocator's alignment, which the ops'
 * vector loads want, for each), zero_full_bytes in all; out->layers holds
 * n_layers slots the caller owns. zero_full_free frees the units. */
size_t zero_full_bytes(const zero *z);
void zero_gather_full(zero *z, param_buffers *out);
void zero_full_free(zero *z, param_buffers *full);

/* The model hook zero_init installs (user = z); a caller that wraps it (a
 * benchmark timing each layer) calls it from its own. */
void zero_hook(void *user, model *m, model_hook_event ev, int layer);

/* Every rank passes the full fp32 weights (param_buffers.h); each keeps its
 * slices, and the masters are the act values read back (as optim_init). */
void zero_load_host(zero *z, const param_buffers *host);
/* The full fp32 masters into host on every rank (collective). */
void zero_gather_host(zero *z, param_buffers *host);
/* One AdamW step on the local shards; returns the global pre-clip norm. */
double zero_step(zero *z, double lr);

/* ---- shards for checkpoints (collective-free, this rank only) ------------- */

typedef enum { ZERO_PARAM, ZERO_MASTER, ZERO_M, ZERO_V } zero_field;

/* Unit u (0 .. z->n_units-1) holds n elements; this rank owns [*begin,
 * *end) of them (shard_range of dist/shard.h). */
void zero_unit_range(const zero *z, int u, size_t *n, size_t *begin, size_t *end);
/* Copies this rank's end - begin real elements of a field to / from a host
 * fp32 array. Setting ZERO_PARAM also sets the master where the backend
 * keeps one apart (its act cast back, as zero_load_host); setting
 * ZERO_MASTER alone leaves the act shard as it is until the next step. */
void zero_shard_get(zero *z, int u, zero_field f, float *host);
void zero_shard_set(zero *z, int u, zero_field f, const float *host);
/* Optimizer steps taken (AdamW's bias correction), for state.json. */
static inline int zero_step_count(const zero *z) { return z->t; }
static inline void zero_set_step_count(zero *z, int t) { z->t = t; }

#endif
