/* model.c: planning the decoder's memory, moving weights in and out, the
 * forward and the backward pass. Every computation on activations goes
 * through kernels/ops.h; the host only ever touches the batch arrays it
 * uploads and the fp32 host copies of the weights on load and save. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "model/param_buffers.h"
#include "model/weights.h"

/* Vocabulary columns per lm-head step: T x chunk fp32 logits live in scratch
 * at a time; larger chunks only mean fewer, larger matmuls. */
#define MODEL_LMHEAD_CHUNK 4096
/* The smallest chunk model_create accepts before asking for more scratch. */
#define MODEL_LMHEAD_MIN_CHUNK 64
/* The CPU attention reference works on [64, L] fp32 strips of scores (two in
 * the backward) for a sequence of L tokens; the CUDA backward keeps one fp32
 * value per (head, token). */
#define MODEL_ATTN_QBLOCK 64

static size_t attn_scratch_bytes(const model_config *cfg, int max_tokens) {
    size_t T = max_tokens > 0 ? (size_t)max_tokens : 0;
    size_t rows = T < MODEL_ATTN_QBLOCK ? T : MODEL_ATTN_QBLOCK;
    size_t strips = 2 * rows * T * sizeof(float), per_head = (size_t)cfg->n_heads * T * sizeof(float);
    return strips > per_head ? strips : per_head;
}

/* Sequences a batch of T tokens is planned for in the one-pass attention
 * backward's dQ accumulator: one per MODEL_ATTN_ONE_PASS_SEQ_TOKENS tokens,
 * plus one. A batch of shorter sequences is still right: the backward
 * takes its two passes when the scratch cannot hold the accumulator. */
#define MODEL_ATTN_ONE_PASS_SEQ_TOKENS 256

size_t model_scratch_bytes(const model_config *cfg, int max_tokens) {
    size_t T = max_tokens > 0 ? (size_t)max_tokens : 0;
    size_t chunk = cfg->vocab_size < MODEL_LMHEAD_CHUNK ? (size_t)cfg->vocab_size : MODEL_LMHEAD_CHUNK;
    size_t lmhead = T * chunk * sizeof(float), attn = attn_scratch_bytes(cfg, max_tokens);
    size_t need = lmhead > attn ? lmhead : attn;
    /* Room for the one-pass Hopper backward (head dim 128 only; ops.h). */
    if (cfg->head_dim == 128 && T > 0) {
        int seqs = (int)(T / MODEL_ATTN_ONE_PASS_SEQ_TOKENS) + 1;
        size_t one = ops_attention_backward_scratch((int)T, seqs, cfg->n_heads, cfg->head_dim, 1);
        if (one > need) need = one;
    }
    return need;
}

static void *dev_alloc(model *m, size_t bytes) {
    m->device_bytes += bytes;
    return ops_alloc(m->ctx, bytes);
}

static void dev_free(model *m, void *p) {
    if (p) ops_free(m->ctx, p);
}

static void buffers_alloc(model *m, param_buffers *b, size_t elem_size) {
    const param_layout *pl = &m->layout;
    b->n_layers = m->cfg.n_layers;
    b->elem_size = elem_size;
    b->embed = dev_alloc(m, pl->embed_size * elem_size);
    b->layers = dk_calloc((size_t)b->n_layers, sizeof(void *));
    for (int l = 0; l < b->n_layers; l++) b->layers[l] = dev_alloc(m, pl->layer_size * elem_size);
    b->final_norm = dev_alloc(m, pl->final_norm_size * elem_size);
    b->lm_head = pl->lm_head_size ? dev_alloc(m, pl->lm_head_size * elem_size) : NULL;
}

static void buffers_free(model *m, param_buffers *b) {
    dev_free(m, b->embed);
    for (int l = 0; b->layers && l < b->n_layers; l++) dev_free(m, b->layers[l]);
    free(b->layers);
    dev_free(m, b->final_norm);
    dev_free(m, b->lm_head);
    memset(b, 0, sizeof *b);
}

