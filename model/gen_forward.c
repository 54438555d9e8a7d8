/* gen_forward.c: the inference forward of one engine step (gen_forward.h).
 * Only op-table calls; buffers are planned once for the engine's largest
 * step. */
#include "model/gen_forward.h"

#include <math.h>
#include <string.h>

static void *fwd_alloc(gen_forward *f, size_t bytes) {
    f->bytes += bytes;
    return ops_alloc(f->m->ctx, bytes);
}

void gen_forward_init(gen_forward *f, model *m, kv_cache *kv, int max_tokens, int max_rows) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->kv = kv;
    f->max_tokens = max_tokens;
    f->max_rows = max_rows;
    const model_config *c = &m->cfg;
    const size_t A = ops_act_size(m->ctx), T = (size_t)max_tokens, R = (size_t)max_rows;
    const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    f->x = fwd_alloc(f, T * C * A);
    f->ln = fwd_alloc(f, T * C * A);
    f->qkv = fwd_alloc(f, T * (Q + 2 * KV) * A);
    const size_t TF = T < GEN_FUSED_QKV_TOKENS ? T : GEN_FUSED_QKV_TOKENS;
    if (TF > 1) f->qkv_fused = fwd_alloc(f, TF * (Q + 2 * KV) * A);
    f->qk = fwd_alloc(f, T * (Q + KV) * A); /* normed, rotated q (and k) */
    f->att = fwd_alloc(f, T * Q * A);
    f->gu = fwd_alloc(f, T * 2 * I * A);
    f->h = fwd_alloc(f, T * I * A);
    f->rstd = fwd_alloc(f, T * (size_t)c->n_heads * sizeof(float));
    f->lse = fwd_alloc(f, T * (size_t)c->n_heads * sizeof(float));
    f->xs = fwd_alloc(f, R * C * A);
    f->lnf = fwd_alloc(f, R * C * A);
    f->logits = fwd_alloc(f, R * (size_t)c->vocab_size * sizeof(float));
}

void gen_forward_free(gen_forward *f) {
    if (!f->m) return;
    ops_ctx *ctx = f->m->ctx;
    void *bufs[] = {f->x, f->ln, f->qkv, f->qkv_fused, f->qk, f->att, f->gu, f->h, f->rstd, f->lse, f->xs, f->lnf, f->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) ops_free(ctx, bufs[i]);
    memset(f, 0, sizeof *f);
}

int gen_forward_qkv_rows(const model_config *c, int T, int32_t *rows) {
    if (T <= 1 || T > GEN_FUSED_QKV_TOKENS) return 0;
    /* The fused output is [T * (G+2), Hkv*D] rows: per token G rows of q,
     * then k, then v. */
    const int G = c->n_heads / c->n_kv_heads, R = G + 2;
    int n = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < G; j++) rows[n++] = t * R + j;
    for (int t = 0; t < T; t++) rows[n++] = t * R + G;
    for (int t = 0; t < T; t++) rows[n++] = t * R + G + 1;
    return n;
}

/* x += a W^T (a [T, K], W [C, K]), the sum rounded once. Up to
 * OPS_MATMUL_FEW_ROWS rows the backend's few-row kernels do that in
 * place; past them its in-place product would round a W^T first
 * (kernels/ops_list.h), so the sum is written beside x into f->ln, which
 * is dead at both calls (the norm output the products before have read),
 * and the two buffers trade places. A layer's o and down products trade
 * under the same condition, so x is back in its own buffer at the end of
 * every layer, and a captured graph replays the pointers it recorded. */
static void residual_product(gen_forward *f, const void *a, const void *w, int T, int K) {
    ops_ctx *ctx = f->m->ctx;
    const int C = f->m->cfg.hidden_size;
    if (T <= OPS_MATMUL_FEW_ROWS) {
        ops_matmul(ctx, f->x, 0, a, w, T, C, K, 0, 1, 1.0f, 1.0f);
        return;
    }
    ops_matmul_residual(ctx, f->ln, a, w, f->x, T, C, K);
    void *t = f->x;
    f->x = f->ln;
    f->ln = t;
}

