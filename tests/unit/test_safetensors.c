/* test_safetensors.c: the safetensors reader and the HF-name loader against
 * files written by the reference Python `safetensors` package and by
 * transformers' save_pretrained (tests/make_safetensors_fixtures.py), the
 * error messages for broken inputs (each must name the file and the tensor),
 * and the statistics of param_init_random. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "model/param_buffers.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tests/check.h"
#include "tests/fixture_models.h"

#define FIX "tests/fixtures/safetensors"

/* The call must fail and its message must contain every string given. */
static void expect_error(dk_status s, const char *what, const char *const *needles) {
    CHECK(s != DK_OK, "%s: expected an error", what);
    if (s == DK_OK) return;
    const char *msg = dk_error();
    for (int i = 0; needles[i]; i++) CHECK(strstr(msg, needles[i]) != NULL, "%s: message lacks '%s': %s", what, needles[i], msg);
    printf("  %-22s -> %s\n", what, msg);
}
#define EXPECT_ERROR(s, what, ...) expect_error((s), (what), (const char *const[]){__VA_ARGS__, NULL})

/* ---- reader vs the Python safetensors package ----------------------------------- */

static void test_mixed(void) {
    char *js, *bin;
    size_t blen;
    if (dk_read_file(FIX "/mixed_ref.json", &js, NULL) != DK_OK || dk_read_file(FIX "/mixed_ref.bin", &bin, &blen) != DK_OK) {
        CHECK(0, "cannot read the mixed fixture references: %s", dk_error());
        return;
    }
    cJSON *ref = cJSON_Parse(js);
    const cJSON *list = cJSON_GetObjectItem(ref, "tensors");
    st_reader r;
    dk_status s = safetensors_open(&r, FIX "/mixed.safetensors");
    CHECK(s == DK_OK, "%s", dk_error());
    if (s != DK_OK) return;
    CHECK(r.n_tensors == cJSON_GetArraySize(list), "%d tensors, reference has %d", r.n_tensors, cJSON_GetArraySize(list));
    size_t compared = 0, mismatched = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        const st_tensor *t = safetensors_find(&r, name);
        CHECK(t != NULL, "tensor '%s' not listed", name);
        if (!t) continue;
        CHECK(!strcmp(safetensors_dtype_name(t->dtype), cJSON_GetObjectItem(e, "dtype")->valuestring), "%s dtype %s", name,
              safetensors_dtype_name(t->dtype));
        const cJSON *shape = cJSON_GetObjectItem(e, "shape");
        int64_t sh[ST_MAX_DIMS];
        int nd = cJSON_GetArraySize(shape);
        for (int i = 0; i < nd; i++) sh[i] = (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble;
        size_t numel = (size_t)cJSON_GetObjectItem(e, "numel")->valuedouble;
        size_t off = (size_t)cJSON_GetObjectItem(e, "offset")->valuedouble;
        float *out = dk_malloc((numel + 1) * sizeof *out);
        s = safetensors_read_f32(&r, name, nd, sh, out);
        CHECK(s == DK_OK, "%s", dk_error());
        const uint32_t *want = (const uint32_t *)(bin + 4 * off);
        for (size_t i = 0; i < numel; i++) {
            uint32_t got;
            memcpy(&got, &out[i], 4);
            /* Exact: bf16 -> fp32 and fp16 -> fp32 lose nothing. A NaN only has to
             * stay NaN (torch's fp16 -> fp32 rewrites the payload). */
            float wf;
            memcpy(&wf, &want[i], 4);
            if (isnan(wf) ? !isnan(out[i]) : got != want[i]) mismatched++;
            compared++;
        }
        free(out);
    }
    CHECK(mismatched == 0, "%zu of %zu values differ from the reference bits", mismatched, compared);
    printf("mixed.safetensors: %d tensors, %zu values, %zu bit mismatches vs python safetensors\n", r.n_tensors, compared,
           mismatched);
    /* A wrong expected shape is reported with both shapes. */
    float dummy[64];
    s = safetensors_read_f32(&r, "a.bf16", 2, (const int64_t[]){5, 3}, dummy);
    EXPECT_ERROR(s, "wrong shape", "mixed.safetensors", "'a.bf16'", "expected shape [5, 3], got [3, 5]");
    s = safetensors_read_f32(&r, "nope", 1, (const int64_t[]){1}, dummy);
    EXPECT_ERROR(s, "missing tensor", "mixed.safetensors", "'nope'", "not found");
    safetensors_close(&r);
    cJSON_Delete(ref);
    free(js);
    free(bin);
}

