/* hf_config.c: model_config <-> Hugging Face config.json, for the Qwen3,
 * Qwen2/2.5 and Llama families, plus shape validation and the parameter
 * count. Reading is strict: a field the model cannot honour (scaled RoPE,
 * sliding windows, another activation, MLP bias) is an error naming the field,
 * never silently ignored. Both the transformers 4 layout (rope_theta,
 * rope_scaling) and the 5 layout (rope_parameters) are read; the 4 layout is
 * written, which both versions and vLLM load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "common/util.h"
#include "model/config.h"

const char *const model_arch_names[DK_N_ARCH] = {[DK_ARCH_QWEN3] = "qwen3", [DK_ARCH_QWEN2] = "qwen2",
                                                [DK_ARCH_LLAMA] = "llama"};
static const char *const arch_classes[DK_N_ARCH] = {
    [DK_ARCH_QWEN3] = "Qwen3ForCausalLM", [DK_ARCH_QWEN2] = "Qwen2ForCausalLM", [DK_ARCH_LLAMA] = "LlamaForCausalLM"};

const char *model_arch_name(dk_arch a) { return (unsigned)a < DK_N_ARCH ? model_arch_names[a] : "unknown"; }

dk_status model_arch_parse(const char *s, dk_arch *out) {
    for (int i = 0; i < DK_N_ARCH; i++)
        if (!strcmp(s, model_arch_names[i])) {
            *out = (dk_arch)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown architecture '%s' (expected qwen3, qwen2 or llama)", s);
}

dk_status model_config_validate(const model_config *c) {
    if ((unsigned)c->arch > DK_ARCH_LLAMA) return dk_fail(DK_ERR_USAGE, "arch %d is not a known architecture", c->arch);
    const struct {
        const char *name;
        int v;
    } pos[] = {{"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
               {"intermediate_size", c->intermediate_size}, {"n_layers", c->n_layers},
               {"n_heads", c->n_heads}, {"n_kv_heads", c->n_kv_heads},
               {"head_dim", c->head_dim}, {"max_position", c->max_position}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0) return dk_fail(DK_ERR_USAGE, "%s = %d must be > 0", pos[i].name, pos[i].v);
    if (c->n_heads % c->n_kv_heads)
        return dk_fail(DK_ERR_USAGE, "n_heads = %d is not a multiple of n_kv_heads = %d", c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2) return dk_fail(DK_ERR_USAGE, "head_dim = %d must be even (RoPE rotates pairs)", c->head_dim);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return dk_fail(DK_ERR_USAGE, "rope_theta = %g must be > 0", c->rope_theta);
    if (!(c->rms_eps > 0) || !isfinite(c->rms_eps))
        return dk_fail(DK_ERR_USAGE, "rms_eps = %g must be > 0", c->rms_eps);
    if (c->bos_token_id < -1 || c->bos_token_id >= c->vocab_size)
        return dk_fail(DK_ERR_USAGE, "bos_token_id = %d is outside the vocabulary of %d", c->bos_token_id,
                       c->vocab_size);
    if (c->eos_token_id < -1 || c->eos_token_id >= c->vocab_size)
        return dk_fail(DK_ERR_USAGE, "eos_token_id = %d is outside the vocabulary of %d", c->eos_token_id,
                       c->vocab_size);
    return DK_OK;
}

size_t model_config_n_params(const model_config *c) {
    const size_t V = (size_t)c->vocab_size, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * (size_t)c->head_dim, KV = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t layer = C                                   /* attention norm */
                   + (Q + 2 * KV) * C                  /* q, k, v */
                   + (c->qkv_bias ? Q + 2 * KV : 0)    /* their biases */
                   + (c->qk_norm ? 2 * (size_t)c->head_dim : 0)
                   + C * Q + (c->o_bias ? C : 0)       /* output projection */
                   + C                                 /* MLP norm */
                   + 3 * I * C;                        /* gate, up, down */
    return V * C + (size_t)c->n_layers * layer + C + (c->tie_embeddings ? 0 : V * C);
}