static void acts_alloc(model *m, model_layer_acts *a) {
    const model_config *c = &m->cfg;
    const size_t T = (size_t)m->max_tokens, A = ops_act_size(m->ctx);
    const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    a->ln1 = dev_alloc(m, T * C * A);
    a->q_raw = dev_alloc(m, T * Q * A);
    a->k_raw = dev_alloc(m, T * KV * A);
    if (c->qk_norm) {
        a->q = dev_alloc(m, T * Q * A);
        a->k = dev_alloc(m, T * KV * A);
        a->q_rstd = dev_alloc(m, T * (size_t)c->n_heads * sizeof(float));
        a->k_rstd = dev_alloc(m, T * (size_t)c->n_kv_heads * sizeof(float));
    } else {
        a->q = a->q_raw;
        a->k = a->k_raw;
    }
    a->v = dev_alloc(m, T * KV * A);
    if (m->recompute != MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION) a->att = dev_alloc(m, T * Q * A); /* else per layer */
    a->x_mid = dev_alloc(m, T * C * A);
    a->ln2 = dev_alloc(m, T * C * A);
    a->gu = dev_alloc(m, T * 2 * I * A);
    a->h = dev_alloc(m, T * I * A);
    a->rstd1 = dev_alloc(m, T * sizeof(float));
    a->rstd2 = dev_alloc(m, T * sizeof(float));
    if (m->recompute != MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION) a->lse = dev_alloc(m, T * (size_t)c->n_heads * sizeof(float));
}

