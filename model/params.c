/* params.c: computes the flat parameter layout of params.h from the config. */
#include "model/params.h"

#include <string.h>

static const char *names[P_LAYER_COUNT] = {
    "attn_norm", "wq", "wk", "wv", "bq", "bk", "bv", "q_norm", "k_norm",
    "wo", "bo", "mlp_norm", "w_gate_up", "w_down",
};

const char *param_layer_tensor_name(dk_layer_tensor t) { return (t >= 0 && t < P_LAYER_COUNT) ? names[t] : "?"; }

void param_layout_init(param_layout *pl, const model_config *c) {
    memset(pl, 0, sizeof *pl);
    const int C = c->hidden_size, D = c->head_dim, Q = c->n_heads * D, KV = c->n_kv_heads * D;
    const int I = c->intermediate_size;
    int rows[P_LAYER_COUNT] = {0}, cols[P_LAYER_COUNT] = {0};
#define SET(t, r, cc) (rows[t] = (r), cols[t] = (cc))
    SET(P_ATTN_NORM, 1, C);
    SET(P_WQ, Q, C);
    SET(P_WK, KV, C);
    SET(P_WV, KV, C);
    if (c->qkv_bias) {
        SET(P_BQ, 1, Q);
        SET(P_BK, 1, KV);
        SET(P_BV, 1, KV);
    }
    if (c->qk_norm) {
        SET(P_Q_NORM, 1, D);
        SET(P_K_NORM, 1, D);
    }
    SET(P_WO, C, Q);
    if (c->o_bias) SET(P_BO, 1, C);
    SET(P_MLP_NORM, 1, C);
    SET(P_W_GATE_UP, 2 * I, C);
    SET(P_W_DOWN, C, I);
#undef SET
    size_t off = 0;
    for (int t = 0; t < P_LAYER_COUNT; t++) {
        pl->rows[t] = rows[t];
        pl->cols[t] = cols[t];
        pl->size[t] = (size_t)rows[t] * (size_t)cols[t];
        pl->off[t] = off;
        off += pl->size[t];
    }
    pl->layer_size = off;
    pl->embed_size = (size_t)c->vocab_size * C;
    pl->final_norm_size = (size_t)C;
    pl->lm_head_size = c->tie_embeddings ? 0 : (size_t)c->vocab_size * C;
}
