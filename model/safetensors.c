/* safetensors.c: the safetensors reader (mmap + cJSON header, every entry
 * validated at open) and writer (streamed conversion from fp32, optional
 * sharding with an index), plus the bf16 / fp16 scalar conversions they use. */
#define _POSIX_C_SOURCE 200809L
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

struct st_map {
    char *path;
    void *base;
    size_t size;
};

/* ---- scalar conversions ---------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t st_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* keep NaN quiet, never round it to inf */
    x += 0x7fffu + ((x >> 16) & 1u);  /* round half to even on the dropped 16 bits */
    return (uint16_t)(x >> 16);
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* Subnormal: m * 2^-24 is exact in fp32. */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t st_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf stays inf; NaN keeps its top payload bits and stays quiet */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x0200u | ((ax >> 13) & 0x3ffu) : 0u));
    int e = (int)(ax >> 23);
    if (e >= 143) return (uint16_t)(sign | 0x7c00u); /* >= 2^16: beyond the largest half */
    if (e < 113) {
        /* Below 2^-14: a half subnormal counts units of 2^-24, value = mant * 2^(e-126). */
        if (e < 102) return sign; /* below 2^-25: rounds to zero */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        int shift = 126 - e; /* 14..24 */
        uint32_t q = mant >> shift, r = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (r > half || (r == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t m = ax & 0x7fffffu;
    uint32_t q = ((uint32_t)(e - 112) << 10) | (m >> 13), r = m & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (q & 1u))) q++; /* a carry into the exponent (even to inf) is correct */
    return (uint16_t)(sign | q);
}

/* ---- dtypes ------------------------------------------------------------------- */

const char *safetensors_dtype_name(st_dtype d) {
    switch (d) {
    case ST_F32: return "F32";
    case ST_F16: return "F16";
    case ST_BF16: return "BF16";
    }
    return "?";
}

const char *safetensors_dtype_torch_name(st_dtype d) {
    switch (d) {
    case ST_F32: return "float32";
    case ST_F16: return "float16";
    case ST_BF16: return "bfloat16";
    }
    return "?";
}

size_t safetensors_dtype_size(st_dtype d) { return d == ST_F32 ? 4 : 2; }

dk_status safetensors_dtype_parse(const char *s, st_dtype *out) {
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = ST_BF16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "float16")) *out = ST_F16;
    else if (!strcmp(s, "fp32") || !strcmp(s, "float32")) *out = ST_F32;
    else return dk_fail(DK_ERR_USAGE, "unknown weight dtype '%s' (expected bf16, fp16 or fp32)", s);
    return DK_OK;
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = dk_malloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

/* ---- reader ------------------------------------------------------------------- */

/* JSON numbers are doubles: accept only exact non-negative integers below 2^53. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static dk_status map_file(st_map *m, const char *path) {
    m->path = dk_strdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot stat: %s", path, strerror(errno));
    }
    m->size = (size_t)st.st_size;
    if (m->size < 8) {
        close(fd);
        return dk_fail(DK_ERR_RUNTIME, "%s: truncated file: %zu bytes, shorter than the 8-byte header length", path, m->size);
    }
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return dk_fail(DK_ERR_RUNTIME, "%s: cannot map: %s", path, strerror(errno));
    m->base = p;
    /* Loading reads each tensor once from front to back. */
    posix_madvise(p, m->size, POSIX_MADV_SEQUENTIAL);
    return DK_OK;
}

