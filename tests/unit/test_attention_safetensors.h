/* test_attention_safetensors.h: a small reader of the .safetensors fixtures
 * that tests/make_attention_fixtures.py and tests/make_lmhead_fixtures.py
 * write (PyTorch references for the attention and lm head tests). The format
 * is an 8-byte little-endian header length, a JSON header mapping each name
 * to {dtype, shape, data_offsets}, then the raw data. Header-only because the
 * test build turns every tests/unit/test_*.c into its own program. */
#ifndef DK_TEST_ATTENTION_SAFETENSORS_H
#define DK_TEST_ATTENTION_SAFETENSORS_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    char *path;
    char *bytes; /* whole file */
    size_t len;
    cJSON *header;
    size_t data_start;
} st_file;

static void st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = dk_strdup(path);
    if (dk_read_file(path, &f->bytes, &f->len) != DK_OK) {
        fprintf(stderr, "FAIL: %s\n  (run tests/make_attention_fixtures.py / make_lmhead_fixtures.py)\n",
                dk_error());
        exit(1);
    }
    uint64_t n = 0;
    if (f->len < 8) DK_ABORT("%s: too short for a safetensors file", path);
    for (int i = 7; i >= 0; i--) n = (n << 8) | (unsigned char)f->bytes[i];
    if (8 + n > f->len) DK_ABORT("%s: header length %llu runs past the file", path, (unsigned long long)n);
    f->header = cJSON_ParseWithLength(f->bytes + 8, (size_t)n);
    if (!f->header) DK_ABORT("%s: header is not JSON", path);
    f->data_start = 8 + (size_t)n;
}

static void st_close(st_file *f) {
    cJSON_Delete(f->header);
    free(f->bytes);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* Returns a malloc'd copy of tensor `name` (dtype "F32" or "I32"); its shape
 * goes to shape[0..*ndim-1] (up to 4 dims) when shape is not NULL. Aborts
 * naming the file and tensor when it is missing or of another type. */
static void *st_get(const st_file *f, const char *name, const char *dtype, int *shape, int *ndim, size_t *count) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->header, name);
    if (!t) DK_ABORT("%s: no tensor '%s'", f->path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, dtype) != 0)
        DK_ABORT("%s: tensor '%s' is not %s", f->path, name, dtype);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    int nd = cJSON_GetArraySize(sh);
    if (nd > 4) DK_ABORT("%s: tensor '%s' has %d dims", f->path, name, nd);
    size_t n = 1;
    for (int i = 0; i < nd; i++) {
        int d = cJSON_GetArrayItem(sh, i)->valueint;
        if (shape) shape[i] = d;
        n *= (size_t)d;
    }
    size_t b = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (e - b != n * 4 || f->data_start + e > f->len) DK_ABORT("%s: tensor '%s' has bad data offsets", f->path, name);
    void *out = dk_malloc(n * 4 > 0 ? n * 4 : 4);
    memcpy(out, f->bytes + f->data_start + b, n * 4);
    if (ndim) *ndim = nd;
    if (count) *count = n;
    return out;
}

static float st_scalar(const st_file *f, const char *name) {
    size_t n;
    float *p = st_get(f, name, "F32", NULL, NULL, &n);
    if (n != 1) DK_ABORT("%s: '%s' is not a scalar", f->path, name);
    float v = p[0];
    free(p);
    return v;
}

/* max |a - b| over n floats; NaN counts as infinitely far. */
static double st_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static double st_max_abs(const float *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

#endif