/* The attention block of layer l: x += o(attention(...)). */
static void attention_block(gen_forward *f, const gen_step *st, int l) {
    model *m = f->m;
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = st->T, C = c->hidden_size, D = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    const int Q = Hq * D, KV = Hkv * D;
    const size_t A = ops_act_size(ctx);
    const float eps = c->rms_eps, scale = 1.0f / sqrtf((float)D);
#define W(t) param_layer_ptr(&m->params, &m->layout, l, t)

    if (!st->fresh && T <= GEN_FUSED_QKV_TOKENS) {
        /* Decode and short continuations: the norm and one matmul into
         * [T, q | k | v] rows, then one op norms and rotates q and k and
         * caches k and v. */
        char *rows = T == 1 ? f->qkv : f->qkv_fused;
        ops_rmsnorm_matmul(ctx, rows, 0, f->ln, f->x, W(P_ATTN_NORM), W(P_WQ), T, Q + 2 * KV, C, eps, 1.0f, 0.0f);
        if (c->qkv_bias) ops_bias_forward(ctx, rows, W(P_BQ), T, Q + 2 * KV);
        ops_qkv_to_cache(ctx, f->qk, f->kv->k[l], f->kv->v[l], rows, c->qk_norm ? W(P_Q_NORM) : NULL,
                         c->qk_norm ? W(P_K_NORM) : NULL, st->pos, st->slots, T, Hq, Hkv, D, eps, c->rope_theta);
        ops_paged_attention(ctx, f->att, f->qk, f->kv->k[l], f->kv->v[l], st->block_table, st->max_pages,
                            st->ctx_lens, st->cu_q, st->n_seqs, T, Hq, Hkv, D, f->kv->page_size, scale, &st->groups);
        residual_product(f, f->att, W(P_WO), T, Q);
        if (c->o_bias) ops_bias_forward(ctx, f->x, W(P_BO), T, C);
        return;
    }
    ops_rmsnorm_forward(ctx, f->ln, f->rstd, f->x, W(P_ATTN_NORM), T, C, eps);
    /* q, k, v as [T*Q | T*KV | T*KV]: for one token this is the row
     * [q | k | v] that a single matmul with the stacked wq|wk|wv (adjacent
     * in the layer buffer, as are bq|bk|bv) produces. */
    char *q = f->qkv, *k = q + (size_t)T * Q * A, *v = k + (size_t)T * KV * A;
    if (T == 1) {
        ops_matmul(ctx, q, 0, f->ln, W(P_WQ), 1, Q + 2 * KV, C, 0, 1, 1.0f, 0.0f);
        if (c->qkv_bias) ops_bias_forward(ctx, q, W(P_BQ), 1, Q + 2 * KV);
    } else if (T <= GEN_FUSED_QKV_TOKENS) {
        ops_matmul(ctx, f->qkv_fused, 0, f->ln, W(P_WQ), T, Q + 2 * KV, C, 0, 1, 1.0f, 0.0f);
        if (c->qkv_bias) ops_bias_forward(ctx, f->qkv_fused, W(P_BQ), T, Q + 2 * KV);
        ops_embedding_forward(ctx, q, st->qkv_rows, f->qkv_fused, T * (Hq / Hkv + 2), KV);
    } else {
        ops_matmul(ctx, q, 0, f->ln, W(P_WQ), T, Q, C, 0, 1, 1.0f, 0.0f);
        ops_matmul(ctx, k, 0, f->ln, W(P_WK), T, KV, C, 0, 1, 1.0f, 0.0f);
        ops_matmul(ctx, v, 0, f->ln, W(P_WV), T, KV, C, 0, 1, 1.0f, 0.0f);
        if (c->qkv_bias) {
            ops_bias_forward(ctx, q, W(P_BQ), T, Q);
            ops_bias_forward(ctx, k, W(P_BK), T, KV);
            ops_bias_forward(ctx, v, W(P_BV), T, KV);
        }
    }
    char *qa = q, *ka = k; /* the attention's q and k */
    if (c->qk_norm) { /* the norm and the rotation in one pass */
        qa = f->qk;
        ka = qa + (size_t)T * Q * A;
        ops_rmsnorm_rope_forward(ctx, qa, f->rstd, q, W(P_Q_NORM), st->pos, T, Hq, D, eps, c->rope_theta);
        ops_rmsnorm_rope_forward(ctx, ka, f->rstd, k, W(P_K_NORM), st->pos, T, Hkv, D, eps, c->rope_theta);
    } else if (T == 1) { /* q and k heads are adjacent: one rotation for both */
        ops_rope_forward(ctx, qa, st->pos, 1, Hq + Hkv, D, c->rope_theta);
    } else {
        ops_rope_forward(ctx, qa, st->pos, T, Hq, D, c->rope_theta);
        ops_rope_forward(ctx, ka, st->pos, T, Hkv, D, c->rope_theta);
    }
    ops_kv_write(ctx, f->kv->k[l], f->kv->v[l], ka, v, st->slots, T, Hkv, D);
    if (st->fresh)
        ops_attention_forward(ctx, f->att, f->lse, qa, ka, v, st->cu_q, st->n_seqs, T, Hq, Hkv, D, scale);
    else
        ops_paged_attention(ctx, f->att, qa, f->kv->k[l], f->kv->v[l], st->block_table, st->max_pages, st->ctx_lens,
                            st->cu_q, st->n_seqs, T, Hq, Hkv, D, f->kv->page_size, scale, &st->groups);
    residual_product(f, f->att, W(P_WO), T, Q);
    if (c->o_bias) ops_bias_forward(ctx, f->x, W(P_BO), T, C);
#undef W
}

