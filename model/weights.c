/* weights.c: the map between Hugging Face tensor names and the flat parameter
 * layout (params.h), and loading / saving a checkpoint directory through it.
 * One table of slots (HF name, shape, pointer into our buffers) drives both
 * directions, so the two cannot disagree about a name or a shape. */
#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "model/safetensors.h"

typedef struct {
    char name[96];
    float *ptr;
    int ndim;
    int64_t shape[2];
} hf_slot;

static void slot_set(hf_slot *s, float *ptr, int ndim, int64_t d0, int64_t d1, const char *fmt, int layer) {
    snprintf(s->name, sizeof s->name, fmt, layer);
    s->ptr = ptr;
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
}

/* Every tensor the config calls for, in the order transformers declares them;
 * lm_head last and only when untied. Returns the count. */
static int build_slots(const model_config *c, const param_layout *pl, const param_buffers *b, hf_slot *s) {
    int n = 0;
    slot_set(&s[n++], b->embed, 2, c->vocab_size, c->hidden_size, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
#define T(t) ((float *)param_layer_ptr(b, pl, l, (t)))
#define MAT(t, fmt) slot_set(&s[n++], T(t), 2, pl->rows[t], pl->cols[t], fmt, l)
#define VEC(t, fmt) slot_set(&s[n++], T(t), 1, pl->cols[t], 0, fmt, l)
        VEC(P_ATTN_NORM, "model.layers.%d.input_layernorm.weight");
        MAT(P_WQ, "model.layers.%d.self_attn.q_proj.weight");
        MAT(P_WK, "model.layers.%d.self_attn.k_proj.weight");
        MAT(P_WV, "model.layers.%d.self_attn.v_proj.weight");
        if (pl->size[P_BQ]) {
            VEC(P_BQ, "model.layers.%d.self_attn.q_proj.bias");
            VEC(P_BK, "model.layers.%d.self_attn.k_proj.bias");
            VEC(P_BV, "model.layers.%d.self_attn.v_proj.bias");
        }
        if (pl->size[P_Q_NORM]) {
            VEC(P_Q_NORM, "model.layers.%d.self_attn.q_norm.weight");
            VEC(P_K_NORM, "model.layers.%d.self_attn.k_norm.weight");
        }
        MAT(P_WO, "model.layers.%d.self_attn.o_proj.weight");
        if (pl->size[P_BO]) VEC(P_BO, "model.layers.%d.self_attn.o_proj.bias");
        VEC(P_MLP_NORM, "model.layers.%d.post_attention_layernorm.weight");
        /* w_gate_up is [2I, C] with the gate rows first: two contiguous halves. */
        const int I = pl->rows[P_W_GATE_UP] / 2, C = pl->cols[P_W_GATE_UP];
        slot_set(&s[n++], T(P_W_GATE_UP), 2, I, C, "model.layers.%d.mlp.gate_proj.weight", l);
        slot_set(&s[n++], T(P_W_GATE_UP) + (size_t)I * C, 2, I, C, "model.layers.%d.mlp.up_proj.weight", l);
        MAT(P_W_DOWN, "model.layers.%d.mlp.down_proj.weight");
#undef T
#undef MAT
#undef VEC
    }
    slot_set(&s[n++], b->final_norm, 1, c->hidden_size, 0, "model.norm.weight", 0);
    if (!c->tie_embeddings) slot_set(&s[n++], b->lm_head, 2, c->vocab_size, c->hidden_size, "lm_head.weight", 0);
    return n;
}

static int max_slots(const model_config *c) { return 3 + c->n_layers * P_LAYER_COUNT; }

