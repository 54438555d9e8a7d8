/* test_safetensors_write.c: the safetensors writer and weights_save_hf.
 *
 * Run without arguments it checks, in C: the bf16 / fp16 conversions
 * (exhaustively on the way up; against the compiler's _Float16 and a
 * double-precision nearest-even reference on the way down), the file layout
 * (8-byte header length, header padded to 8, metadata, contiguous offsets),
 * sharding and the index, stale-file removal, writer errors, and a model
 * round trip weights_save_hf -> weights_load_hf.
 *
 * Run as `test_safetensors_write --emit DIR` it writes files for
 * test_safetensors_interop.py, which reads them back with the Python
 * safetensors package and loads the saved models with transformers. */
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

#define OK(expr)                                                                     \
    do {                                                                             \
        dk_status ok_s_ = (expr);                                                    \
        if (ok_s_ != DK_OK) DK_ABORT("%s failed: %s", #expr, dk_error());            \
    } while (0)

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- conversions ------------------------------------------------------------------- */

/* Nearest-even bf16 by comparing distances in double: no bit tricks shared with the code under test. */
static uint16_t ref_bf16(float f) {
    uint32_t x = bits(f);
    if (isnan(f)) return 0x7fc0;
    uint32_t lo = x & 0xffff0000u, hi = lo + 0x10000u;
    if ((lo & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(lo >> 16); /* inf */
    double dlo = fabs((double)from_bits(lo)), dx = fabs((double)f);
    double dhi = ((hi & 0x7f800000u) == 0x7f800000u) ? ldexp(1.0, 128) : fabs((double)from_bits(hi));
    double a = dx - dlo, b = dhi - dx;
    if (a < b) return (uint16_t)(lo >> 16);
    if (b < a) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1u) ? hi >> 16 : lo >> 16);
}

static int is_nan16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
static int is_nan_bf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

static void test_conversions(void) {
    size_t bad_up = 0, bad_down = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h), g = st_bf16_to_f32((uint16_t)h);
        if (is_nan16((uint16_t)h) ? !(isnan(f) && is_nan16(st_f32_to_f16(f))) : st_f32_to_f16(f) != h) bad_up++;
        if (is_nan_bf16((uint16_t)h) ? !(isnan(g) && is_nan_bf16(st_f32_to_bf16(g))) : st_f32_to_bf16(g) != h) bad_up++;
        /* bf16 -> fp32 is the top half of the bits. */
        if (!is_nan_bf16((uint16_t)h) && bits(g) != (h << 16)) bad_up++;
    }
    CHECK(bad_up == 0, "%zu of 65536 fp16/bf16 values do not survive a round trip through fp32", bad_up);
    /* fp16 values by hand: subnormals, the largest half, and their neighbours. */
    CHECK(st_f16_to_f32(0x0001) == 0x1p-24f && st_f16_to_f32(0x03ff) == 1023 * 0x1p-24f, "fp16 subnormals");
    CHECK(st_f16_to_f32(0x7bff) == 65504.0f && st_f16_to_f32(0xfc00) == -INFINITY, "fp16 extremes");
    struct { float f; uint16_t h16, b16; } cases[] = {
        {1.0f + 0x1p-8f, 0x3c04, 0x3f80},          /* bf16 tie -> even (down); exact in fp16 */
        {1.0f + 3 * 0x1p-8f, 0x3c0c, 0x3f82},      /* bf16 tie -> even (up) */
        {1.0f + 0x1p-11f, 0x3c00, 0x3f80},         /* fp16 tie -> even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3c02, 0x3f80},     /* fp16 tie -> even (up) */
        {65504.0f, 0x7bff, 0x4780},
        {65519.99f, 0x7bff, 0x4780},
        {65520.0f, 0x7c00, 0x4780},                /* fp16 overflows by rounding */
        {0x1p-25f, 0x0000, 0x3300},                /* half the smallest fp16 subnormal: tie -> 0 */
        {0x1.000002p-25f, 0x0001, 0x3300},
        {3 * 0x1p-25f, 0x0002, 0x33c0},            /* fp16 subnormal tie -> even (up) */
        {-0.0f, 0x8000, 0x8000},
        {0x1.fffffep127f, 0x7c00, 0x7f80},         /* FLT_MAX: bf16 rounds up to inf */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(st_f32_to_f16(cases[i].f) == cases[i].h16, "fp16(%a) = 0x%04x, want 0x%04x", cases[i].f,
              st_f32_to_f16(cases[i].f), cases[i].h16);
        CHECK(st_f32_to_bf16(cases[i].f) == cases[i].b16, "bf16(%a) = 0x%04x, want 0x%04x", cases[i].f,
              st_f32_to_bf16(cases[i].f), cases[i].b16);
    }
    /* Sampled fp32 bit patterns, plus every low-bit pattern that decides a rounding. */
    size_t n = 0;
    static const uint32_t lows[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff};
    for (uint64_t x = 0; x < (1ull << 32); x += 1999) {
        for (int k = 0; k < 11; k++) {
            uint32_t u = k == 10 ? (uint32_t)x : (((uint32_t)x & ~0xffffu) | lows[k]);
            float f = from_bits(u);
            uint16_t b = st_f32_to_bf16(f);
            if (isnan(f) ? !is_nan_bf16(b) : b != ref_bf16(f)) bad_down++;
#ifdef __FLT16_MANT_DIG__
            _Float16 h = (_Float16)f;
            uint16_t hb;
            memcpy(&hb, &h, 2);
            uint16_t ours = st_f32_to_f16(f);
            if (isnan(f) ? !is_nan16(ours) : ours != hb) bad_down++;
#endif
            n++;
        }
    }
    /* Every fp16 subnormal tie: (2k+1) * 2^-25. */
    for (int k = 0; k < 2048; k++) {
        float f = (float)(2 * k + 1) * 0x1p-25f;
        uint16_t want = (uint16_t)((k & 1) ? k + 1 : k);
        if (st_f32_to_f16(f) != want || st_f32_to_f16(-f) != (0x8000 | want)) bad_down++;
        n += 2;
    }