static void acts_free(model *m, model_layer_acts *a) {
    if (a->q != a->q_raw) dev_free(m, a->q);
    if (a->k != a->k_raw) dev_free(m, a->k);
    void *bufs[] = {a->ln1, a->q_raw, a->k_raw, a->v, a->att, a->x_mid, a->ln2, a->gu, a->h,
                    a->rstd1, a->rstd2, a->q_rstd, a->k_rstd, a->lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(m, bufs[i]);
    memset(a, 0, sizeof *a);
}

const char *const model_recompute_names[MODEL_N_RECOMPUTE] = {
    [MODEL_RECOMPUTE_NONE] = "none", [MODEL_RECOMPUTE_LAYER] = "layer",
    [MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION] = "layer_keep_attention"};

dk_status model_create(model *m, const model_config *cfg, ops_ctx *ctx, int max_tokens, model_recompute recompute) {
    return model_create_ex(m, cfg, ctx, max_tokens, recompute, 1);
}

/* The hook of a sharded run, if any. */
static inline void hook(model *m, model_hook_event ev, int layer) {
    if (m->hooks.fn) m->hooks.fn(m->hooks.user, m, ev, layer);
}

/* Empty buffer sets whose pointers a provider fills. */
static void buffers_empty(model *m, param_buffers *b, size_t elem_size) {
    memset(b, 0, sizeof *b);
    b->n_layers = m->cfg.n_layers;
    b->elem_size = elem_size;
    b->layers = dk_calloc((size_t)b->n_layers, sizeof(void *));
}

dk_status model_create_ex(model *m, const model_config *cfg, ops_ctx *ctx, int max_tokens, model_recompute recompute,
                          int own_params) {
    memset(m, 0, sizeof *m);
    DK_TRY(model_config_validate(cfg));
    if (max_tokens <= 0) return dk_fail(DK_ERR_USAGE, "model: max_tokens must be positive, got %d", max_tokens);
    if (recompute < MODEL_RECOMPUTE_NONE || recompute > MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION)
        return dk_fail(DK_ERR_USAGE, "model: unknown recompute mode %d", (int)recompute);
    if (ctx->scratch_size < attn_scratch_bytes(cfg, max_tokens))
        return dk_fail(DK_ERR_USAGE,
                       "model: ops scratch of %zu bytes is too small for attention over max_tokens = %d (needs %zu; "
                       "model_scratch_bytes gives %zu)",
                       ctx->scratch_size, max_tokens, attn_scratch_bytes(cfg, max_tokens),
                       model_scratch_bytes(cfg, max_tokens));
    const int V = cfg->vocab_size;
    size_t per_col = (size_t)max_tokens * sizeof(float);
    size_t fit = ctx->scratch_size / per_col;
    int chunk = V < MODEL_LMHEAD_CHUNK ? V : MODEL_LMHEAD_CHUNK;
    if (fit < (size_t)chunk) {
        /* Less scratch than the default wants: smaller chunks, kept a
         * multiple of the minimum so the column blocks stay aligned. */
        int min_chunk = V < MODEL_LMHEAD_MIN_CHUNK ? V : MODEL_LMHEAD_MIN_CHUNK;
        if (fit < (size_t)min_chunk)
            return dk_fail(DK_ERR_USAGE,
                           "model: ops scratch of %zu bytes is too small for max_tokens = %d (the lm head needs at "
                           "least %zu bytes; model_scratch_bytes gives %zu)",
                           ctx->scratch_size, max_tokens, (size_t)min_chunk * per_col,
                           model_scratch_bytes(cfg, max_tokens));
        chunk = (int)(fit / MODEL_LMHEAD_MIN_CHUNK) * MODEL_LMHEAD_MIN_CHUNK;
        if (chunk < min_chunk) chunk = min_chunk;
    }

    m->cfg = *cfg;
    m->ctx = ctx;
    m->max_tokens = max_tokens;
    m->recompute = recompute;
    m->lmhead_chunk = chunk;
    m->acts_layer = -1;
    param_layout_init(&m->layout, cfg);

    const size_t A = ops_act_size(ctx), T = (size_t)max_tokens, L = (size_t)cfg->n_layers;
    const size_t C = (size_t)cfg->hidden_size, I = (size_t)cfg->intermediate_size;
    const size_t Q = (size_t)cfg->n_heads * cfg->head_dim, KV = (size_t)cfg->n_kv_heads * cfg->head_dim;

    m->own_params = own_params;
    if (own_params) {
        buffers_alloc(m, &m->params, A);
        buffers_alloc(m, &m->grads, sizeof(float));
    } else {
        buffers_empty(m, &m->params, A);
        buffers_empty(m, &m->grads, sizeof(float));
    }

    m->res = dk_calloc(L + 1, sizeof(void *));
    for (size_t l = 0; l <= L; l++) m->res[l] = dev_alloc(m, T * C * A);
    m->n_act_sets = m->recompute ? 1 : (int)L;
    m->acts = dk_calloc((size_t)m->n_act_sets, sizeof(model_layer_acts));
    for (int i = 0; i < m->n_act_sets; i++) acts_alloc(m, &m->acts[i]);
    if (m->recompute == MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION) {
        m->att_kept = dk_calloc(L, sizeof(void *));
        m->lse_kept = dk_calloc(L, sizeof(float *));
        for (size_t l = 0; l < L; l++) {
            m->att_kept[l] = dev_alloc(m, T * Q * A);
            m->lse_kept[l] = dev_alloc(m, T * (size_t)cfg->n_heads * sizeof(float));
        }
    }
    m->final_h = dev_alloc(m, T * C * A);
    m->final_rstd = dev_alloc(m, T * sizeof(float));
    m->logprob = dev_alloc(m, T * sizeof(float));
    m->entropy = dev_alloc(m, T * sizeof(float));
    m->lmhead_lse = dev_alloc(m, T * sizeof(float));
    m->dlogprob = dev_alloc(m, T * sizeof(float));
    m->dentropy = dev_alloc(m, T * sizeof(float));

    m->d_res = dev_alloc(m, T * C * A);
    m->d_ln = dev_alloc(m, T * C * A);
    size_t mlp_phase = 3 * I, attn_phase = 3 * Q + 3 * KV;
    m->d_work = dev_alloc(m, T * (mlp_phase > attn_phase ? mlp_phase : attn_phase) * A);

    m->d_tokens = dev_alloc(m, T * sizeof(int32_t));
    m->d_pos = dev_alloc(m, T * sizeof(int32_t));
    m->d_targets = dev_alloc(m, T * sizeof(int32_t));
    m->d_cu_seqlens = dev_alloc(m, (T + 1) * sizeof(int32_t));
    m->h_stage = dk_calloc(T + 1, sizeof(int32_t));
    return DK_OK;
}

void model_free(model *m) {
    if (!m->ctx) return;
    if (m->own_params) {
        buffers_free(m, &m->params);
        buffers_free(m, &m->grads);
    } else {
        free(m->params.layers);
        free(m->grads.layers);
    }
    for (int l = 0; m->res && l <= m->cfg.n_layers; l++) dev_free(m, m->res[l]);
    free(m->res);
    for (int i = 0; m->acts && i < m->n_act_sets; i++) acts_free(m, &m->acts[i]);
    free(m->acts);
    for (int l = 0; m->att_kept && l < m->cfg.n_layers; l++) {
        dev_free(m, m->att_kept[l]);
        dev_free(m, m->lse_kept[l]);
    }
    free(m->att_kept);
    free(m->lse_kept);
    void *bufs[] = {m->final_h, m->final_rstd, m->logprob, m->entropy, m->lmhead_lse, m->lmhead_keep, m->dlogprob,
                    m->dentropy, m->d_res, m->d_ln, m->d_work, m->d_tokens, m->d_pos,
                    m->d_targets, m->d_cu_seqlens};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(m, bufs[i]);
    free(m->h_stage);
    memset(m, 0, sizeof *m);
}

size_t model_device_bytes(const model *m) { return m->device_bytes; }

size_t model_keep_logits_bytes(const model_config *cfg, int max_tokens) {
    return (size_t)(max_tokens > 0 ? max_tokens : 0) * (size_t)cfg->vocab_size * sizeof(float);
}

void model_keep_logits(model *m) {
    if (m->lmhead_keep) return;
    m->lmhead_keep = dev_alloc(m, model_keep_logits_bytes(&m->cfg, m->max_tokens));
    m->keep_filled = 0;
}

/* ---- weights ------------------------------------------------------------------- */

/* Host fp32 buffers -> the model's act parameters, buffer by buffer. */
static void params_upload(model *m, const param_buffers *host) {
    if (!m->own_params) DK_ABORT("model: a sharded model's weights come and go through its provider (dist/zero.h)");
    const param_layout *pl = &m->layout;
    ops_upload_act(m->ctx, m->params.embed, host->embed, pl->embed_size);
    for (int l = 0; l < m->cfg.n_layers; l++) ops_upload_act(m->ctx, m->params.layers[l], host->layers[l], pl->layer_size);
    ops_upload_act(m->ctx, m->params.final_norm, host->final_norm, pl->final_norm_size);
    if (pl->lm_head_size) ops_upload_act(m->ctx, m->params.lm_head, host->lm_head, pl->lm_head_size);
    ops_sync(m->ctx); /* the caller frees the host buffers next */
}

static void params_download(const model *m, param_buffers *host) {
    if (!m->own_params) DK_ABORT("model: a sharded model's weights come and go through its provider (dist/zero.h)");
    const param_layout *pl = &m->layout;
    ops_download_act(m->ctx, host->embed, m->params.embed, pl->embed_size);
    for (int l = 0; l < m->cfg.n_layers; l++) ops_download_act(m->ctx, host->layers[l], m->params.layers[l], pl->layer_size);
    ops_download_act(m->ctx, host->final_norm, m->params.final_norm, pl->final_norm_size);
    if (pl->lm_head_size) ops_download_act(m->ctx, host->lm_head, m->params.lm_head, pl->lm_head_size);
    ops_sync(m->ctx);
}

dk_status model_load_hf(model *m, const char *dir) {
    param_buffers host;
    param_buffers_alloc_host(&host, &m->layout, m->cfg.n_layers, m->cfg.tie_embeddings, sizeof(float));
    dk_status s = weights_load_hf(dir, &m->cfg, &m->layout, &host);
    if (s == DK_OK) params_upload(m, &host);
    param_buffers_free_host(&host);
    return s;
}

dk_status model_save_hf(const model *m, const char *dir, const char *dtype) {
    param_buffers host;
    param_buffers_alloc_host(&host, &m->layout, m->cfg.n_layers, m->cfg.tie_embeddings, sizeof(float));
    params_download(m, &host);
    dk_status s = weights_save_hf(dir, &m->cfg, &m->layout, &host, dtype, 0);
    param_buffers_free_host(&host);
    return s;
}

void model_init_random(model *m, uint64_t seed, float std) {
    param_buffers host;
    param_buffers_alloc_host(&host, &m->layout, m->cfg.n_layers, m->cfg.tie_embeddings, sizeof(float));
    param_init_random(&host, &m->layout, &m->cfg, seed, std);
    params_upload(m, &host);
    param_buffers_free_host(&host);
}

void model_zero_grad(model *m) {
    if (!m->own_params) {
        hook(m, MODEL_HOOK_ZERO_GRAD, -1);
        return;
    }
    const param_layout *pl = &m->layout;
    ops_zero(m->ctx, m->grads.embed, pl->embed_size * sizeof(float));
    for (int l = 0; l < m->cfg.n_layers; l++) ops_zero(m->ctx, m->grads.layers[l], pl->layer_size * sizeof(float));
    ops_zero(m->ctx, m->grads.final_norm, pl->final_norm_size * sizeof(float));
    if (pl->lm_head_size) ops_zero(m->ctx, m->grads.lm_head, pl->lm_head_size * sizeof(float));
}

const void *model_final_hidden(const model *m) { return m->final_h; }

const void *model_lm_head_weight(const model *m) {
    return m->cfg.tie_embeddings ? m->params.embed : m->params.lm_head;
}

/* ---- batch -------------------------------------------------------------------- */

/* Checks the host batch against the plan and the vocabulary, then uploads it;
 * positions restart at 0 per sequence when the batch gives none. */
static dk_status batch_upload(model *m, const model_batch *b) {
    const int T = b->T, V = m->cfg.vocab_size;
    if (T <= 0 || T > m->max_tokens)
        return dk_fail(DK_ERR_USAGE, "model batch: T = %d tokens, the model was planned for 1..%d", T, m->max_tokens);
    if (b->n_seqs <= 0 || b->n_seqs > T)
        return dk_fail(DK_ERR_USAGE, "model batch: n_seqs = %d, need 1..T (T = %d)", b->n_seqs, T);
    if (!b->tokens || !b->cu_seqlens) return dk_fail(DK_ERR_USAGE, "model batch: tokens and cu_seqlens are required");
    const int32_t *cu = b->cu_seqlens;
    if (cu[0] != 0) return dk_fail(DK_ERR_USAGE, "model batch: cu_seqlens[0] = %d, must be 0", cu[0]);
    for (int s = 0; s < b->n_seqs; s++)
        if (cu[s + 1] < cu[s])
            return dk_fail(DK_ERR_USAGE, "model batch: cu_seqlens decreases at %d (%d -> %d)", s + 1, cu[s], cu[s + 1]);
    if (cu[b->n_seqs] != T)
        return dk_fail(DK_ERR_USAGE, "model batch: cu_seqlens[%d] = %d, must equal T = %d", b->n_seqs, cu[b->n_seqs], T);
    for (int t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= V)
            return dk_fail(DK_ERR_USAGE, "model batch: token %d = %d is outside the vocabulary [0, %d)", t, b->tokens[t], V);
        if (b->targets && (b->targets[t] < -1 || b->targets[t] >= V))
            return dk_fail(DK_ERR_USAGE, "model batch: target %d = %d is outside [-1, %d)", t, b->targets[t], V);
        if (b->pos && b->pos[t] < 0)
            return dk_fail(DK_ERR_USAGE, "model batch: position %d = %d is negative", t, b->pos[t]);
    }

    ops_ctx *ctx = m->ctx;
    ops_upload(ctx, m->d_tokens, b->tokens, (size_t)T * sizeof(int32_t));
    ops_upload(ctx, m->d_cu_seqlens, cu, (size_t)(b->n_seqs + 1) * sizeof(int32_t));
    /* ops_upload may return before the copy finishes on an asynchronous
     * backend, so the staging buffer is reused only after a sync. */
    if (b->pos) {
        ops_upload(ctx, m->d_pos, b->pos, (size_t)T * sizeof(int32_t));
    } else {
        for (int s = 0; s < b->n_seqs; s++)
            for (int t = cu[s]; t < cu[s + 1]; t++) m->h_stage[t] = t - cu[s];
        ops_upload(ctx, m->d_pos, m->h_stage, (size_t)T * sizeof(int32_t));
        ops_sync(ctx);
    }
    if (b->targets) {
        ops_upload(ctx, m->d_targets, b->targets, (size_t)T * sizeof(int32_t));
    } else {
        for (int t = 0; t < T; t++) m->h_stage[t] = -1;
        ops_upload(ctx, m->d_targets, m->h_stage, (size_t)T * sizeof(int32_t));
        ops_sync(ctx);
    }
    m->T = T;
    m->n_seqs = b->n_seqs;
    return DK_OK;
}

