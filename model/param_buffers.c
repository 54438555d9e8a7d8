/* param_buffers.c: host allocation of a param_buffers set and its random
 * initialisation from a counter-based generator (docs/DESIGN.md §3: randomness is
 * keyed, never drawn from a stream, so it does not depend on call order). */
#include "model/param_buffers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void param_buffers_alloc_host(param_buffers *b, const param_layout *pl, int n_layers, int tied, size_t elem_size) {
    memset(b, 0, sizeof *b);
    b->n_layers = n_layers;
    b->elem_size = elem_size;
    b->embed = dk_calloc(pl->embed_size, elem_size);
    b->layers = dk_calloc((size_t)(n_layers > 0 ? n_layers : 1), sizeof *b->layers);
    for (int l = 0; l < n_layers; l++) b->layers[l] = dk_calloc(pl->layer_size, elem_size);
    b->final_norm = dk_calloc(pl->final_norm_size, elem_size);
    b->lm_head = tied ? NULL : dk_calloc(pl->lm_head_size, elem_size);
}

void param_buffers_free_host(param_buffers *b) {
    if (b->layers)
        for (int l = 0; l < b->n_layers; l++) free(b->layers[l]);
    free(b->layers);
    free(b->embed);
    free(b->final_norm);
    free(b->lm_head);
    memset(b, 0, sizeof *b);
}

/* splitmix64's finaliser: a bijective 64-bit mix with full avalanche. */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fixed ids so a tensor's values do not change with the number of layers. */
enum { ID_EMBED = 0, ID_FINAL_NORM = 1, ID_LM_HEAD = 2, ID_LAYER0 = 16 };

/* normal(0, std) into x[0..n): element i comes from the Box-Muller pair i/2 of
 * key (seed, id), taking the cosine branch for even i and the sine for odd. */
static void fill_normal(float *x, size_t n, uint64_t seed, uint64_t id, float std) {
    const uint64_t key = mix64(mix64(seed) ^ mix64(id + 0x632be59bd9b4e019ull));
    const double two_pi = 6.283185307179586476925;
    for (size_t p = 0; 2 * p < n; p++) {
        uint64_t h1 = mix64(key ^ (2 * (uint64_t)p)), h2 = mix64(key ^ (2 * (uint64_t)p + 1));
        double u1 = ((double)(h1 >> 11) + 1.0) * 0x1p-53; /* (0, 1]: log stays finite */
        double u2 = (double)(h2 >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1)) * std;
        x[2 * p] = (float)(r * cos(two_pi * u2));
        if (2 * p + 1 < n) x[2 * p + 1] = (float)(r * sin(two_pi * u2));
    }
}

static void fill_const(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

void param_init_random(param_buffers *b, const param_layout *pl, const model_config *c, uint64_t seed, float std) {
    DK_ASSERT(b->elem_size == sizeof(float));
    DK_ASSERT(b->n_layers == c->n_layers);
    fill_normal(b->embed, pl->embed_size, seed, ID_EMBED, std);
    fill_const(b->final_norm, pl->final_norm_size, 1.0f);
    if (b->lm_head) fill_normal(b->lm_head, pl->lm_head_size, seed, ID_LM_HEAD, std);
    for (int l = 0; l < b->n_layers; l++) {
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            float *x = param_layer_ptr(b, pl, l, (dk_layer_tensor)t);
            size_t n = pl->size[t];
            switch ((dk_layer_tensor)t) {
            case P_ATTN_NORM: case P_MLP_NORM: case P_Q_NORM: case P_K_NORM:
                fill_const(x, n, 1.0f);
                break;
            case P_BQ: case P_BK: case P_BV: case P_BO:
                fill_const(x, n, 0.0f);
                break;
            default:
                fill_normal(x, n, seed, ID_LAYER0 + (uint64_t)l * P_LAYER_COUNT + (uint64_t)t, std);
                break;
            }
        }
    }
}