#ifdef __FLT16_MANT_DIG__
    const char *fp16_ref = "the compiler's _Float16";
#else
    const char *fp16_ref = "(no _Float16 here: fp16 checked by hand cases only)";
#endif
    CHECK(bad_down == 0, "%zu of %zu fp32 -> bf16/fp16 conversions disagree with the references", bad_down, n);
    printf("conversions: 65536 fp16 + 65536 bf16 round trips; %zu fp32 values rounded down, %zu disagree with a "
           "double-precision nearest-even bf16 and %s\n",
           n, bad_down, fp16_ref);
}

/* ---- file layout ---------------------------------------------------------------------- */

static char tmp[64];

static float *det_values(size_t n, uint32_t salt) {
    float *x = dk_malloc((n ? n : 1) * sizeof *x);
    uint64_t s = 0x9e3779b97f4a7c15ull * (salt + 1);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* Wide dynamic range so every exponent path of the conversions is exercised. */
        double u = (double)(s >> 11) * 0x1p-53 - 0.5;
        int e = (int)((s >> 3) % 40) - 30;
        x[i] = (float)ldexp(u, e);
    }
    return x;
}

static void check_header(const char *path, int n_tensors, st_dtype dt) {
    char *buf;
    size_t len;
    OK(dk_read_file(path, &buf, &len));
    uint64_t n;
    memcpy(&n, buf, 8);
    CHECK(n % 8 == 0 && 8 + n <= len, "%s: header length %llu", path, (unsigned long long)n);
    CHECK(buf[8] == '{', "%s: header does not start with '{'", path);
    cJSON *h = cJSON_ParseWithLength(buf + 8, (size_t)n);
    CHECK(h != NULL, "%s: header is not JSON", path);
    if (h) {
        const cJSON *meta = cJSON_GetObjectItem(h, "__metadata__");
        const cJSON *fmt = cJSON_GetObjectItem(meta, "format");
        CHECK(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "pt"), "%s: metadata format", path);
        uint64_t off = 0;
        int count = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, h) {
            if (!strcmp(e->string, "__metadata__")) continue;
            const cJSON *o = cJSON_GetObjectItem(e, "data_offsets");
            CHECK(!strcmp(cJSON_GetObjectItem(e, "dtype")->valuestring, safetensors_dtype_name(dt)), "%s dtype", e->string);
            CHECK((uint64_t)cJSON_GetArrayItem(o, 0)->valuedouble == off, "%s: '%s' does not start where the last ended",
                  path, e->string);
            off = (uint64_t)cJSON_GetArrayItem(o, 1)->valuedouble;
            count++;
        }
        CHECK(count == n_tensors, "%s: %d tensors, wrote %d", path, count, n_tensors);
        CHECK(8 + n + off == len, "%s: data ends at %llu, file is %zu bytes", path, (unsigned long long)(8 + n + off), len);
        cJSON_Delete(h);
    }
    free(buf);
}