static dk_status add_tensor(st_reader *r, int *cap, const st_map *m, const char *data, size_t data_len, const cJSON *e) {
    const char *path = m->path, *name = e->string;
    if (!cJSON_IsObject(e)) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': header entry is not an object", path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd)) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': missing or non-string 'dtype'", path, name);
    st_tensor t;
    memset(&t, 0, sizeof t);
    if (!strcmp(jd->valuestring, "F32")) t.dtype = ST_F32;
    else if (!strcmp(jd->valuestring, "F16")) t.dtype = ST_F16;
    else if (!strcmp(jd->valuestring, "BF16")) t.dtype = ST_BF16;
    else
        return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 are supported", path, name,
                       jd->valuestring);
    if (!cJSON_IsArray(js)) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': missing or non-array 'shape'", path, name);
    t.ndim = cJSON_GetArraySize(js);
    if (t.ndim > ST_MAX_DIMS)
        return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, name, t.ndim, ST_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < t.ndim; i++) {
        uint64_t d;
        if (!json_u64(cJSON_GetArrayItem(js, i), &d))
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': shape entry %d is not a non-negative integer", path, name, i);
        if (d != 0 && numel > (UINT64_MAX / 8) / d)
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': shape is too large", path, name);
        numel *= d;
        t.shape[i] = (int64_t)d;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_u64(cJSON_GetArrayItem(jo, 0), &b) ||
        !json_u64(cJSON_GetArrayItem(jo, 1), &en) || b > en)
        return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': 'data_offsets' must be [begin, end] with 0 <= begin <= end", path,
                       name);
    if (en > data_len)
        return dk_fail(DK_ERR_RUNTIME,
                       "%s: truncated file: tensor '%s' data [%llu, %llu) goes beyond the %zu data bytes in the file", path,
                       name, (unsigned long long)b, (unsigned long long)en, data_len);
    size_t need = (size_t)numel * safetensors_dtype_size(t.dtype);
    if (en - b != need) {
        char sh[256];
        fmt_shape(sh, sizeof sh, t.ndim, t.shape);
        return dk_fail(DK_ERR_RUNTIME,
                       "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes but shape %s of %s needs %zu", path, name,
                       (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b), sh,
                       safetensors_dtype_name(t.dtype), need);
    }
    t.numel = (size_t)numel;
    t.nbytes = need;
    t.data = data + b;
    t.file = m->path;
    t.name = dk_strdup(name);
    if (r->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        r->tensors = dk_realloc(r->tensors, (size_t)*cap * sizeof *r->tensors);
    }
    r->tensors[r->n_tensors++] = t;
    return DK_OK;
}

/* Maps PATH as map number r->n_maps and appends its tensors. */
static dk_status open_one(st_reader *r, int *cap, const char *path) {
    r->maps = dk_realloc(r->maps, (size_t)(r->n_maps + 1) * sizeof *r->maps);
    st_map *m = &r->maps[r->n_maps++];
    memset(m, 0, sizeof *m);
    DK_TRY(map_file(m, path));
    uint64_t n;
    memcpy(&n, m->base, 8); /* little-endian, as every host we build for */
    if (n > m->size - 8)
        return dk_fail(DK_ERR_RUNTIME, "%s: truncated file: header length %llu goes beyond the file size (%zu bytes)", path,
                       (unsigned long long)n, m->size);
    const char *hdr = (const char *)m->base + 8, *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!h) {
        size_t at = end ? (size_t)(end - hdr) : 0;
        return dk_fail(DK_ERR_RUNTIME, "%s: bad header JSON near byte %zu of the %llu-byte header", path, at,
                       (unsigned long long)n);
    }
    /* The format pads the header with spaces; anything else after the object is corruption. */
    for (const char *p = end; p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(h);
            return dk_fail(DK_ERR_RUNTIME, "%s: bad header JSON: unexpected bytes after the object at header byte %zu",
                           path, (size_t)(p - hdr));
        }
    }
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return dk_fail(DK_ERR_RUNTIME, "%s: bad header JSON: not an object", path);
    }
    const char *data = hdr + n;
    size_t data_len = m->size - 8 - (size_t)n;
    dk_status s = DK_OK;
    for (const cJSON *e = h->child; e && s == DK_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        s = add_tensor(r, cap, m, data, data_len, e);
    }
    cJSON_Delete(h);
    return s;
}

static int is_plain_name(const char *s) { return s[0] && s[0] != '/' && !strstr(s, ".."); }

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static const st_tensor *find_tensor(const st_reader *r, const char *name) {
    if (r->n_tensors == 0) return NULL;
    st_tensor key;
    key.name = name;
    return bsearch(&key, r->tensors, (size_t)r->n_tensors, sizeof *r->tensors, cmp_tensor);
}