static float model_attn_scale(const model *m) { return 1.0f / sqrtf((float)m->cfg.head_dim); }

/* ---- forward ------------------------------------------------------------------ */

/* One decoder layer: x [T, C] -> out [T, C], keeping in `a` what the backward
 * needs. out may be NULL when only the activations are wanted (the recompute
 * in the backward); with_attention = 0 takes a->att and a->lse as they are
 * (kept from the forward) instead of running the attention again. */
static void layer_forward(model *m, int l, model_layer_acts *a, const void *x, void *out, int with_attention) {
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = m->T, C = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, Q = Hq * D, KV = Hkv * D;
    const float eps = c->rms_eps;
#define W(t) param_layer_ptr(&m->params, &m->layout, l, t)

    /* Attention block. */
    ops_rmsnorm_forward(ctx, a->ln1, a->rstd1, x, W(P_ATTN_NORM), T, C, eps);
    ops_matmul(ctx, a->q_raw, 0, a->ln1, W(P_WQ), T, Q, C, 0, 1, 1.0f, 0.0f);
    ops_matmul(ctx, a->k_raw, 0, a->ln1, W(P_WK), T, KV, C, 0, 1, 1.0f, 0.0f);
    ops_matmul(ctx, a->v, 0, a->ln1, W(P_WV), T, KV, C, 0, 1, 1.0f, 0.0f);
    if (c->qkv_bias) {
        ops_bias_forward(ctx, a->q_raw, W(P_BQ), T, Q);
        ops_bias_forward(ctx, a->k_raw, W(P_BK), T, KV);
        ops_bias_forward(ctx, a->v, W(P_BV), T, KV);
    }
    if (c->qk_norm) { /* one RMSNorm row per (token, head), rotated in the same pass */
        ops_rmsnorm_rope_forward(ctx, a->q, a->q_rstd, a->q_raw, W(P_Q_NORM), m->d_pos, T, Hq, D, eps, c->rope_theta);
        ops_rmsnorm_rope_forward(ctx, a->k, a->k_rstd, a->k_raw, W(P_K_NORM), m->d_pos, T, Hkv, D, eps,
                                 c->rope_theta);
    } else {
        ops_rope_forward(ctx, a->q, m->d_pos, T, Hq, D, c->rope_theta);
        ops_rope_forward(ctx, a->k, m->d_pos, T, Hkv, D, c->rope_theta);
    }
    if (with_attention)
        ops_attention_forward(ctx, a->att, a->lse, a->q, a->k, a->v, m->d_cu_seqlens, m->n_seqs, T, Hq, Hkv, D,
                              model_attn_scale(m));
    /* The residual adds ride on the products (ops_matmul_residual, out of
     * place: the sum rounded once). */
    ops_matmul_residual(ctx, a->x_mid, a->att, W(P_WO), x, T, C, Q);
    if (c->o_bias) ops_bias_forward(ctx, a->x_mid, W(P_BO), T, C);

    /* MLP block: one matmul gives [gate | up] per row. */
    ops_rmsnorm_forward(ctx, a->ln2, a->rstd2, a->x_mid, W(P_MLP_NORM), T, C, eps);
    ops_matmul(ctx, a->gu, 0, a->ln2, W(P_W_GATE_UP), T, 2 * I, C, 0, 1, 1.0f, 0.0f);
    ops_swiglu_forward(ctx, a->h, a->gu, T, I);
    if (out) ops_matmul_residual(ctx, out, a->h, W(P_W_DOWN), a->x_mid, T, C, I);
#undef W
}