static float convert(float x, st_dtype dt) {
    if (dt == ST_BF16) return st_bf16_to_f32(st_f32_to_bf16(x));
    if (dt == ST_F16) return st_f16_to_f32(st_f32_to_f16(x));
    return x;
}

/* Every entry must read back as its dtype rounding of the source, bit for bit. */
static size_t compare_back(const char *path, const st_entry *e, int n, st_dtype dt) {
    st_reader r;
    dk_status s = safetensors_open(&r, path);
    CHECK(s == DK_OK, "%s", dk_error());
    if (s != DK_OK) return 1;
    CHECK(r.n_tensors == n, "%s: %d tensors, wrote %d", path, r.n_tensors, n);
    size_t bad = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        float *out = dk_malloc((numel + 1) * 4);
        s = safetensors_read_f32(&r, e[i].name, e[i].ndim, e[i].shape, out);
        CHECK(s == DK_OK, "%s", dk_error());
        CHECK(safetensors_find(&r, e[i].name)->dtype == dt, "'%s' dtype", e[i].name);
        for (size_t k = 0; s == DK_OK && k < numel; k++) bad += bits(out[k]) != bits(convert(e[i].data[k], dt));
        free(out);
    }
    safetensors_close(&r);
    return bad;
}

static void test_files(void) {
    float *w = det_values(15, 1), *v = det_values(7, 2), sc = 2.5f;
    const st_entry e[] = {
        {"w", 2, {3, 5}, w},
        {"scalar", 0, {0}, &sc},
        {"empty", 2, {0, 4}, NULL},
        {"v.odd", 1, {7}, v},
    };
    char path[256];
    size_t bad = 0;
    for (int d = 0; d < 3; d++) {
        st_dtype dt = (st_dtype)d;
        snprintf(path, sizeof path, "%s/one_%s.safetensors", tmp, safetensors_dtype_name(dt));
        OK(safetensors_write_file(path, e, 4, dt));
        check_header(path, 4, dt);
        bad += compare_back(path, e, 4, dt);
    }
    CHECK(bad == 0, "%zu values read back differently", bad);
    printf("files: F32/F16/BF16 written and read back, %zu bit mismatches\n", bad);

    /* Writer errors name the file and the tensor. */
    const st_entry dup[] = {{"x", 1, {7}, v}, {"x", 1, {7}, v}};
    snprintf(path, sizeof path, "%s/dup.safetensors", tmp);
    dk_status s = safetensors_write_file(path, dup, 2, ST_F32);
    CHECK(s != DK_OK && strstr(dk_error(), "'x'") && strstr(dk_error(), path), "duplicate names: %s", dk_error());
    CHECK(!dk_file_exists(path), "a failed write leaves %s behind", path);
    snprintf(path, sizeof path, "%s/one_F32.safetensors/sub", tmp); /* a file in the way */
    s = safetensors_write_dir(path, e, 4, ST_F32, 0);
    CHECK(s != DK_OK && strstr(dk_error(), "one_F32.safetensors"), "directory under a file: %s", dk_error());
    st_dtype dt;
    s = safetensors_dtype_parse("int8", &dt);
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "'int8'"), "dtype parse: %s", dk_error());
    free(w);
    free(v);
}

/* Tensor i of the shard test: [i + 1, 20] (values i * 1000 + j, exact in every dtype up to 2^11). */
enum { SHARD_N = 12, SHARD_MAX = 1000 };
static void shard_entries(st_entry *e, float **data, char names[][32]) {
    for (int i = 0; i < SHARD_N; i++) {
        int rows = (i == 5) ? 30 : i + 1; /* tensor 5 (2400 bytes as fp32) exceeds the shard limit alone */
        snprintf(names[i], 32, "t.%02d", i);
        data[i] = dk_malloc((size_t)rows * 20 * 4);
        for (int j = 0; j < rows * 20; j++) data[i][j] = (float)(i * 1000 + j) * 0.25f;
        e[i].name = names[i];
        e[i].ndim = 2;
        e[i].shape[0] = rows;
        e[i].shape[1] = 20;
        e[i].data = data[i];
    }
}

