/* zero.c: the ZeRO-3 shards, the model hooks that gather layers and scatter
 * their gradients (zero.h says the schedule), and AdamW on the shards. */
#include "trainer/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/copy.h"
#include "dist/shard.h"

/* Index of a non-layer unit among the gathered ones, or -1 for a layer. */
static int full_index(const zero *z, int u) {
    if (u == 0) return 0;
    if (u == z->n_layers + 1) return 1;
    if (u == z->n_layers + 2) return 2;
    return -1;
}

static size_t unit_size(const zero *z, int u) {
    switch (full_index(z, u)) {
    case 0: return z->pl.embed_size;
    case 1: return z->pl.final_norm_size;
    case 2: return z->pl.lm_head_size;
    default: return z->pl.layer_size;
    }
}

/* The unit's array inside a host buffer set. */
static float *unit_host(const zero *z, const param_buffers *b, int u) {
    switch (full_index(z, u)) {
    case 0: return b->embed;
    case 1: return b->final_norm;
    case 2: return b->lm_head;
    default: return b->layers[u - 1];
    }
}

static void *dev(zero *z, size_t bytes) {
    z->device_bytes += bytes;
    return ops_alloc(z->ctx, bytes);
}

/* The train phase's working set: the gathered embedding, final norm and lm
 * head (weights and gradients) and the two layer slots of each. */
static void working_alloc(zero *z) {
    const size_t A = ops_act_size(z->ctx);
    const int W = z->c->world;
    for (int i = 0; i < z->n_units; i++) {
        int f = full_index(z, i);
        if (f < 0) continue;
        z->full_param[f] = dev(z, z->u[i].len * W * A);
        z->full_grad[f] = dev(z, z->u[i].len * W * sizeof(float));
    }
    const size_t layer_padded = shard_padded(z->pl.layer_size, W);
    for (int s = 0; s < 2; s++) {
        z->slot_param[s] = dev(z, layer_padded * A);
        z->slot_grad[s] = dev(z, layer_padded * sizeof(float));
        z->slot_layer[s] = -1;
    }
    z->full_fresh = 0;
    z->working = 1;
}

/* Waits for the gathers and scatters in flight and frees the working set. */
static void working_free(zero *z) {
    for (int s = 0; s < 2; s++) {
        if (z->slot_req[s]) comm_wait(z->c, z->slot_req[s]);
        if (z->grad_req[s]) comm_wait(z->c, z->grad_req[s]);
        z->slot_req[s] = z->grad_req[s] = NULL;
    }
    ops_sync(z->ctx);
    for (int f = 0; f < 3; f++) {
        if (z->full_param[f]) ops_free(z->ctx, z->full_param[f]);
        if (z->full_grad[f]) ops_free(z->ctx, z->full_grad[f]);
        z->full_param[f] = NULL;
        z->full_grad[f] = NULL;
    }
    for (int s = 0; s < 2; s++) {
        ops_free(z->ctx, z->slot_param[s]);
        ops_free(z->ctx, z->slot_grad[s]);
        z->slot_param[s] = NULL;
        z->slot_grad[s] = NULL;
        z->slot_layer[s] = -1;
    }
    z->device_bytes -= zero_working_bytes(z);
    z->full_fresh = 0;
    z->working = 0;
}

dk_status zero_init(zero *z, model *m, comm *c, const optim_config *oc) {
    memset(z, 0, sizeof *z);
    if (m->own_params) DK_ABORT("zero_init: the model must be created with own_params = 0");
    z->c = c;
    z->ctx = m->ctx;
    z->model = m;
    z->pl = m->layout;
    z->oc = *oc;
    z->n_layers = m->cfg.n_layers;
    z->n_units = z->n_layers + 2 + (z->pl.lm_head_size ? 1 : 0);
    const size_t A = ops_act_size(z->ctx);
    z->fp32 = A == sizeof(float);
    const int W = c->world;
    z->u = dk_calloc((size_t)z->n_units, sizeof(zero_unit));
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        u->n = unit_size(z, i);
        u->len = shard_len(u->n, W);
        shard_range(u->n, W, c->rank, &u->begin, &u->end);
        u->param = dev(z, u->len * A);
        u->master = z->fp32 ? (float *)u->param : dev(z, u->len * sizeof(float));
        u->m = dev(z, u->len * sizeof(float));
        u->v = dev(z, u->len * sizeof(float));
        u->grad = dev(z, u->len * sizeof(float));
    }
    working_alloc(z);
    zero_attach(z, m);
    return DK_OK;
}