static dk_status sort_tensors(st_reader *r) {
    if (r->n_tensors > 1) qsort(r->tensors, (size_t)r->n_tensors, sizeof *r->tensors, cmp_tensor);
    for (int i = 1; i < r->n_tensors; i++)
        if (!strcmp(r->tensors[i - 1].name, r->tensors[i].name))
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' appears twice (in %s and %s)", r->source, r->tensors[i].name,
                           r->tensors[i - 1].file, r->tensors[i].file);
    return DK_OK;
}

/* Maps each distinct shard the index names once, in order of first mention. */
static dk_status open_shards(st_reader *r, int *cap, const char *dir, const cJSON *wm, const char *index_path) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !is_plain_name(e->valuestring))
            return dk_fail(DK_ERR_RUNTIME, "%s: weight_map entry for tensor '%s' is not a file name in this directory",
                           index_path, e->string);
        int seen = 0;
        for (const cJSON *p = wm->child; p != e && !seen; p = p->next) seen = !strcmp(p->valuestring, e->valuestring);
        if (seen) continue;
        char *path = path_join(dir, e->valuestring);
        dk_status s = open_one(r, cap, path);
        free(path);
        DK_TRY(s);
    }
    return DK_OK;
}

/* Each tensor the index names must be in the shard it names. */
static dk_status check_weight_map(const st_reader *r, const char *dir, const cJSON *wm, const char *index_path) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        const st_tensor *t = find_tensor(r, e->string);
        const char *f = t ? strrchr(t->file, '/') : NULL;
        if (!t || strcmp(f ? f + 1 : t->file, e->valuestring))
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' is listed in weight_map but missing from %s/%s", index_path,
                           e->string, dir, e->valuestring);
    }
    return DK_OK;
}

static dk_status open_index(st_reader *r, int *cap, const char *dir) {
    char *text;
    size_t len;
    DK_TRY(dk_read_file(r->source, &text, &len));
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) return dk_fail(DK_ERR_RUNTIME, "%s: bad JSON", r->source);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    dk_status s = DK_OK;
    if (!cJSON_IsObject(wm)) s = dk_fail(DK_ERR_RUNTIME, "%s: missing or non-object 'weight_map'", r->source);
    if (s == DK_OK) s = open_shards(r, cap, dir, wm, r->source);
    if (s == DK_OK) s = sort_tensors(r);
    if (s == DK_OK) s = check_weight_map(r, dir, wm, r->source);
    cJSON_Delete(j);
    return s;
}

static dk_status open_any(st_reader *r, const char *path) {
    int cap = 0;
    if (!dk_dir_exists(path)) {
        r->source = dk_strdup(path);
        DK_TRY(open_one(r, &cap, path));
        return sort_tensors(r);
    }
    char *index = path_join(path, "model.safetensors.index.json");
    char *single = path_join(path, "model.safetensors");
    dk_status s;
    if (dk_file_exists(index)) {
        r->source = index;
        s = open_index(r, &cap, path);
        free(single);
    } else if (dk_file_exists(single)) {
        r->source = single;
        s = open_one(r, &cap, single);
        if (s == DK_OK) s = sort_tensors(r);
        free(index);
    } else {
        s = dk_fail(DK_ERR_RUNTIME, "%s: no model.safetensors or model.safetensors.index.json in this directory", path);
        free(index);
        free(single);
    }
    return s;
}

dk_status safetensors_open(st_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    dk_status s = open_any(r, path);
    if (s != DK_OK) safetensors_close(r);
    return s;
}

void safetensors_close(st_reader *r) {
    for (int i = 0; i < r->n_tensors; i++) free((char *)r->tensors[i].name);
    for (int i = 0; i < r->n_maps; i++) {
        if (r->maps[i].base) munmap(r->maps[i].base, r->maps[i].size);
        free(r->maps[i].path);
    }
    free(r->tensors);
    free(r->maps);
    free(r->source);
    memset(r, 0, sizeof *r);
}