/* Layer l's activations: its own set, or the shared one (with l's kept
 * attention output and logsumexp in LAYER_KEEP_ATTENTION), copied into *tmp. */
static model_layer_acts *layer_acts(model *m, int l, model_layer_acts *tmp) {
    if (m->recompute == MODEL_RECOMPUTE_NONE) return &m->acts[l];
    if (m->recompute == MODEL_RECOMPUTE_LAYER) return &m->acts[0];
    *tmp = m->acts[0];
    tmp->att = m->att_kept[l];
    tmp->lse = m->lse_kept[l];
    return tmp;
}

dk_status model_forward(model *m, const model_batch *b, float inv_temp) {
    if (!(inv_temp > 0.0f) || !isfinite(inv_temp))
        return dk_fail(DK_ERR_USAGE, "model_forward: inverse temperature must be positive and finite, got %g",
                       (double)inv_temp);
    m->have_forward = 0;
    DK_TRY(batch_upload(m, b));
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = m->T, C = c->hidden_size, L = c->n_layers;

    hook(m, MODEL_HOOK_FORWARD_BEGIN, -1);
    ops_embedding_forward(ctx, m->res[0], m->d_tokens, m->params.embed, T, C);
    for (int l = 0; l < L; l++) {
        model_layer_acts tmp;
        hook(m, MODEL_HOOK_LAYER_PARAMS, l);
        layer_forward(m, l, layer_acts(m, l, &tmp), m->res[l], m->res[l + 1], 1);
    }
    m->acts_layer = m->recompute ? L - 1 : -1;
    ops_rmsnorm_forward(ctx, m->final_h, m->final_rstd, m->res[L], m->params.final_norm, T, C, c->rms_eps);
    ops_lmhead_forward(ctx, m->logprob, m->entropy, m->lmhead_lse, m->final_h, model_lm_head_weight(m),
                       m->d_targets, T, C, c->vocab_size, inv_temp, m->lmhead_chunk, m->lmhead_keep);
    m->keep_filled = m->lmhead_keep != NULL;
    m->inv_temp = inv_temp;
    m->have_forward = 1;
    return DK_OK;
}