void zero_attach(zero *z, model *m) {
    if (m->own_params) DK_ABORT("zero_attach: the model must be created with own_params = 0");
    z->model = m;
    m->params.embed = z->full_param[0];
    m->params.final_norm = z->full_param[1];
    m->params.lm_head = z->full_param[2];
    m->grads.embed = z->full_grad[0];
    m->grads.final_norm = z->full_grad[1];
    m->grads.lm_head = z->full_grad[2];
    m->hooks.fn = zero_hook;
    m->hooks.user = z;
}

void zero_free(zero *z) {
    if (!z->u) return;
    if (z->working) working_free(z);
    if (z->ref_on) zero_use_reference(z, 0);
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        ops_free(z->ctx, u->param);
        if (!z->fp32) ops_free(z->ctx, u->master);
        ops_free(z->ctx, u->m);
        ops_free(z->ctx, u->v);
        ops_free(z->ctx, u->grad);
        if (u->ref) ops_free(z->ctx, u->ref);
    }
    free(z->u);
    z->model->hooks.fn = NULL;
    memset(z, 0, sizeof *z);
}

size_t zero_working_bytes(const zero *z) {
    const size_t A = ops_act_size(z->ctx), W = (size_t)z->c->world;
    size_t n = 2 * shard_padded(z->pl.layer_size, (int)W) * (A + sizeof(float));
    for (int i = 0; i < z->n_units; i++)
        if (full_index(z, i) >= 0) n += z->u[i].len * W * (A + sizeof(float));
    return n;
}

void zero_working_release(zero *z) {
    if (z->working) working_free(z);
}

void zero_working_restore(zero *z) {
    if (z->working) return;
    working_alloc(z);
    zero_attach(z, z->model);
}

/* ---- the frozen reference ------------------------------------------------------ */

void zero_keep_reference(zero *z) {
    if (z->ref_on) DK_ABORT("zero_keep_reference: the reference is in use");
    const size_t A = ops_act_size(z->ctx);
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        if (!u->ref) u->ref = dev(z, u->len * A);
        dist_copy(z->ctx, u->ref, u->param, u->len * A);
    }
    ops_sync(z->ctx);
}

void zero_use_reference(zero *z, int on) {
    on = on != 0;
    if (on == z->ref_on) return;
    for (int i = 0; i < z->n_units; i++)
        if (!z->u[i].ref) DK_ABORT("zero_use_reference: no reference kept (zero_keep_reference first)");
    /* Gathers in flight read the shards being swapped. */
    for (int s = 0; s < 2; s++)
        if (z->slot_req[s]) {
            comm_wait(z->c, z->slot_req[s]);
            z->slot_req[s] = NULL;
        }
    for (int i = 0; i < z->n_units; i++) {
        void *t = z->u[i].param;
        z->u[i].param = z->u[i].ref;
        z->u[i].ref = t;
    }
    z->ref_on = on;
    z->full_fresh = 0;
    z->slot_layer[0] = z->slot_layer[1] = -1;
}

/* ---- the inference copy -------------------------------------------------------- */

size_t zero_full_bytes(const zero *z) {
    size_t n = 0;
    for (int i = 0; i < z->n_units; i++) n += z->u[i].len * (size_t)z->c->world;
    return n * ops_act_size(z->ctx);
}

/* The unit's pointer slot inside a buffer set. */
static void **unit_slot(const zero *z, param_buffers *b, int u) {
    switch (full_index(z, u)) {
    case 0: return &b->embed;
    case 1: return &b->final_norm;
    case 2: return &b->lm_head;
    default: return &b->layers[u - 1];
    }
}

void zero_gather_full(zero *z, param_buffers *out) {
    const size_t A = ops_act_size(z->ctx);
    out->n_layers = z->n_layers;
    out->elem_size = A;
    out->lm_head = NULL;
    for (int i = 0; i < z->n_units; i++) {
        const zero_unit *u = &z->u[i];
        void *p = ops_alloc(z->ctx, u->len * (size_t)z->c->world * A);
        comm_all_gather(z->c, p, u->param, u->len * A);
        *unit_slot(z, out, i) = p;
    }
}

void zero_full_free(zero *z, param_buffers *full) {
    ops_sync(z->ctx);
    for (int i = 0; i < z->n_units; i++) {
        void **p = unit_slot(z, full, i);
        if (*p) ops_free(z->ctx, *p);
        *p = NULL;
    }
}

/* ---- the schedule ---------------------------------------------------------- */

