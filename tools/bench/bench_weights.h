/* bench_weights.h: random weights for the model benchmarks (bench_generate,
 * bench_train), fast. Their speed does not depend on the values, and a
 * 1.7B model drawn value by value on the host takes longer than a whole
 * benchmark; so one block of normal(0, 0.02) values is uploaded at shifting
 * offsets into every weight, and every norm weight is 1. Header-only: each
 * benchmark is one program. */
#ifndef DK_BENCH_WEIGHTS_H
#define DK_BENCH_WEIGHTS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "model/model.h"

/* Exits with the program's name and what failed. */
static inline void bench_must(const char *prog, dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "%s: %s: %s\n", prog, what, dk_error());
        exit(1);
    }
}

static inline uint64_t bench_next_u64(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline float bench_next_normal(uint64_t *state) {
    double u1 = ((bench_next_u64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (bench_next_u64(state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static inline void bench_fill(model *m, void *ptr, size_t n, const float *blk, size_t block, size_t *off) {
    const size_t A = ops_act_size(m->ctx);
    for (size_t i0 = 0; i0 < n; i0 += block) {
        size_t k = n - i0 < block ? n - i0 : block;
        size_t s = (*off += 4099) % (block - k + 1);
        ops_upload_act(m->ctx, (char *)ptr + i0 * A, blk + s, k);
    }
}

static inline void bench_random_weights(model *m, uint64_t seed) {
    const size_t BLOCK = (size_t)1 << 22;
    float *blk = dk_malloc(BLOCK * sizeof(float));
    uint64_t state = seed ? seed : 1;
    for (size_t i = 0; i < BLOCK; i++) blk[i] = 0.02f * bench_next_normal(&state);
    const param_layout *pl = &m->layout;
    size_t off = 0;
    bench_fill(m, m->params.embed, pl->embed_size, blk, BLOCK, &off);
    for (int l = 0; l < m->cfg.n_layers; l++) bench_fill(m, m->params.layers[l], pl->layer_size, blk, BLOCK, &off);
    if (pl->lm_head_size) bench_fill(m, m->params.lm_head, pl->lm_head_size, blk, BLOCK, &off);
    const int C = m->cfg.hidden_size, D = m->cfg.head_dim, n1 = C > D ? C : D;
    float *ones = dk_malloc((size_t)n1 * sizeof(float));
    for (int i = 0; i < n1; i++) ones[i] = 1.0f;
    ops_upload_act(m->ctx, m->params.final_norm, ones, pl->final_norm_size);
    const dk_layer_tensor norms[] = {P_ATTN_NORM, P_MLP_NORM, P_Q_NORM, P_K_NORM};
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int j = 0; j < 4; j++)
            if (pl->size[norms[j]])
                ops_upload_act(m->ctx, param_layer_ptr(&m->params, pl, l, norms[j]), ones, pl->size[norms[j]]);
    ops_sync(m->ctx); /* the host blocks are freed next */
    free(ones);
    free(blk);
}


/* A model with the engine's bf16 weights alone (random, as above): no
 * gradients or fp32 masters, which for the 14B shape would take 59 GB and
 * more. The generation benchmarks run the 8B and 14B shapes this way. */
typedef struct {
    model m;
    void *weights; /* one allocation behind every parameter pointer */
    double weight_bytes;
    double kv_token_bytes; /* K and V of one token over all layers (bf16) */
} bench_model;

static inline void bench_model_open(bench_model *b, const model_config *c, ops_ctx *ctx, const char *prog) {
    bench_must(prog, model_create_ex(&b->m, c, ctx, 8, 0, 0), "model_create_ex");
    const param_layout *pl = &b->m.layout;
    const size_t A = ops_act_size(ctx);
    const size_t n = pl->embed_size + (size_t)c->n_layers * pl->layer_size + pl->final_norm_size + pl->lm_head_size;
    char *w = ops_alloc(ctx, n * A);
    b->weights = w;
    b->m.params.embed = w, w += pl->embed_size * A;
    for (int l = 0; l < c->n_layers; l++) b->m.params.layers[l] = w, w += pl->layer_size * A;
    b->m.params.final_norm = w, w += pl->final_norm_size * A;
    b->m.params.lm_head = pl->lm_head_size ? w : NULL;
    bench_random_weights(&b->m, 88172645463325252ull);
    b->weight_bytes = (double)n * A;
    b->kv_token_bytes = 2.0 * 2.0 * c->n_layers * c->n_kv_heads * c->head_dim;
}

static inline void bench_model_close(bench_model *b) {
    ops_ctx *ctx = b->m.ctx;
    model_free(&b->m);
    ops_free(ctx, b->weights);
}

#endif