static void mlp_block(gen_forward *f, const gen_step *st, int l) {
    model *m = f->m;
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = st->T, C = c->hidden_size, I = c->intermediate_size;
#define W(t) param_layer_ptr(&m->params, &m->layout, l, t)
    /* The norm and the SwiGLU ride on the gate|up product (one kernel where
     * the backend can; f->ln and f->gu hold the intermediates otherwise). */
    ops_rmsnorm_matmul_swiglu(ctx, f->h, f->gu, f->ln, f->x, W(P_MLP_NORM), W(P_W_GATE_UP), T, I, C, c->rms_eps);
    residual_product(f, f->h, W(P_W_DOWN), T, I);
#undef W
}

void gen_forward_run(gen_forward *f, const gen_step *st) {
    model *m = f->m;
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int C = c->hidden_size, V = c->vocab_size;
    if (st->T <= 0 || st->T > f->max_tokens || st->n_rows < 0 || st->n_rows > f->max_rows)
        DK_ABORT("gen_forward: step of %d tokens and %d logit rows, planned for %d and %d", st->T, st->n_rows,
                 f->max_tokens, f->max_rows);

    ops_embedding_forward(ctx, f->x, st->tokens, m->params.embed, st->T, C);
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(f, st, l);
        mlp_block(f, st, l);
    }
    if (st->n_rows == 0) return;
    const void *hs = f->x;
    if (st->gather) { /* the embedding lookup is a row gather */
        ops_embedding_forward(ctx, f->xs, st->rows, f->x, st->n_rows, C);
        hs = f->xs;
    }
    /* The final norm rides on the lm head's product where the backend can
     * (one kernel at a few rows; f->lnf holds the normalised rows otherwise). */
    ops_rmsnorm_matmul(ctx, f->logits, 1, f->lnf, hs, m->params.final_norm, model_lm_head_weight(m), st->n_rows, V,
                       C, c->rms_eps, 1.0f, 0.0f);
    if (st->sample) ops_sample(ctx, st->out_tokens, st->out_logprobs, f->logits, st->params, st->n_rows, V);
}