static void test_shards(void) {
    st_entry e[SHARD_N];
    float *data[SHARD_N];
    char names[SHARD_N][32], dir[256], path[300];
    memset(e, 0, sizeof e);
    shard_entries(e, data, names);
    snprintf(dir, sizeof dir, "%s/shards", tmp);
    OK(safetensors_write_dir(dir, e, SHARD_N, ST_F32, SHARD_MAX));
    /* Expected split, computed here by the greedy rule the header documents. */
    int expect = 0;
    size_t cur = 0, total = 0;
    for (int i = 0; i < SHARD_N; i++) {
        size_t nb = (size_t)e[i].shape[0] * 20 * 4;
        if (expect == 0 || (cur > 0 && cur + nb > SHARD_MAX)) expect++, cur = 0;
        cur += nb;
        total += nb;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *text;
    OK(dk_read_file(path, &text, NULL));
    cJSON *idx = cJSON_Parse(text);
    free(text);
    const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(idx, "metadata"), "total_size");
    CHECK(cJSON_IsNumber(ts) && (size_t)ts->valuedouble == total, "total_size %g, want %zu", ts ? ts->valuedouble : -1.0, total);
    const cJSON *wm = cJSON_GetObjectItem(idx, "weight_map");
    CHECK(cJSON_GetArraySize(wm) == SHARD_N, "weight_map has %d entries", cJSON_GetArraySize(wm));
    int shards_seen = 0;
    for (int k = 1; k <= expect; k++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k, expect);
        st_reader r;
        dk_status s = safetensors_open(&r, path);
        CHECK(s == DK_OK, "shard %d: %s", k, dk_error());
        if (s != DK_OK) continue;
        shards_seen++;
        size_t bytes = 0;
        for (int i = 0; i < r.n_tensors; i++) bytes += r.tensors[i].nbytes;
        CHECK(bytes <= SHARD_MAX || r.n_tensors == 1, "shard %d holds %zu bytes in %d tensors", k, bytes, r.n_tensors);
        safetensors_close(&r);
    }
    CHECK(shards_seen == expect, "%d of %d shards", shards_seen, expect);
    size_t bad = compare_back(dir, e, SHARD_N, ST_F32);
    CHECK(bad == 0, "%zu values differ after sharding", bad);
    printf("shards: %d tensors (%zu bytes) in %d shards of <= %d bytes, index total_size %.0f, %zu mismatches\n", SHARD_N,
           total, expect, SHARD_MAX, ts ? ts->valuedouble : -1.0, bad);
    cJSON_Delete(idx);
    /* Re-saving as one file removes the old index (loaders prefer it), and back. */
    OK(safetensors_write_dir(dir, e, SHARD_N, ST_BF16, 0));
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(!dk_file_exists(path), "stale index left behind");
    CHECK(compare_back(dir, e, SHARD_N, ST_BF16) == 0, "single file after shards");
    OK(safetensors_write_dir(dir, e, SHARD_N, ST_F16, SHARD_MAX));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(!dk_file_exists(path), "stale model.safetensors left behind");
    CHECK(compare_back(dir, e, SHARD_N, ST_F16) == 0, "shards after single file");
    for (int i = 0; i < SHARD_N; i++) free(data[i]);
}

/* ---- models ----------------------------------------------------------------------------- */