static comm_req *gather_async(zero *z, int unit, void *dst) {
    const zero_unit *u = &z->u[unit];
    return comm_all_gather_async(z->c, dst, u->param, u->len * ops_act_size(z->ctx));
}

/* Issues the gather of layer l into its slot unless the slot holds it. */
static void layer_prefetch(zero *z, int l) {
    if (l < 0 || l >= z->n_layers) return;
    const int s = l & 1;
    if (z->slot_layer[s] == l) return;
    if (z->slot_req[s]) comm_wait(z->c, z->slot_req[s]);
    z->slot_req[s] = gather_async(z, 1 + l, z->slot_param[s]);
    z->slot_layer[s] = l;
}

static void layer_params(zero *z, int l) {
    const int s = l & 1;
    layer_prefetch(z, l);
    if (z->slot_req[s]) {
        comm_wait(z->c, z->slot_req[s]);
        z->slot_req[s] = NULL;
    }
    z->model->params.layers[l] = z->slot_param[s];
    layer_prefetch(z, l + z->dir);
}

/* A working gradient buffer of a unit: zeros, with this rank's slice
 * holding the shard accumulated so far. */
static void grads_open(zero *z, int unit, float *full) {
    const zero_unit *u = &z->u[unit];
    ops_zero(z->ctx, full, u->len * (size_t)z->c->world * sizeof(float));
    dist_copy(z->ctx, full + u->len * (size_t)z->c->rank, u->grad, u->len * sizeof(float));
}

void zero_hook(void *user, model *m, model_hook_event ev, int l) {
    zero *z = user;
    switch (ev) {
    case MODEL_HOOK_FORWARD_BEGIN:
        z->dir = 1;
        if (!z->full_fresh) {
            comm_req *r[3] = {NULL, NULL, NULL};
            for (int i = 0; i < z->n_units; i++) {
                int f = full_index(z, i);
                if (f >= 0) r[f] = gather_async(z, i, z->full_param[f]);
            }
            for (int f = 0; f < 3; f++)
                if (r[f]) comm_wait(z->c, r[f]);
            z->full_fresh = 1;
        }
        break;
    case MODEL_HOOK_LAYER_PARAMS: layer_params(z, l); break;
    case MODEL_HOOK_BACKWARD_BEGIN:
        z->dir = -1;
        for (int i = 0; i < z->n_units; i++) {
            int f = full_index(z, i);
            if (f >= 0) grads_open(z, i, z->full_grad[f]);
        }
        break;
    case MODEL_HOOK_LAYER_GRADS: {
        const int g = l & 1;
        if (z->grad_req[g]) {
            comm_wait(z->c, z->grad_req[g]);
            z->grad_req[g] = NULL;
        }
        grads_open(z, 1 + l, z->slot_grad[g]);
        m->grads.layers[l] = z->slot_grad[g];
        break;
    }
    case MODEL_HOOK_LAYER_GRADS_DONE: {
        const int g = l & 1;
        const zero_unit *u = &z->u[1 + l];
        z->grad_req[g] = comm_reduce_scatter_async(z->c, u->grad, z->slot_grad[g], u->len);
        break;
    }
    case MODEL_HOOK_BACKWARD_END:
        for (int g = 0; g < 2; g++)
            if (z->grad_req[g]) {
                comm_wait(z->c, z->grad_req[g]);
                z->grad_req[g] = NULL;
            }
        for (int i = 0; i < z->n_units; i++) {
            int f = full_index(z, i);
            if (f >= 0) comm_reduce_scatter(z->c, z->u[i].grad, z->full_grad[f], z->u[i].len);
        }
        break;
    case MODEL_HOOK_ZERO_GRAD:
        for (int i = 0; i < z->n_units; i++) ops_zero(z->ctx, z->u[i].grad, z->u[i].len * sizeof(float));
        break;
    }
}

/* ---- weights in and out ----------------------------------------------------- */

void zero_load_host(zero *z, const param_buffers *host) {
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        const float *src = unit_host(z, host, i) + u->begin;
        ops_upload_act(z->ctx, u->param, src, u->end - u->begin);
        if (!z->fp32) ops_cast_act_to_f32(z->ctx, u->master, u->param, u->end - u->begin);
    }
    ops_sync(z->ctx); /* the caller frees host next */
    z->full_fresh = 0;
    z->slot_layer[0] = z->slot_layer[1] = -1;
}