/* ---- backward ----------------------------------------------------------------- */

/* One decoder layer's backward. On entry m->d_res holds dL/d(layer output);
 * on return dL/d(layer input) x. Parameter gradients accumulate into
 * m->grads. The two blocks use m->d_work at different times, so it is split
 * once for the MLP and once for the attention. */
static void layer_backward(model *m, int l, const model_layer_acts *a, const void *x) {
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = m->T, C = c->hidden_size, I = c->intermediate_size, D = c->head_dim;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, Q = Hq * D, KV = Hkv * D;
    const size_t A = ops_act_size(ctx);
    char *work = m->d_work;
#define W(t) param_layer_ptr(&m->params, &m->layout, l, t)
#define G(t) ((float *)param_layer_ptr(&m->grads, &m->layout, l, t))

    /* MLP block: out = x_mid + down(swiglu(gate_up(rmsnorm(x_mid)))). */
    void *dh = work, *dgu = work + (size_t)T * I * A;
    ops_matmul(ctx, G(P_W_DOWN), 1, m->d_res, a->h, C, I, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, dh, 0, m->d_res, W(P_W_DOWN), T, I, C, 0, 0, 1.0f, 0.0f);
    ops_swiglu_backward(ctx, dgu, dh, a->gu, T, I);
    ops_matmul(ctx, G(P_W_GATE_UP), 1, dgu, a->ln2, 2 * I, C, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, m->d_ln, 0, dgu, W(P_W_GATE_UP), T, C, 2 * I, 0, 0, 1.0f, 0.0f);
    /* The norm's input gradient joins the residual's: d_res is now dL/d x_mid. */
    ops_rmsnorm_backward(ctx, m->d_res, G(P_MLP_NORM), m->d_ln, a->x_mid, W(P_MLP_NORM), a->rstd2, T, C, 1);

    /* Attention block: x_mid = x + o(attention(rope(norm(q)), rope(norm(k)), v)). */
    void *datt = work;
    void *dq = work + (size_t)T * Q * A;
    void *dk = work + (size_t)T * 2 * Q * A;
    void *dv = work + (size_t)T * (2 * Q + KV) * A;
    void *dq_raw = dq, *dk_raw = dk;
    if (c->qk_norm) {
        dq_raw = work + (size_t)T * (2 * Q + 2 * KV) * A;
        dk_raw = work + (size_t)T * (3 * Q + 2 * KV) * A;
    }
    if (c->o_bias) ops_bias_backward(ctx, G(P_BO), m->d_res, T, C);
    ops_matmul(ctx, G(P_WO), 1, m->d_res, a->att, C, Q, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, datt, 0, m->d_res, W(P_WO), T, Q, C, 0, 0, 1.0f, 0.0f);
    ops_attention_backward(ctx, dq, dk, dv, datt, a->q, a->k, a->v, a->att, a->lse, m->d_cu_seqlens, m->n_seqs, T,
                           Hq, Hkv, D, model_attn_scale(m));
    if (c->qk_norm) { /* the rotation's backward, then the norm's, in one pass (dq, dk may be overwritten) */
        ops_rmsnorm_rope_backward(ctx, dq_raw, G(P_Q_NORM), dq, a->q_raw, W(P_Q_NORM), a->q_rstd, m->d_pos, T, Hq, D,
                                  c->rope_theta);
        ops_rmsnorm_rope_backward(ctx, dk_raw, G(P_K_NORM), dk, a->k_raw, W(P_K_NORM), a->k_rstd, m->d_pos, T, Hkv,
                                  D, c->rope_theta);
    } else {
        ops_rope_backward(ctx, dq, m->d_pos, T, Hq, D, c->rope_theta);
        ops_rope_backward(ctx, dk, m->d_pos, T, Hkv, D, c->rope_theta);
    }
    if (c->qkv_bias) {
        ops_bias_backward(ctx, G(P_BQ), dq_raw, T, Q);
        ops_bias_backward(ctx, G(P_BK), dk_raw, T, KV);
        ops_bias_backward(ctx, G(P_BV), dv, T, KV);
    }
    ops_matmul(ctx, G(P_WQ), 1, dq_raw, a->ln1, Q, C, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, G(P_WK), 1, dk_raw, a->ln1, KV, C, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, G(P_WV), 1, dv, a->ln1, KV, C, T, 1, 0, 1.0f, 1.0f);
    ops_matmul(ctx, m->d_ln, 0, dq_raw, W(P_WQ), T, C, Q, 0, 0, 1.0f, 0.0f);
    ops_matmul(ctx, m->d_ln, 0, dk_raw, W(P_WK), T, C, KV, 0, 0, 1.0f, 1.0f);
    ops_matmul(ctx, m->d_ln, 0, dv, W(P_WV), T, C, KV, 0, 0, 1.0f, 1.0f);
    ops_rmsnorm_backward(ctx, m->d_res, G(P_ATTN_NORM), m->d_ln, x, W(P_ATTN_NORM), a->rstd1, T, C, 1); /* dL/d x */
#undef W
#undef G
}