/* The fixture shapes, with bos and eos set for the written configs. */
static model_config tiny_config(dk_arch arch) {
    model_config c = fixture_model_config(arch);
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

static size_t flat_size(const param_layout *pl, int n_layers) {
    return pl->embed_size + (size_t)n_layers * pl->layer_size + pl->final_norm_size + pl->lm_head_size;
}

static void flatten(const param_buffers *b, const param_layout *pl, float *dst) {
    size_t n = 0;
    memcpy(dst + n, b->embed, pl->embed_size * 4), n += pl->embed_size;
    for (int l = 0; l < b->n_layers; l++) memcpy(dst + n, b->layers[l], pl->layer_size * 4), n += pl->layer_size;
    memcpy(dst + n, b->final_norm, pl->final_norm_size * 4), n += pl->final_norm_size;
    if (b->lm_head) memcpy(dst + n, b->lm_head, pl->lm_head_size * 4);
}

/* Random parameters with norms and biases randomised too, so that a misplaced
 * norm or bias shows up as a wrong value. */
static void init_model(const model_config *c, const param_layout *pl, param_buffers *b, uint64_t seed) {
    param_buffers_alloc_host(b, pl, c->n_layers, c->tie_embeddings, 4);
    param_init_random(b, pl, c, seed, 0.5f);
    float *noise = det_values(pl->layer_size, (uint32_t)seed);
    for (int l = 0; l < c->n_layers; l++) {
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            if (t == P_WQ || t == P_WK || t == P_WV || t == P_WO || t == P_W_GATE_UP || t == P_W_DOWN) continue;
            float *x = param_layer_ptr(b, pl, l, (dk_layer_tensor)t);
            for (size_t i = 0; i < pl->size[t]; i++) x[i] += noise[pl->off[t] + i] + 0.01f * (float)l;
        }
    }
    for (size_t i = 0; i < pl->final_norm_size; i++) ((float *)b->final_norm)[i] += noise[i];
    free(noise);
}

static void save_model(const char *dir, dk_arch arch, const char *dtype, size_t max_shard, uint64_t seed, int emit_ref) {
    model_config c = tiny_config(arch);
    param_layout pl;
    param_layout_init(&pl, &c);
    param_buffers b;
    init_model(&c, &pl, &b, seed);
    OK(weights_save_hf(dir, &c, &pl, &b, dtype, max_shard));
    size_t n = flat_size(&pl, c.n_layers);
    float *src = dk_malloc(n * 4);
    flatten(&b, &pl, src);
    char path[300];
    if (emit_ref) {
        snprintf(path, sizeof path, "%s/layout.bin", dir);
        OK(dk_write_file(path, src, n * 4));
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(dk_file_exists(path), "%s not written", path);
    /* Our own loader must give back the dtype-rounded values exactly. */
    st_dtype dt;
    OK(safetensors_dtype_parse(dtype, &dt));
    param_buffers back;
    param_buffers_alloc_host(&back, &pl, c.n_layers, c.tie_embeddings, 4);
    dk_status s = weights_load_hf(dir, &c, &pl, &back);
    CHECK(s == DK_OK, "%s: %s", dir, dk_error());
    float *got = dk_malloc(n * 4);
    flatten(&back, &pl, got);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += bits(got[i]) != bits(convert(src[i], dt));
    CHECK(bad == 0, "%s: %zu of %zu parameters differ after save + load", dir, bad, n);
    if (!emit_ref)
        printf("model %s (%s, shard limit %zu): %zu parameters saved and loaded back, %zu mismatches\n",
               model_arch_name(arch), dtype, max_shard, n, bad);
    free(got);
    free(src);
    param_buffers_free_host(&back);
    param_buffers_free_host(&b);
}

static void test_models(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/m_qwen3", tmp);
    save_model(dir, DK_ARCH_QWEN3, "fp32", 0, 11, 0);
    save_model(dir, DK_ARCH_QWEN3, "bf16", 4096, 12, 0);
    snprintf(dir, sizeof dir, "%s/m_qwen2", tmp);
    save_model(dir, DK_ARCH_QWEN2, "fp16", 0, 13, 0);
    snprintf(dir, sizeof dir, "%s/m_llama", tmp);
    save_model(dir, DK_ARCH_LLAMA, "bfloat16", 10000, 14, 0);
    /* Errors: an unknown dtype is a usage error naming it. */
    model_config c = tiny_config(DK_ARCH_QWEN3);
    param_layout pl;
    param_layout_init(&pl, &c);
    param_buffers b;
    param_buffers_alloc_host(&b, &pl, c.n_layers, 0, 4);
    dk_status s = weights_save_hf(dir, &c, &pl, &b, "int4", 0);
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "'int4'"), "bad dtype: %s", dk_error());
    param_buffers_free_host(&b);
    /* A config its family's config.json cannot express stops the save before any weights are written. */
    c = tiny_config(DK_ARCH_LLAMA);
    c.o_bias = 0;
    param_layout_init(&pl, &c);
    param_buffers_alloc_host(&b, &pl, c.n_layers, 0, 4);
    snprintf(dir, sizeof dir, "%s/m_refused", tmp);
    s = weights_save_hf(dir, &c, &pl, &b, "bf16", 0);
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(s != DK_OK && !dk_file_exists(path), "inexpressible config: status %d, weights written %d", s,
          dk_file_exists(path));
    if (s != DK_OK) printf("refused config -> %s\n", dk_error());
    param_buffers_free_host(&b);
}

