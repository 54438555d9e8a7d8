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
#include "model/weights_shards.h"

static void slot_set(weights_slot *s, int unit, size_t offset, int ndim, int64_t d0, int64_t d1, const char *fmt,
                     int layer) {
    snprintf(s->name, sizeof s->name, fmt, layer);
    s->unit = unit;
    s->offset = offset;
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = ndim == 2 ? d1 : 0;
    s->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
}

int weights_n_units(const model_config *c) { return c->n_layers + (c->tie_embeddings ? 2 : 3); }

size_t weights_unit_size(const model_config *c, const param_layout *pl, int unit) {
    if (unit == 0) return pl->embed_size;
    if (unit <= c->n_layers) return pl->layer_size;
    if (unit == c->n_layers + 1) return pl->final_norm_size;
    return pl->lm_head_size;
}

float *weights_unit_ptr(const model_config *c, const param_buffers *b, int unit) {
    if (unit == 0) return b->embed;
    if (unit <= c->n_layers) return b->layers[unit - 1];
    if (unit == c->n_layers + 1) return b->final_norm;
    return b->lm_head;
}

int weights_max_slots(const model_config *c) { return 3 + c->n_layers * P_LAYER_COUNT; }

/* Every tensor the config calls for, in the order transformers declares them;
 * lm_head last and only when untied. Within a layer this is also the order of
 * the flat buffer (params.h), so the slots tile every unit front to back. */
int weights_slots(const model_config *c, const param_layout *pl, weights_slot *s) {
    int n = 0;
    slot_set(&s[n++], 0, 0, 2, c->vocab_size, c->hidden_size, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        const int u = l + 1;
#define MAT(t, fmt) slot_set(&s[n++], u, pl->off[t], 2, pl->rows[t], pl->cols[t], fmt, l)
#define VEC(t, fmt) slot_set(&s[n++], u, pl->off[t], 1, pl->cols[t], 0, fmt, l)
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
        slot_set(&s[n++], u, pl->off[P_W_GATE_UP], 2, I, C, "model.layers.%d.mlp.gate_proj.weight", l);
        slot_set(&s[n++], u, pl->off[P_W_GATE_UP] + (size_t)I * C, 2, I, C, "model.layers.%d.mlp.up_proj.weight", l);
        MAT(P_W_DOWN, "model.layers.%d.mlp.down_proj.weight");
#undef MAT
#undef VEC
    }
    slot_set(&s[n++], c->n_layers + 1, 0, 1, c->hidden_size, 0, "model.norm.weight", 0);
    if (!c->tie_embeddings) slot_set(&s[n++], c->n_layers + 2, 0, 2, c->vocab_size, c->hidden_size, "lm_head.weight", 0);
    return n;
}

static dk_status check_buffers(const char *dir, const model_config *c, const param_buffers *b) {
    if (b->elem_size != sizeof(float))
        return dk_fail(DK_ERR_RUNTIME, "%s: weights need fp32 host buffers (elem_size 4), got elem_size %zu", dir, b->elem_size);
    if (b->n_layers != c->n_layers)
        return dk_fail(DK_ERR_RUNTIME, "%s: buffers hold %d layers but the config has %d", dir, b->n_layers, c->n_layers);
    if (!c->tie_embeddings && !b->lm_head)
        return dk_fail(DK_ERR_RUNTIME, "%s: the config has an untied lm head but no lm_head buffer was allocated", dir);
    return DK_OK;
}

st_entry *weights_entries(const model_config *c, const weights_slot *s, int n, const param_buffers *host) {
    st_entry *e = dk_calloc((size_t)(n ? n : 1), sizeof *e);
    for (int i = 0; i < n; i++) {
        e[i].name = s[i].name;
        e[i].ndim = s[i].ndim;
        e[i].shape[0] = s[i].shape[0];
        e[i].shape[1] = s[i].shape[1];
        e[i].data = host ? weights_unit_ptr(c, host, s[i].unit) + s[i].offset : NULL;
    }
    return e;
}

dk_status weights_load_hf(const char *dir, const model_config *c, const param_layout *pl, param_buffers *host) {
    DK_TRY(check_buffers(dir, c, host));
    weights_reader w;
    DK_TRY(weights_reader_open(&w, dir, c, pl));
    dk_status s = DK_OK;
    for (int u = 0; u < weights_n_units(c) && s == DK_OK; u++)
        s = weights_reader_read(&w, u, 0, weights_unit_size(c, pl, u), weights_unit_ptr(c, host, u));
    weights_reader_close(&w);
    return s;
}

dk_status weights_save_config(const char *dir, const model_config *c, st_dtype dt) {
    DK_TRY(dk_mkdirs(dir));
    size_t len = strlen(dir) + 16;
    char *cfg = dk_malloc(len);
    snprintf(cfg, len, "%s/config.json", dir);
    dk_status s = model_config_to_hf(c, cfg, safetensors_dtype_torch_name(dt));
    free(cfg);
    return s;
}

dk_status weights_save_hf(const char *dir, const model_config *c, const param_layout *pl, const param_buffers *host,
                          const char *dtype, size_t max_shard_bytes) {
    st_dtype dt;
    DK_TRY(safetensors_dtype_parse(dtype, &dt));
    DK_TRY(check_buffers(dir, c, host));
    /* config.json first: it refuses a config its family cannot express, and
     * that should stop the save before gigabytes of weights are written. */
    DK_TRY(weights_save_config(dir, c, dt));
    weights_slot *slots = dk_malloc((size_t)weights_max_slots(c) * sizeof *slots);
    int n = weights_slots(c, pl, slots);
    st_entry *e = weights_entries(c, slots, n, host);
    dk_status s = safetensors_write_dir(dir, e, n, dt, max_shard_bytes);
    free(e);
    free(slots);
    return s;
}