const st_tensor *safetensors_find(const st_reader *r, const char *name) { return find_tensor(r, name); }

void safetensors_tensor_to_f32_range(const st_tensor *t, size_t first, size_t count, float *out) {
    DK_ASSERT(first <= t->numel && count <= t->numel - first);
    const unsigned char *p = (const unsigned char *)t->data + first * safetensors_dtype_size(t->dtype);
    if (t->dtype == ST_F32) {
        if (count) memcpy(out, p, count * 4);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2); /* the map gives no alignment promise */
        out[i] = t->dtype == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
    }
}

void safetensors_tensor_to_f32(const st_tensor *t, float *out) { safetensors_tensor_to_f32_range(t, 0, t->numel, out); }

dk_status safetensors_check(const st_reader *r, const char *name, int ndim, const int64_t *shape, const st_tensor **out) {
    const st_tensor *t = safetensors_find(r, name);
    if (!t) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' not found", r->source, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[256], got[256];
        fmt_shape(want, sizeof want, ndim, shape);
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s': expected shape %s, got %s", t->file, name, want, got);
    }
    *out = t;
    return DK_OK;
}

dk_status safetensors_read_f32(const st_reader *r, const char *name, int ndim, const int64_t *shape, float *out) {
    const st_tensor *t;
    DK_TRY(safetensors_check(r, name, ndim, shape, &t));
    safetensors_tensor_to_f32(t, out);
    return DK_OK;
}

/* ---- writer ------------------------------------------------------------------- */

static size_t entry_numel(const st_entry *e) {
    size_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= (size_t)e->shape[i];
    return n;
}

/* NEED_DATA: 0 when only the layout is planned (data pointers may be NULL). */
static dk_status check_entries(const char *path, const st_entry *t, int n, int need_data) {
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0]) return dk_fail(DK_ERR_RUNTIME, "%s: tensor %d has an empty name", path, i);
        if (!strcmp(t[i].name, "__metadata__"))
            return dk_fail(DK_ERR_RUNTIME, "%s: '__metadata__' is reserved and cannot name a tensor", path);
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS)
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' has %d dimensions", path, t[i].name, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' has a negative dimension", path, t[i].name);
        if (need_data && !t[i].data && entry_numel(&t[i]) > 0)
            return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' has no data", path, t[i].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name)) return dk_fail(DK_ERR_RUNTIME, "%s: tensor '%s' given twice", path, t[i].name);
    }
    return DK_OK;
}

static char *build_header(const st_entry *t, int n, st_dtype dtype, size_t *len) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0, es = safetensors_dtype_size(dtype);
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", safetensors_dtype_name(dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        size_t nb = entry_numel(&t[i]) * es;
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!s) DK_ABORT("out of host memory printing a safetensors header");
    /* Pad with spaces so the data (and with it every tensor) starts 8-byte aligned. */
    size_t l = strlen(s), padded = (l + 7) / 8 * 8;
    char *out = dk_malloc(padded + 1);
    memcpy(out, s, l);
    memset(out + l, ' ', padded - l);
    out[padded] = '\0';
    cJSON_free(s);
    *len = padded;
    return out;
}

void safetensors_convert_f32(const float *src, size_t n, st_dtype dtype, void *dst) {
    if (dtype == ST_F32) {
        if (n) memcpy(dst, src, n * 4);
        return;
    }
    uint16_t *out = dst;
    if (dtype == ST_BF16)
        for (size_t j = 0; j < n; j++) out[j] = st_f32_to_bf16(src[j]);
    else
        for (size_t j = 0; j < n; j++) out[j] = st_f32_to_f16(src[j]);
}