/* ---- files for the Python side -------------------------------------------------------------- */

static void emit(const char *out) {
    char dir[512], path[600];
    /* conv/: special values and a wide-range random tensor in each dtype, with their fp32 source. */
    snprintf(dir, sizeof dir, "%s/conv", out);
    OK(dk_mkdirs(dir));
    static const uint32_t special_bits[] = {
        0x00000000, 0x80000000, 0x3f800000, 0x3f808000, 0x3f818000, 0x3f800001, 0x3f807fff, 0x3f800800, 0x3f801800,
        0x3f801000, 0x477fe000, 0x477ff000, 0x477fefff, 0x47800000, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f800000,
        0xff800000, 0x7fc00000, 0x33000000, 0x33000001, 0x33400000, 0x33c00000, 0x387fc000, 0x387fe000, 0x38800000,
        0x00000001, 0x807fffff, 0x00800000, 0x0001ffff, 0x3eaaaaab, 0xbf2aaaab, 0x40490fdb,
    };
    enum { NS = sizeof special_bits / 4, RR = 37, RC = 29 };
    float special[NS];
    for (int i = 0; i < NS; i++) special[i] = from_bits(special_bits[i]);
    float *random = det_values(RR * RC, 99), scalar = -7.125f;
    const st_entry e[] = {
        {"special", 1, {NS}, special},
        {"random", 2, {RR, RC}, random},
        {"scalar", 0, {0}, &scalar},
        {"empty", 2, {0, 5}, NULL},
    };
    for (int d = 0; d < 3; d++) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, safetensors_dtype_name((st_dtype)d));
        OK(safetensors_write_file(path, e, 4, (st_dtype)d));
    }
    snprintf(path, sizeof path, "%s/special.bin", dir);
    OK(dk_write_file(path, special, sizeof special));
    snprintf(path, sizeof path, "%s/random.bin", dir);
    OK(dk_write_file(path, random, RR * RC * 4));
    free(random);
    /* shards/: the shard test set (values i * 1000 + j, scaled by 0.25). */
    st_entry se[SHARD_N];
    float *data[SHARD_N];
    char names[SHARD_N][32];
    memset(se, 0, sizeof se);
    shard_entries(se, data, names);
    snprintf(dir, sizeof dir, "%s/shards", out);
    OK(safetensors_write_dir(dir, se, SHARD_N, ST_F32, SHARD_MAX));
    for (int i = 0; i < SHARD_N; i++) free(data[i]);
    /* model_*: tiny checkpoints for transformers, with our fp32 source layout. */
    snprintf(dir, sizeof dir, "%s/model_qwen3", out);
    save_model(dir, DK_ARCH_QWEN3, "bf16", 0, 21, 1);
    snprintf(dir, sizeof dir, "%s/model_qwen2", out);
    save_model(dir, DK_ARCH_QWEN2, "fp16", 8000, 22, 1);
    snprintf(dir, sizeof dir, "%s/model_llama", out);
    save_model(dir, DK_ARCH_LLAMA, "fp32", 20000, 23, 1);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--emit")) {
        emit(argv[2]);
        return failures ? 1 : 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--emit DIR]\n", argv[0]);
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/dk_test_stw_XXXXXX");
    if (!mkdtemp(tmp)) DK_ABORT("mkdtemp failed");
    test_conversions();
    test_files();
    test_shards();
    test_models();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp);
    if (failures) {
        fprintf(stderr, "test_safetensors_write: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_safetensors_write: all checks passed\n");
    return 0;
}
