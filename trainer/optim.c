/* optim.c: AdamW step over every tensor of the layout. One ops_adamw call per
 * tensor so weight decay can differ between matrices and vectors while the
 * state stays in the shared flat layout. */
#include "trainer/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static void alloc_like(ops_ctx *ctx, param_buffers *b, const param_layout *pl, int n_layers) {
    memset(b, 0, sizeof *b);
    b->elem_size = 4;
    b->n_layers = n_layers;
    b->embed = ops_alloc(ctx, pl->embed_size * 4);
    b->layers = dk_calloc((size_t)n_layers, sizeof(void *));
    for (int l = 0; l < n_layers; l++) b->layers[l] = ops_alloc(ctx, pl->layer_size * 4);
    b->final_norm = ops_alloc(ctx, pl->final_norm_size * 4);
    b->lm_head = pl->lm_head_size ? ops_alloc(ctx, pl->lm_head_size * 4) : NULL;
}

static void free_buffers(ops_ctx *ctx, param_buffers *b) {
    if (!b->layers) return;
    ops_free(ctx, b->embed);
    for (int l = 0; l < b->n_layers; l++) ops_free(ctx, b->layers[l]);
    free(b->layers);
    ops_free(ctx, b->final_norm);
    if (b->lm_head) ops_free(ctx, b->lm_head);
    memset(b, 0, sizeof *b);
}

void optim_init(optim *o, ops_ctx *ctx, const optim_config *cfg, const model_config *mc, const param_buffers *params) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    param_layout_init(&o->pl, mc);
    alloc_like(ctx, &o->m, &o->pl, mc->n_layers);
    alloc_like(ctx, &o->v, &o->pl, mc->n_layers);
    o->has_master = params->elem_size != 4;
    if (o->has_master) {
        alloc_like(ctx, &o->master, &o->pl, mc->n_layers);
        ops_cast_act_to_f32(ctx, o->master.embed, params->embed, o->pl.embed_size);
        for (int l = 0; l < mc->n_layers; l++)
            ops_cast_act_to_f32(ctx, o->master.layers[l], params->layers[l], o->pl.layer_size);
        ops_cast_act_to_f32(ctx, o->master.final_norm, params->final_norm, o->pl.final_norm_size);
        if (params->lm_head) ops_cast_act_to_f32(ctx, o->master.lm_head, params->lm_head, o->pl.lm_head_size);
    }
}

void optim_free(optim *o, ops_ctx *ctx) {
    free_buffers(ctx, &o->m);
    free_buffers(ctx, &o->v);
    free_buffers(ctx, &o->master);
}

double optim_grad_norm(ops_ctx *ctx, const param_layout *pl, const param_buffers *grads) {
    double ss = ops_sumsq(ctx, grads->embed, pl->embed_size);
    for (int l = 0; l < grads->n_layers; l++) ss += ops_sumsq(ctx, grads->layers[l], pl->layer_size);
    ss += ops_sumsq(ctx, grads->final_norm, pl->final_norm_size);
    if (grads->lm_head) ss += ops_sumsq(ctx, grads->lm_head, pl->lm_head_size);
    return sqrt(ss);
}

/* What every per-tensor update of one step shares. */
typedef struct {
    optim *o;
    ops_ctx *ctx;
    float lr, scale;
} step_args;

static void update(const step_args *a, void *param, float *master, const float *grad, float *m, float *v, size_t off,
                   size_t n, int decay, size_t act) {
    if (n == 0) return;
    const optim_config *c = &a->o->cfg;
    ops_adamw(a->ctx, (char *)param + off * act, master ? master + off : (float *)((char *)param + off * act),
              grad + off, m + off, v + off, n, a->lr, c->beta1, c->beta2, c->eps, decay ? c->weight_decay : 0.0f,
              a->o->t, a->scale);
}

double optim_step(optim *o, ops_ctx *ctx, param_buffers *params, const param_buffers *grads, double lr) {
    double norm = optim_grad_norm(ctx, &o->pl, grads);
    float scale = 1.0f;
    if (o->cfg.grad_clip > 0 && norm > o->cfg.grad_clip) scale = (float)(o->cfg.grad_clip / (norm + 1e-6));
    o->t++;
    step_args a = {o, ctx, (float)lr, scale};
    const size_t act = params->elem_size;
    const param_layout *pl = &o->pl;
#define MASTER(field) (o->has_master ? (float *)o->master.field : NULL)
    update(&a, params->embed, MASTER(embed), grads->embed, o->m.embed, o->v.embed, 0, pl->embed_size, 1, act);
    for (int l = 0; l < params->n_layers; l++) {
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            update(&a, params->layers[l], MASTER(layers[l]), grads->layers[l], o->m.layers[l], o->v.layers[l],
                   pl->off[t], pl->size[t], pl->rows[t] > 1, act);
        }
    }
    update(&a, params->final_norm, MASTER(final_norm), grads->final_norm, o->m.final_norm, o->v.final_norm, 0,
           pl->final_norm_size, 0, act);
    if (params->lm_head)
        update(&a, params->lm_head, MASTER(lm_head), grads->lm_head, o->m.lm_head, o->v.lm_head, 0, pl->lm_head_size,
               1, act);
#undef MASTER
    return norm;
}