/* ---- HF checkpoints into the flat layout ---------------------------------------- */

static void flatten(const param_buffers *b, const param_layout *pl, float *dst) {
    size_t n = 0;
    memcpy(dst + n, b->embed, pl->embed_size * 4), n += pl->embed_size;
    for (int l = 0; l < b->n_layers; l++) memcpy(dst + n, b->layers[l], pl->layer_size * 4), n += pl->layer_size;
    memcpy(dst + n, b->final_norm, pl->final_norm_size * 4), n += pl->final_norm_size;
    if (b->lm_head) memcpy(dst + n, b->lm_head, pl->lm_head_size * 4);
}

static size_t total_size(const param_layout *pl, int n_layers) {
    return pl->embed_size + (size_t)n_layers * pl->layer_size + pl->final_norm_size + pl->lm_head_size;
}

static void test_model(const char *name, dk_arch arch) {
    model_config c = fixture_model_config(arch);
    param_layout pl;
    param_layout_init(&pl, &c);
    param_buffers b;
    param_buffers_alloc_host(&b, &pl, c.n_layers, c.tie_embeddings, 4);
    char dir[256], ref_path[300];
    snprintf(dir, sizeof dir, FIX "/%s", name);
    snprintf(ref_path, sizeof ref_path, "%s/ref_layout.bin", dir);
    /* The hand-written config must be what config.json (from transformers) says. */
    model_config h;
    dk_status s = model_config_from_hf(dir, &h);
    CHECK(s == DK_OK, "%s", dk_error());
    if (s == DK_OK)
        CHECK(h.arch == c.arch && h.vocab_size == c.vocab_size && h.hidden_size == c.hidden_size &&
                  h.intermediate_size == c.intermediate_size && h.n_layers == c.n_layers && h.n_heads == c.n_heads &&
                  h.n_kv_heads == c.n_kv_heads && h.head_dim == c.head_dim && h.tie_embeddings == c.tie_embeddings &&
                  h.qkv_bias == c.qkv_bias && h.o_bias == c.o_bias && h.qk_norm == c.qk_norm,
              "%s: config.json disagrees with the test's config", name);
    s = weights_load_hf(dir, &c, &pl, &b);
    CHECK(s == DK_OK, "%s: %s", name, dk_error());
    char *ref;
    size_t rlen;
    s = dk_read_file(ref_path, &ref, &rlen);
    CHECK(s == DK_OK, "%s", dk_error());
    size_t n = total_size(&pl, c.n_layers);
    CHECK(rlen == 4 * n, "%s: reference holds %zu floats, layout has %zu", name, rlen / 4, n);
    if (s == DK_OK && rlen == 4 * n) {
        float *got = dk_malloc(n * 4);
        flatten(&b, &pl, got);
        size_t bad = 0;
        double maxd = 0;
        for (size_t i = 0; i < n; i++) {
            float w;
            memcpy(&w, ref + 4 * i, 4);
            if (memcmp(&w, &got[i], 4)) bad++;
            double d = fabs((double)w - got[i]);
            if (d > maxd) maxd = d;
        }
        CHECK(bad == 0, "%s: %zu of %zu parameters differ from transformers' (max diff %g)", name, bad, n, maxd);
        printf("%s: %zu parameters in our layout, %zu differ from transformers' (max |diff| %g)\n", name, n, bad, maxd);
        free(got);
    }
    if (s == DK_OK) free(ref);
    param_buffers_free_host(&b);
}

/* ---- broken inputs ---------------------------------------------------------------- */

static char tmp[64];

static void write_bytes(const char *path, const void *a, size_t na, const void *b, size_t nb) {
    FILE *f = fopen(path, "wb");
    DK_ASSERT(f);
    if (na) fwrite(a, 1, na, f);
    if (nb) fwrite(b, 1, nb, f);
    fclose(f);
}