/* ---- reading ------------------------------------------------------------------- */

/* A checkpoint whose config.json is unreadable or unsupported is a bad data
 * file (DK_ERR_RUNTIME); a path that points at no file is a usage error. */
typedef struct {
    const char *path;
    const cJSON *root;
} hf_reader;

/* A field that is absent or JSON null counts as not given. */
static const cJSON *field(const hf_reader *r, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static dk_status missing(const hf_reader *r, const char *name) {
    return dk_fail(DK_ERR_RUNTIME, "%s: required field '%s' is missing", r->path, name);
}

static dk_status as_int(const hf_reader *r, const char *name, const cJSON *v, int *out) {
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || d < -2147483648.0 || d > 2147483647.0)
        return dk_fail(DK_ERR_RUNTIME, "%s: field '%s' must be an integer", r->path, name);
    *out = (int)d;
    return DK_OK;
}

/* Reads an integer field; `def` is used when absent, unless required. */
static dk_status get_int(const hf_reader *r, const char *name, int required, int def, int *out) {
    const cJSON *v = field(r, name);
    if (!v) {
        if (required) return missing(r, name);
        *out = def;
        return DK_OK;
    }
    return as_int(r, name, v, out);
}

static dk_status get_float(const hf_reader *r, const cJSON *obj, const char *name, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v || cJSON_IsNull(v)) return missing(r, name);
    if (!cJSON_IsNumber(v)) return dk_fail(DK_ERR_RUNTIME, "%s: field '%s' must be a number", r->path, name);
    *out = (float)v->valuedouble;
    return DK_OK;
}

static dk_status get_bool(const hf_reader *r, const char *name, int def, int *out) {
    const cJSON *v = field(r, name);
    if (!v) {
        *out = def;
        return DK_OK;
    }
    if (!cJSON_IsBool(v)) return dk_fail(DK_ERR_RUNTIME, "%s: field '%s' must be true or false", r->path, name);
    *out = cJSON_IsTrue(v);
    return DK_OK;
}

/* bos/eos: an integer, a list (the first entry counts), or absent (-1). */
static dk_status get_token(const hf_reader *r, const char *name, int *out) {
    const cJSON *v = field(r, name);
    *out = -1;
    if (!v) return DK_OK;
    if (cJSON_IsArray(v)) {
        v = cJSON_GetArrayItem(v, 0);
        if (!v) return DK_OK;
    }
    return as_int(r, name, v, out);
}

/* RoPE must be the plain kind: rope_scaling null or of type "default", and
 * rope_parameters (transformers 5) of rope_type "default". */
static dk_status read_rope(const hf_reader *r, float *theta) {
    const cJSON *scaling = field(r, "rope_scaling"), *params = field(r, "rope_parameters");
    const struct {
        const char *name;
        const cJSON *obj;
    } kinds[] = {{"rope_scaling", scaling}, {"rope_parameters", params}};
    for (int i = 0; i < 2; i++) {
        const cJSON *obj = kinds[i].obj;
        if (!obj) continue;
        if (!cJSON_IsObject(obj))
            return dk_fail(DK_ERR_RUNTIME, "%s: field '%s' must be an object", r->path, kinds[i].name);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "rope_type");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(obj, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : t ? "(not a string)" : "default";
        if (strcmp(type, "default"))
            return dk_fail(DK_ERR_RUNTIME, "%s: field '%s': RoPE type '%s' is not supported (only unscaled RoPE)",
                           r->path, kinds[i].name, type);
    }
    if (field(r, "rope_theta")) return get_float(r, r->root, "rope_theta", theta);
    if (params && cJSON_GetObjectItemCaseSensitive(params, "rope_theta"))
        return get_float(r, params, "rope_theta", theta);
    return missing(r, "rope_theta");
}