static dk_status check_buffers(const char *dir, const model_config *c, const param_buffers *b) {
    if (b->elem_size != sizeof(float))
        return dk_fail(DK_ERR_RUNTIME, "%s: weights need fp32 host buffers (elem_size 4), got elem_size %zu", dir, b->elem_size);
    if (b->n_layers != c->n_layers)
        return dk_fail(DK_ERR_RUNTIME, "%s: buffers hold %d layers but the config has %d", dir, b->n_layers, c->n_layers);
    if (!c->tie_embeddings && !b->lm_head)
        return dk_fail(DK_ERR_RUNTIME, "%s: the config has an untied lm head but no lm_head buffer was allocated", dir);
    return DK_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* With tied embeddings a checkpoint may still carry lm_head.weight; accept it
 * only when it is the embedding, since the model will use the embedding.
 * Compared in chunks: the head of a large vocabulary is gigabytes in fp32. */
static dk_status check_tied_head(const st_tensor *t, const model_config *c, const float *embed) {
    const int64_t V = c->vocab_size, C = c->hidden_size;
    if (t->ndim != 2 || t->shape[0] != V || t->shape[1] != C) {
        char got[128] = "[";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), i ? ", %lld" : "%lld", (long long)t->shape[i]);
        snprintf(got + strlen(got), sizeof got - strlen(got), "]");
        return dk_fail(DK_ERR_RUNTIME, "%s: tensor 'lm_head.weight': expected shape [%lld, %lld], got %s", t->file,
                       (long long)V, (long long)C, got);
    }
    enum { CHUNK = 1 << 16 };
    float *buf = dk_malloc(CHUNK * sizeof *buf);
    dk_status s = DK_OK;
    for (size_t k = 0; k < t->numel && s == DK_OK; k += CHUNK) {
        size_t m = t->numel - k < CHUNK ? t->numel - k : CHUNK;
        safetensors_tensor_to_f32_range(t, k, m, buf);
        if (memcmp(buf, embed + k, m * sizeof *buf) != 0)
            s = dk_fail(DK_ERR_RUNTIME,
                        "%s: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but the config ties them "
                        "(tie_word_embeddings = true)",
                        t->file);
    }
    free(buf);
    return s;
}

dk_status weights_load_hf(const char *dir, const model_config *c, const param_layout *pl, param_buffers *host) {
    DK_TRY(check_buffers(dir, c, host));
    st_reader r;
    DK_TRY(safetensors_open(&r, dir));
    hf_slot *slots = dk_malloc((size_t)max_slots(c) * sizeof *slots);
    unsigned char *used = dk_calloc((size_t)(r.n_tensors ? r.n_tensors : 1), 1);
    int n = build_slots(c, pl, host, slots);
    dk_status s = DK_OK;
    for (int i = 0; i < n && s == DK_OK; i++) {
        s = safetensors_read_f32(&r, slots[i].name, slots[i].ndim, slots[i].shape, slots[i].ptr);
        if (s == DK_OK) used[safetensors_find(&r, slots[i].name) - r.tensors] = 1;
    }
    const st_tensor *head = safetensors_find(&r, "lm_head.weight");
    if (s == DK_OK && c->tie_embeddings && head) {
        s = check_tied_head(head, c, host->embed);
        used[head - r.tensors] = 1;
    }
    for (int i = 0; i < r.n_tensors && s == DK_OK; i++) {
        if (used[i] || ends_with(r.tensors[i].name, ".rotary_emb.inv_freq")) continue;
        s = dk_fail(DK_ERR_RUNTIME, "%s: unexpected tensor '%s': not part of a %s model with this config", r.tensors[i].file,
                    r.tensors[i].name, model_arch_name(c->arch));
    }
    free(used);
    free(slots);
    safetensors_close(&r);
    return s;
}

dk_status weights_save_hf(const char *dir, const model_config *c, const param_layout *pl, const param_buffers *host,
                          const char *dtype, size_t max_shard_bytes) {
    st_dtype dt;
    DK_TRY(safetensors_dtype_parse(dtype, &dt));
    DK_TRY(check_buffers(dir, c, host));
    /* config.json first: it refuses a config its family cannot express, and
     * that should stop the save before gigabytes of weights are written. */
    DK_TRY(dk_mkdirs(dir));
    size_t len = strlen(dir) + 16;
    char *cfg = dk_malloc(len);
    snprintf(cfg, len, "%s/config.json", dir);
    dk_status s = model_config_to_hf(c, cfg, safetensors_dtype_torch_name(dt));
    free(cfg);
    DK_TRY(s);
    hf_slot *slots = dk_malloc((size_t)max_slots(c) * sizeof *slots);
    int n = build_slots(c, pl, host, slots);
    st_entry *e = dk_calloc((size_t)n, sizeof *e);
    for (int i = 0; i < n; i++) {
        e[i].name = slots[i].name;
        e[i].ndim = slots[i].ndim;
        e[i].shape[0] = slots[i].shape[0];
        e[i].shape[1] = slots[i].shape[1];
        e[i].data = slots[i].ptr;
    }
    s = safetensors_write_dir(dir, e, n, dt, max_shard_bytes);
    free(e);
    free(slots);
    return s;
}