/* A file with header JSON H (its stated length LEN_OVERRIDE when nonzero) and NDATA zero bytes of data. */
static void write_raw(const char *path, const char *h, uint64_t len_override, size_t ndata) {
    uint64_t n = len_override ? len_override : strlen(h);
    char *buf = dk_calloc(8 + strlen(h) + ndata + 1, 1);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, h, strlen(h));
    write_bytes(path, buf, 8 + strlen(h) + ndata, NULL, 0);
    free(buf);
}

static dk_status open_and_close(const char *path) {
    st_reader r;
    dk_status s = safetensors_open(&r, path);
    if (s == DK_OK) safetensors_close(&r);
    return s;
}

/* Copies every tensor of the fixture model SRC into DST/model.safetensors as fp32,
 * leaving out DROP (may be NULL) and adding EXTRA of shape [4] (may be NULL). */
static void copy_model(const char *src, const char *dst, const char *drop, const char *extra, const float *extra_data,
                       int extra_n) {
    st_reader r;
    DK_ASSERT(safetensors_open(&r, src) == DK_OK);
    st_entry *e = dk_calloc((size_t)r.n_tensors + 1, sizeof *e);
    int n = 0;
    for (int i = 0; i < r.n_tensors; i++) {
        const st_tensor *t = &r.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        float *d = dk_malloc(t->numel * 4 + 4);
        safetensors_tensor_to_f32(t, d);
        e[n].name = t->name;
        e[n].ndim = t->ndim;
        memcpy(e[n].shape, t->shape, sizeof t->shape);
        e[n].data = d;
        n++;
    }
    if (extra) {
        e[n].name = extra;
        e[n].ndim = 2;
        e[n].shape[0] = extra_n / 16;
        e[n].shape[1] = 16;
        e[n].data = extra_data;
        n++;
    }
    DK_ASSERT(dk_mkdirs(dst) == DK_OK);
    DK_ASSERT(safetensors_write_dir(dst, e, n, ST_F32, 0) == DK_OK);
    for (int i = 0; i < n; i++)
        if (e[i].data != extra_data) free((void *)e[i].data);
    free(e);
    safetensors_close(&r);
}