/* Fields whose other values change the computation this model implements. */
static dk_status read_unsupported(const hf_reader *r) {
    const cJSON *act = field(r, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return dk_fail(DK_ERR_RUNTIME, "%s: field 'hidden_act': only \"silu\" is supported", r->path);
    if (cJSON_IsTrue(field(r, "use_sliding_window")))
        return dk_fail(DK_ERR_RUNTIME, "%s: field 'use_sliding_window': sliding-window attention is not supported",
                       r->path);
    if (cJSON_IsTrue(field(r, "mlp_bias")))
        return dk_fail(DK_ERR_RUNTIME, "%s: field 'mlp_bias': MLP biases are not supported", r->path);
    const cJSON *types = field(r, "layer_types"), *t;
    cJSON_ArrayForEach(t, types) {
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
            return dk_fail(DK_ERR_RUNTIME, "%s: field 'layer_types': only \"full_attention\" layers are supported",
                           r->path);
    }
    return DK_OK;
}

static dk_status read_config(const hf_reader *r, model_config *c) {
    memset(c, 0, sizeof *c);
    const cJSON *mt = field(r, "model_type");
    if (!mt) return missing(r, "model_type");
    if (!cJSON_IsString(mt) || model_arch_parse(mt->valuestring, &c->arch) != DK_OK)
        return dk_fail(DK_ERR_RUNTIME, "%s: field 'model_type': '%s' is not supported (qwen3, qwen2, llama)", r->path,
                       cJSON_IsString(mt) ? mt->valuestring : "(not a string)");
    DK_TRY(read_unsupported(r));
    DK_TRY(get_int(r, "vocab_size", 1, 0, &c->vocab_size));
    DK_TRY(get_int(r, "hidden_size", 1, 0, &c->hidden_size));
    DK_TRY(get_int(r, "intermediate_size", 1, 0, &c->intermediate_size));
    DK_TRY(get_int(r, "num_hidden_layers", 1, 0, &c->n_layers));
    DK_TRY(get_int(r, "num_attention_heads", 1, 0, &c->n_heads));
    DK_TRY(get_int(r, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads));
    DK_TRY(get_int(r, "max_position_embeddings", 1, 0, &c->max_position));
    if (c->n_heads <= 0) return dk_fail(DK_ERR_RUNTIME, "%s: field 'num_attention_heads' must be > 0", r->path);
    /* Qwen3 states head_dim; the others may, else it is hidden / heads. */
    if (c->arch == DK_ARCH_QWEN3 || field(r, "head_dim")) {
        DK_TRY(get_int(r, "head_dim", 1, 0, &c->head_dim));
    } else {
        if (c->hidden_size % c->n_heads)
            return dk_fail(DK_ERR_RUNTIME, "%s: field 'head_dim' is missing and hidden_size %d is not a multiple of "
                           "num_attention_heads %d", r->path, c->hidden_size, c->n_heads);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    DK_TRY(get_float(r, r->root, "rms_norm_eps", &c->rms_eps));
    DK_TRY(read_rope(r, &c->rope_theta));
    DK_TRY(get_bool(r, "tie_word_embeddings", 0, &c->tie_embeddings));
    DK_TRY(get_token(r, "bos_token_id", &c->bos_token_id));
    DK_TRY(get_token(r, "eos_token_id", &c->eos_token_id));
    if (c->arch == DK_ARCH_QWEN2) {
        c->qkv_bias = 1; /* Qwen2 always has q/k/v bias and never o bias */
    } else {
        int bias;
        DK_TRY(get_bool(r, "attention_bias", 0, &bias));
        c->qkv_bias = c->o_bias = bias;
    }
    c->qk_norm = c->arch == DK_ARCH_QWEN3;
    dk_status s = model_config_validate(c);
    return s ? dk_wrap(DK_ERR_RUNTIME, "%s: ", r->path) : DK_OK;
}

dk_status model_config_from_hf(const char *dir, model_config *out) {
    /* DIR/config.json; a path to the .json file itself is accepted too. */
    struct stat st;
    size_t n = strlen(dir) + 16;
    char *path = dk_malloc(n);
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) snprintf(path, n, "%s", dir);
    else snprintf(path, n, "%s/config.json", dir);
    char *text;
    dk_status s = dk_read_file(path, &text, NULL);
    if (s) {
        if (!dk_file_exists(path)) s = dk_fail(DK_ERR_USAGE, "%s: cannot open: no such file", path);
        free(path);
        return s;
    }
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        if (root || !at) s = dk_fail(DK_ERR_RUNTIME, "%s: not a JSON object", path);
        else if (!*at) s = dk_fail(DK_ERR_RUNTIME, "%s: invalid JSON: unexpected end of file", path);
        else s = dk_fail(DK_ERR_RUNTIME, "%s: invalid JSON near '%.30s'", path, at);
    } else {
        hf_reader r = {path, root};
        s = read_config(&r, out);
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    return s;
}

/* ---- writing ------------------------------------------------------------------- */

/* A float field as the shortest decimal that reads back as the same float,
 * so 1e-6f is written 1e-06 rather than 9.9999999747524271e-07. */
static void add_float(cJSON *o, const char *name, float v) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtof(buf, NULL) == v) break;
    }
    cJSON_AddNumberToObject(o, name, strtod(buf, NULL));
}