void zero_gather_host(zero *z, param_buffers *host) {
    size_t most = 0;
    for (int i = 0; i < z->n_units; i++)
        if (z->u[i].len > most) most = z->u[i].len;
    float *tmp = ops_alloc(z->ctx, most * (size_t)z->c->world * sizeof(float));
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        comm_all_gather(z->c, tmp, u->master, u->len * sizeof(float));
        ops_download(z->ctx, unit_host(z, host, i), tmp, u->n * sizeof(float));
    }
    ops_sync(z->ctx);
    ops_free(z->ctx, tmp);
}

/* ---- AdamW on the shards ------------------------------------------------------ */

/* AdamW over the unit's local elements [lo, hi) (unit coordinates). */
static void adamw_range(zero *z, zero_unit *u, size_t lo, size_t hi, int decay, float lr, float scale) {
    if (lo < u->begin) lo = u->begin;
    if (hi > u->end) hi = u->end;
    if (hi <= lo) return;
    const size_t o = lo - u->begin, A = ops_act_size(z->ctx);
    const optim_config *c = &z->oc;
    ops_adamw(z->ctx, (char *)u->param + o * A, u->master + o, u->grad + o, u->m + o, u->v + o, hi - lo, lr,
              c->beta1, c->beta2, c->eps, decay ? c->weight_decay : 0.0f, z->t, scale);
}

double zero_step(zero *z, double lr) {
    if (z->ref_on) DK_ABORT("zero_step: the frozen reference is in use");
    /* The units in optim_grad_norm's order, so world 1 sums alike. */
    double ss = 0.0;
    for (int i = 0; i < z->n_units; i++) ss += ops_sumsq(z->ctx, z->u[i].grad, z->u[i].end - z->u[i].begin);
    comm_all_reduce_host(z->c, &ss, 1);
    const double norm = sqrt(ss);
    float scale = 1.0f;
    if (z->oc.grad_clip > 0 && norm > z->oc.grad_clip) scale = (float)(z->oc.grad_clip / (norm + 1e-6));
    z->t++;
    const param_layout *pl = &z->pl;
    for (int i = 0; i < z->n_units; i++) {
        zero_unit *u = &z->u[i];
        int f = full_index(z, i);
        if (f >= 0) { /* the embedding and lm head decay, the final norm does not */
            adamw_range(z, u, 0, u->n, f != 1, (float)lr, scale);
            continue;
        }
        for (int t = 0; t < P_LAYER_COUNT; t++)
            if (pl->size[t]) adamw_range(z, u, pl->off[t], pl->off[t] + pl->size[t], pl->rows[t] > 1, (float)lr, scale);
    }
    z->full_fresh = 0;
    z->slot_layer[0] = z->slot_layer[1] = -1;
    return norm;
}

/* ---- shards for checkpoints ------------------------------------------------------ */

void zero_unit_range(const zero *z, int u, size_t *n, size_t *begin, size_t *end) {
    if (u < 0 || u >= z->n_units) DK_ABORT("zero: unit %d outside 0..%d", u, z->n_units - 1);
    *n = z->u[u].n;
    *begin = z->u[u].begin;
    *end = z->u[u].end;
}

static float *field_ptr(zero_unit *u, zero_field f) {
    switch (f) {
    case ZERO_MASTER: return u->master;
    case ZERO_M: return u->m;
    case ZERO_V: return u->v;
    default: return NULL;
    }
}

void zero_shard_get(zero *z, int i, zero_field f, float *host) {
    if (i < 0 || i >= z->n_units) DK_ABORT("zero: unit %d outside 0..%d", i, z->n_units - 1);
    zero_unit *u = &z->u[i];
    const size_t n = u->end - u->begin;
    if (f == ZERO_PARAM) ops_download_act(z->ctx, host, u->param, n);
    else ops_download(z->ctx, host, field_ptr(u, f), n * sizeof(float));
    ops_sync(z->ctx);
}

void zero_shard_set(zero *z, int i, zero_field f, const float *host) {
    if (i < 0 || i >= z->n_units) DK_ABORT("zero: unit %d outside 0..%d", i, z->n_units - 1);
    zero_unit *u = &z->u[i];
    const size_t n = u->end - u->begin;
    if (f == ZERO_PARAM) {
        ops_upload_act(z->ctx, u->param, host, n);
        if (!z->fp32) ops_cast_act_to_f32(z->ctx, u->master, u->param, n);
        z->full_fresh = 0;
        z->slot_layer[0] = z->slot_layer[1] = -1;
    } else {
        ops_upload(z->ctx, field_ptr(u, f), host, n * sizeof(float));
    }
    ops_sync(z->ctx);
}