static dk_status write_tensors(FILE *f, const char *path, const st_entry *t, int n, st_dtype dtype) {
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = dtype == ST_F32 ? NULL : dk_malloc(CHUNK * sizeof *buf);
    dk_status s = DK_OK;
    for (int i = 0; i < n && s == DK_OK; i++) {
        size_t numel = entry_numel(&t[i]);
        if (dtype == ST_F32) {
            if (numel && fwrite(t[i].data, 4, numel, f) != numel)
                s = dk_fail(DK_ERR_RUNTIME, "%s: write failed at tensor '%s': %s", path, t[i].name, strerror(errno));
            continue;
        }
        for (size_t k = 0; k < numel && s == DK_OK; k += CHUNK) {
            size_t m = numel - k < CHUNK ? numel - k : CHUNK;
            safetensors_convert_f32(t[i].data + k, m, dtype, buf);
            if (fwrite(buf, 2, m, f) != m)
                s = dk_fail(DK_ERR_RUNTIME, "%s: write failed at tensor '%s': %s", path, t[i].name, strerror(errno));
        }
    }
    free(buf);
    return s;
}

dk_status safetensors_write_file(const char *path, const st_entry *t, int n, st_dtype dtype) {
    DK_TRY(check_entries(path, t, n, 1));
    size_t hlen;
    char *hdr = build_header(t, n, dtype, &hlen);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hdr);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    }
    uint64_t n64 = (uint64_t)hlen;
    dk_status s = DK_OK;
    if (fwrite(&n64, 8, 1, f) != 1 || fwrite(hdr, 1, hlen, f) != hlen)
        s = dk_fail(DK_ERR_RUNTIME, "%s: write failed in the header: %s", path, strerror(errno));
    free(hdr);
    if (s == DK_OK) s = write_tensors(f, path, t, n, dtype);
    if (fclose(f) != 0 && s == DK_OK) s = dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno));
    /* A half-written file would only turn into a confusing error at the next load. */
    if (s != DK_OK) unlink(path);
    return s;
}

/* ---- layout: where every byte goes, before any is written ----------------------- */

dk_status safetensors_layout_plan(st_layout *l, const st_entry *t, int n, st_dtype dtype, size_t max_shard_bytes) {
    memset(l, 0, sizeof *l);
    DK_TRY(check_entries("safetensors layout", t, n, 0));
    l->dtype = dtype;
    l->n_entries = n;
    l->first = dk_malloc((size_t)(n + 1) * sizeof *l->first);
    l->file_of = dk_malloc((size_t)(n ? n : 1) * sizeof *l->file_of);
    l->offset = dk_malloc((size_t)(n ? n : 1) * sizeof *l->offset);
    size_t es = safetensors_dtype_size(dtype), cur = 0;
    /* Greedy in order: a file takes entries until the next would pass the limit
     * (a tensor larger than the limit gets a file of its own). */
    for (int i = 0; i < n; i++) {
        size_t nb = entry_numel(&t[i]) * es;
        if (l->n_files == 0 || (max_shard_bytes > 0 && cur > 0 && cur + nb > max_shard_bytes)) {
            l->first[l->n_files++] = i;
            cur = 0;
        }
        cur += nb;
        l->total_bytes += nb;
    }
    if (l->n_files == 0) l->first[l->n_files++] = 0; /* no tensors: one empty file */
    l->first[l->n_files] = n;
    l->header = dk_calloc((size_t)l->n_files, sizeof *l->header);
    l->header_len = dk_calloc((size_t)l->n_files, sizeof *l->header_len);
    l->file_size = dk_calloc((size_t)l->n_files, sizeof *l->file_size);
    for (int k = 0; k < l->n_files; k++) {
        int a = l->first[k], b = l->first[k + 1];
        l->header[k] = build_header(t + a, b - a, dtype, &l->header_len[k]);
        size_t pos = 8 + l->header_len[k];
        for (int i = a; i < b; i++) {
            l->file_of[i] = k;
            l->offset[i] = pos;
            pos += entry_numel(&t[i]) * es;
        }
        l->file_size[k] = pos;
    }
    return DK_OK;
}

void safetensors_layout_free(st_layout *l) {
    for (int k = 0; k < l->n_files && l->header; k++) free(l->header[k]);
    free(l->header);
    free(l->header_len);
    free(l->file_size);
    free(l->first);
    free(l->file_of);
    free(l->offset);
    memset(l, 0, sizeof *l);
}