static void add_token(cJSON *o, const char *name, int id) {
    if (id < 0) cJSON_AddNullToObject(o, name);
    else cJSON_AddNumberToObject(o, name, id);
}

dk_status model_config_to_hf(const model_config *c, const char *path, const char *dtype) {
    DK_TRY(model_config_validate(c));
    /* Only what the family's config.json can express survives a round trip. */
    const int att = c->qkv_bias;
    if (c->qk_norm != (c->arch == DK_ARCH_QWEN3))
        return dk_fail(DK_ERR_USAGE, "%s: a %s config.json cannot express qk_norm = %d", path,
                       model_arch_name(c->arch), c->qk_norm);
    if (c->arch == DK_ARCH_QWEN2 ? (!c->qkv_bias || c->o_bias) : c->qkv_bias != c->o_bias)
        return dk_fail(DK_ERR_USAGE, "%s: a %s config.json cannot express qkv_bias = %d with o_bias = %d", path,
                       model_arch_name(c->arch), c->qkv_bias, c->o_bias);

    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(arch_classes[c->arch]));
    if (c->arch != DK_ARCH_QWEN2) cJSON_AddBoolToObject(o, "attention_bias", att);
    cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
    add_token(o, "bos_token_id", c->bos_token_id);
    add_token(o, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position);
    if (c->arch == DK_ARCH_LLAMA) cJSON_AddBoolToObject(o, "mlp_bias", 0);
    cJSON_AddStringToObject(o, "model_type", model_arch_names[c->arch]);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_heads);
    add_float(o, "rms_norm_eps", c->rms_eps);
    cJSON_AddNullToObject(o, "rope_scaling");
    add_float(o, "rope_theta", c->rope_theta);
    if (c->arch != DK_ARCH_LLAMA) {
        cJSON_AddNullToObject(o, "sliding_window");
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddStringToObject(o, "torch_dtype", dtype ? dtype : "bfloat16");
    cJSON_AddBoolToObject(o, "use_cache", 1);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) DK_ABORT("out of memory printing config.json");

    /* path is the file to write, or a directory to write config.json into. */
    size_t n = strlen(path) + 16, len = strlen(text);
    char *file = dk_malloc(n), *out = dk_malloc(len + 1);
    snprintf(file, n, dk_dir_exists(path) ? "%s/config.json" : "%s", path);
    memcpy(out, text, len);
    out[len] = '\n';
    cJSON_free(text);
    dk_status s = dk_write_file(file, out, len + 1);
    free(out);
    free(file);
    return s;
}