static void test_errors(void) {
    char path[256], path2[256];
    printf("error messages:\n");
    /* Fixture directories the train program's bad-input table points at. */
    {
        model_config c = fixture_model_config(DK_ARCH_QWEN3);
        param_layout pl;
        param_layout_init(&pl, &c);
        param_buffers b;
        param_buffers_alloc_host(&b, &pl, c.n_layers, c.tie_embeddings, 4);
        EXPECT_ERROR(weights_load_hf(FIX "/bad_truncated", &c, &pl, &b), "bad_truncated",
                     FIX "/bad_truncated/model.safetensors", "truncated", "tensor '");
        EXPECT_ERROR(weights_load_hf(FIX "/bad_shape", &c, &pl, &b), "bad_shape", FIX "/bad_shape/model.safetensors",
                     "'model.layers.1.mlp.up_proj.weight'", "expected shape [32, 16], got [16, 32]");
        EXPECT_ERROR(weights_load_hf(FIX "/bad_missing", &c, &pl, &b), "bad_missing", FIX "/bad_missing/model.safetensors",
                     "'model.layers.0.self_attn.k_proj.weight'", "not found");
        /* A Qwen2 checkpoint under a Qwen3 config: the first mismatch is named. */
        EXPECT_ERROR(weights_load_hf(FIX "/qwen2", &c, &pl, &b), "arch mismatch", FIX "/qwen2/model-0000",
                     "'model.layers.0.self_attn.q_proj.weight'", "expected shape [32, 16], got [16, 16]");
        snprintf(path, sizeof path, "%s/empty", tmp);
        dk_mkdirs(path);
        EXPECT_ERROR(weights_load_hf(path, &c, &pl, &b), "empty dir", path, "no model.safetensors");

        /* Unknown tensors are errors, rotary buffers are not. */
        float extra[32] = {0};
        snprintf(path, sizeof path, "%s/extra", tmp);
        copy_model(FIX "/qwen3", path, NULL, "model.layers.0.mlp.extra_proj.weight", extra, 32);
        EXPECT_ERROR(weights_load_hf(path, &c, &pl, &b), "unexpected tensor", path, "'model.layers.0.mlp.extra_proj.weight'",
                     "unexpected");
        snprintf(path, sizeof path, "%s/rotary", tmp);
        copy_model(FIX "/qwen3", path, NULL, "model.layers.1.self_attn.rotary_emb.inv_freq", extra, 32);
        CHECK(weights_load_hf(path, &c, &pl, &b) == DK_OK, "rotary inv_freq should be ignored: %s", dk_error());
        /* Untied config without lm_head in the file. */
        snprintf(path, sizeof path, "%s/nohead", tmp);
        copy_model(FIX "/qwen3", path, "lm_head.weight", NULL, NULL, 0);
        EXPECT_ERROR(weights_load_hf(path, &c, &pl, &b), "untied, no lm_head", path, "'lm_head.weight'", "not found");
        /* Buffers of the wrong kind are refused, not overrun. */
        param_buffers b16 = b;
        b16.elem_size = 2;
        EXPECT_ERROR(weights_load_hf(FIX "/qwen3", &c, &pl, &b16), "bf16 buffers", "elem_size 4");
        param_buffers_free_host(&b);
    }
    {
        /* Tied config: a checkpoint may carry lm_head only as a copy of the embedding. */
        model_config c = fixture_model_config(DK_ARCH_QWEN2);
        param_layout pl;
        param_layout_init(&pl, &c);
        param_buffers b;
        param_buffers_alloc_host(&b, &pl, c.n_layers, c.tie_embeddings, 4);
        DK_ASSERT(weights_load_hf(FIX "/qwen2", &c, &pl, &b) == DK_OK);
        float *head = dk_malloc(pl.embed_size * 4);
        memcpy(head, b.embed, pl.embed_size * 4);
        snprintf(path, sizeof path, "%s/tied_same", tmp);
        copy_model(FIX "/qwen2", path, NULL, "lm_head.weight", head, (int)pl.embed_size);
        CHECK(weights_load_hf(path, &c, &pl, &b) == DK_OK, "tied copy of the embedding should load: %s", dk_error());
        head[5] += 1.0f;
        snprintf(path, sizeof path, "%s/tied_diff", tmp);
        copy_model(FIX "/qwen2", path, NULL, "lm_head.weight", head, (int)pl.embed_size);
        EXPECT_ERROR(weights_load_hf(path, &c, &pl, &b), "tied, different head", path, "'lm_head.weight'", "ties them");
        snprintf(path, sizeof path, "%s/tied_shape", tmp);
        copy_model(FIX "/qwen2", path, NULL, "lm_head.weight", head, (int)pl.embed_size - 16);
        EXPECT_ERROR(weights_load_hf(path, &c, &pl, &b), "tied, head shape", path, "'lm_head.weight'",
                     "expected shape [64, 16], got [63, 16]");
        free(head);
        param_buffers_free_host(&b);
    }
    /* Hand-made broken files. */
    snprintf(path, sizeof path, "%s/short.safetensors", tmp);
    write_bytes(path, "abc", 3, NULL, 0);
    EXPECT_ERROR(open_and_close(path), "shorter than 8 bytes", path, "truncated");
    snprintf(path, sizeof path, "%s/hlen.safetensors", tmp);
    write_raw(path, "{}", 4096, 0);
    EXPECT_ERROR(open_and_close(path), "header beyond file", path, "truncated", "header length 4096");
    snprintf(path, sizeof path, "%s/badjson.safetensors", tmp);
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]   ", 0, 8);
    EXPECT_ERROR(open_and_close(path), "bad header JSON", path, "bad header JSON");
    snprintf(path, sizeof path, "%s/trailing.safetensors", tmp);
    write_raw(path, "{}   x  ", 0, 0);
    EXPECT_ERROR(open_and_close(path), "trailing garbage", path, "bad header JSON");
    snprintf(path, sizeof path, "%s/array.safetensors", tmp);
    write_raw(path, "[1, 2]  ", 0, 0);
    EXPECT_ERROR(open_and_close(path), "header not object", path, "not an object");
    snprintf(path, sizeof path, "%s/i64.safetensors", tmp);
    write_raw(path, "{\"ids\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 0, 16);
    EXPECT_ERROR(open_and_close(path), "unsupported dtype", path, "'ids'", "I64");
    snprintf(path, sizeof path, "%s/offsets.safetensors", tmp);
    write_raw(path, "{\"w\": {\"dtype\": \"BF16\", \"shape\": [3, 2], \"data_offsets\": [0, 10]}}", 0, 16);
    EXPECT_ERROR(open_and_close(path), "offsets vs shape", path, "'w'", "needs 12");
    snprintf(path, sizeof path, "%s/beyond.safetensors", tmp);
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                    " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", 0, 20);
    EXPECT_ERROR(open_and_close(path), "data beyond file", path, "'b'", "truncated");
    snprintf(path, sizeof path, "%s/negshape.safetensors", tmp);
    write_raw(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}", 0, 0);
    EXPECT_ERROR(open_and_close(path), "negative shape", path, "'w'", "shape");
    snprintf(path, sizeof path, "%s/nofile.safetensors", tmp);
    EXPECT_ERROR(open_and_close(path), "no such file", path, "cannot open");
    /* Sharded sets: the index must agree with the shards. */
    snprintf(path, sizeof path, "%s/shards", tmp);
    dk_mkdirs(path);
    snprintf(path2, sizeof path2, "%s/shards/a.safetensors", tmp);
    write_raw(path2, "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 0, 4);
    snprintf(path2, sizeof path2, "%s/shards/model.safetensors.index.json", tmp);
    const char *idx = "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\"}}";
    write_bytes(path2, idx, strlen(idx), NULL, 0);
    EXPECT_ERROR(open_and_close(path), "index names absent", path2, "'y'", "a.safetensors");
    idx = "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}}";
    write_bytes(path2, idx, strlen(idx), NULL, 0);
    EXPECT_ERROR(open_and_close(path), "index names no file", "shards/b.safetensors", "cannot open");
    snprintf(path2, sizeof path2, "%s/shards/b.safetensors", tmp);
    write_raw(path2, "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 0, 4);
    EXPECT_ERROR(open_and_close(path), "duplicate across shards", "'x'", "twice", "b.safetensors");
    snprintf(path2, sizeof path2, "%s/shards/model.safetensors.index.json", tmp);
    idx = "{\"weight_map\": {\"x\": \"../a.safetensors\"}}";
    write_bytes(path2, idx, strlen(idx), NULL, 0);
    EXPECT_ERROR(open_and_close(path), "index path escape", path2, "'x'");
    idx = "{\"metadata\": {}}";
    write_bytes(path2, idx, strlen(idx), NULL, 0);
    EXPECT_ERROR(open_and_close(path), "index without map", path2, "weight_map");
}

/* ---- random initialisation ---------------------------------------------------------- */

static void test_init(void) {
    model_config c = fixture_model_config(DK_ARCH_LLAMA); /* has every bias kind */
    c.vocab_size = 1000;
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.n_heads = 8;
    c.n_kv_heads = 4;
    c.head_dim = 16;
    c.qk_norm = 1;
    param_layout pl;
    param_layout_init(&pl, &c);
    param_buffers a, b;
    param_buffers_alloc_host(&a, &pl, c.n_layers, 0, 4);
    param_buffers_alloc_host(&b, &pl, c.n_layers, 0, 4);
    const float std = 0.02f;
    param_init_random(&a, &pl, &c, 1234, std);
    param_init_random(&b, &pl, &c, 1234, std);
    int same = memcmp(a.embed, b.embed, pl.embed_size * 4) == 0 && memcmp(a.lm_head, b.lm_head, pl.lm_head_size * 4) == 0;
    for (int l = 0; l < c.n_layers; l++) same &= memcmp(a.layers[l], b.layers[l], pl.layer_size * 4) == 0;
    CHECK(same, "same seed must give the same parameters");
    param_init_random(&b, &pl, &c, 1235, std);
    size_t equal = 0;
    for (size_t i = 0; i < pl.embed_size; i++) equal += ((float *)a.embed)[i] == ((float *)b.embed)[i];
    CHECK(equal < 5, "seeds 1234 and 1235 share %zu embedding values", equal);
    /* Norms 1, biases 0; matrices normal(0, std), pooled over every matrix. */
    double s1 = 0, s2 = 0, s4 = 0, within1 = 0, corr = 0;
    size_t n = 0, bad_const = 0;
    for (int l = 0; l < c.n_layers; l++) {
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            const float *x = param_layer_ptr(&a, &pl, l, (dk_layer_tensor)t);
            int is_norm = t == P_ATTN_NORM || t == P_MLP_NORM || t == P_Q_NORM || t == P_K_NORM;
            int is_bias = t == P_BQ || t == P_BK || t == P_BV || t == P_BO;
            for (size_t i = 0; i < pl.size[t]; i++) {
                if (is_norm) bad_const += x[i] != 1.0f;
                else if (is_bias) bad_const += x[i] != 0.0f;
                else {
                    double z = x[i] / std;
                    s1 += z, s2 += z * z, s4 += z * z * z * z, within1 += fabs(z) < 1.0;
                    n++;
                }
            }
        }
        /* wq and wk of one layer must not repeat each other's stream. */
        const float *q = param_layer_ptr(&a, &pl, l, P_WQ), *k = param_layer_ptr(&a, &pl, l, P_WK);
        for (size_t i = 0; i < pl.size[P_WK]; i++) corr += (double)q[i] * k[i] / ((double)std * std);
    }
    corr /= (double)(pl.size[P_WK] * c.n_layers);
    const float *e = a.embed;
    for (size_t i = 0; i < pl.embed_size; i++) {
        double z = e[i] / std;
        s1 += z, s2 += z * z, s4 += z * z * z * z, within1 += fabs(z) < 1.0;
        n++;
    }
    for (size_t i = 0; i < pl.final_norm_size; i++) bad_const += ((float *)a.final_norm)[i] != 1.0f;
    double mean = s1 / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var), frac1 = within1 / n;
    double se = 1.0 / sqrt((double)n);
    printf("init: %zu normal values: mean %.5f (se %.5f), std/target %.5f, kurtosis %.4f (3), P(|z|<1) %.5f (0.68269), "
           "corr(wq, wk) %.5f; %zu norm/bias values off\n",
           n, mean, se, sqrt(var), kurt, frac1, corr, bad_const);
    CHECK(bad_const == 0, "%zu norm or bias values are not 1 / 0", bad_const);
    CHECK(fabs(mean) < 5 * se, "mean %g", mean);
    CHECK(fabs(sqrt(var) - 1.0) < 0.01, "std ratio %g", sqrt(var));
    CHECK(fabs(kurt - 3.0) < 0.05, "kurtosis %g", kurt);
    CHECK(fabs(frac1 - 0.682689) < 0.005, "P(|z|<1) %g", frac1);
    CHECK(fabs(corr) < 5.0 / sqrt((double)(pl.size[P_WK] * c.n_layers)), "corr %g", corr);
    /* A layer's values do not depend on how many layers there are. */
    model_config c1 = c;
    c1.n_layers = 1;
    param_buffers one;
    param_buffers_alloc_host(&one, &pl, 1, 0, 4);
    param_init_random(&one, &pl, &c1, 1234, std);
    CHECK(memcmp(one.layers[0], a.layers[0], pl.layer_size * 4) == 0 &&
              memcmp(one.lm_head, a.lm_head, pl.lm_head_size * 4) == 0,
          "layer 0 / lm head change with the layer count");
    param_buffers_free_host(&one);
    param_buffers_free_host(&a);
    param_buffers_free_host(&b);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/dk_test_st_XXXXXX");
    if (!mkdtemp(tmp)) DK_ABORT("mkdtemp failed");
    test_mixed();
    test_model("qwen3", DK_ARCH_QWEN3);
    test_model("qwen2", DK_ARCH_QWEN2);
    test_model("llama", DK_ARCH_LLAMA);
    test_errors();
    test_init();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp);
    if (failures) {
        fprintf(stderr, "test_safetensors: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_safetensors: all checks passed\n");
    return 0;
}