void safetensors_layout_file_name(const st_layout *l, int k, char *buf, size_t cap) {
    if (l->n_files <= 1) snprintf(buf, cap, "model.safetensors");
    else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", k + 1, l->n_files);
}

static dk_status remove_stale(const char *dir, const char *name) {
    char *p = path_join(dir, name);
    dk_status s = DK_OK;
    if (unlink(p) != 0 && errno != ENOENT) s = dk_fail(DK_ERR_RUNTIME, "%s: cannot remove stale file: %s", p, strerror(errno));
    free(p);
    return s;
}

/* DIR/model.safetensors.index.json for a layout of several files. */
static dk_status write_index(const st_layout *l, const st_entry *t, const char *dir) {
    cJSON *idx = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(idx, "metadata");
    cJSON_AddItemToObject(meta, "total_size", cJSON_CreateNumber((double)l->total_bytes));
    cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
    for (int i = 0; i < l->n_entries; i++) {
        char name[64];
        safetensors_layout_file_name(l, l->file_of[i], name, sizeof name);
        cJSON_AddStringToObject(wm, t[i].name, name);
    }
    char *text = cJSON_Print(idx);
    char *p = path_join(dir, "model.safetensors.index.json");
    dk_status s = dk_write_file(p, text, strlen(text));
    free(p);
    cJSON_free(text);
    cJSON_Delete(idx);
    return s;
}

/* The index of a sharded set, or the removal of a stale one beside a single file. */
static dk_status finish_dir(const st_layout *l, const st_entry *t, const char *dir) {
    if (l->n_files <= 1) return remove_stale(dir, "model.safetensors.index.json");
    DK_TRY(write_index(l, t, dir));
    return remove_stale(dir, "model.safetensors");
}

dk_status safetensors_layout_create(const st_layout *l, const st_entry *t, const char *dir) {
    DK_TRY(dk_mkdirs(dir));
    for (int k = 0; k < l->n_files; k++) {
        char name[64];
        safetensors_layout_file_name(l, k, name, sizeof name);
        char *p = path_join(dir, name);
        dk_status s = DK_OK;
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) s = dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", p, strerror(errno));
        uint64_t n64 = (uint64_t)l->header_len[k];
        if (s == DK_OK && (pwrite(fd, &n64, 8, 0) != 8 ||
                           pwrite(fd, l->header[k], l->header_len[k], 8) != (ssize_t)l->header_len[k]))
            s = dk_fail(DK_ERR_RUNTIME, "%s: write failed in the header: %s", p, strerror(errno));
        /* The data region reads as zeros until the ranks fill it. */
        if (s == DK_OK && ftruncate(fd, (off_t)l->file_size[k]) != 0)
            s = dk_fail(DK_ERR_RUNTIME, "%s: cannot size to %zu bytes: %s", p, l->file_size[k], strerror(errno));
        if (fd >= 0 && close(fd) != 0 && s == DK_OK) s = dk_fail(DK_ERR_RUNTIME, "%s: close failed: %s", p, strerror(errno));
        free(p);
        DK_TRY(s);
    }
    return finish_dir(l, t, dir);
}

dk_status safetensors_write_dir(const char *dir, const st_entry *t, int n, st_dtype dtype, size_t max_shard_bytes) {
    DK_TRY(dk_mkdirs(dir));
    DK_TRY(check_entries(dir, t, n, 1));
    st_layout l;
    DK_TRY(safetensors_layout_plan(&l, t, n, dtype, max_shard_bytes));
    dk_status s = DK_OK;
    for (int k = 0; k < l.n_files && s == DK_OK; k++) {
        char name[64];
        safetensors_layout_file_name(&l, k, name, sizeof name);
        char *p = path_join(dir, name);
        s = safetensors_write_file(p, t + l.first[k], l.first[k + 1] - l.first[k], dtype);
        free(p);
    }
    if (s == DK_OK) s = finish_dir(&l, t, dir);
    safetensors_layout_free(&l);
    return s;
}