void model_backward(model *m, const float *dlogprob, const float *dentropy) {
    if (!m->have_forward) DK_ABORT("model_backward: no forward to differentiate (call model_forward first)");
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int T = m->T, C = c->hidden_size, L = c->n_layers;

    hook(m, MODEL_HOOK_BACKWARD_BEGIN, -1);
    /* Lm head: with tied embeddings its weight gradient is the embedding's. */
    float *dW = c->tie_embeddings ? m->grads.embed : m->grads.lm_head;
    ops_lmhead_backward(ctx, m->d_ln, dW, dlogprob, dentropy, m->final_h, model_lm_head_weight(m), m->d_targets,
                        m->lmhead_lse, m->entropy, T, C, c->vocab_size, m->inv_temp, m->lmhead_chunk,
                        m->keep_filled ? m->lmhead_keep : NULL);
    m->keep_filled = 0; /* the backward overwrote them with dz: a second backward recomputes */
    ops_rmsnorm_backward(ctx, m->d_res, m->grads.final_norm, m->d_ln, m->res[L], m->params.final_norm,
                         m->final_rstd, T, C, 0);

    for (int l = L - 1; l >= 0; l--) {
        model_layer_acts tmp, *a = layer_acts(m, l, &tmp);
        hook(m, MODEL_HOOK_LAYER_PARAMS, l);
        if (m->recompute && m->acts_layer != l) {
            /* The same ops on the same input: bit-identical to what the
             * forward computed and dropped. */
            layer_forward(m, l, a, m->res[l], NULL, m->recompute != MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION);
            m->acts_layer = l;
        }
        hook(m, MODEL_HOOK_LAYER_GRADS, l);
        layer_backward(m, l, a, m->res[l]);
        hook(m, MODEL_HOOK_LAYER_GRADS_DONE, l);
    }
    ops_embedding_backward(ctx, m->grads.embed, m->d_res, m->d_tokens, T, C);
    hook(m, MODEL_HOOK_BACKWARD_END, -1);
}
