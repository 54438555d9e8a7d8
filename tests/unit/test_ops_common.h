/* test_ops_common.h: what the op tests share: reading the PyTorch fixtures
 * written by tests/make_ops_fixtures.py, a seeded generator for inputs, error
 * measures, and a finite-difference gradient checker. Header-only (static
 * functions) because every test_*.c is its own program. */
#ifndef DK_TEST_OPS_COMMON_H
#define DK_TEST_OPS_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops.h"

static int test_failures;

/* Records a failure and carries on, so one run reports every broken check. */
#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            test_failures++;                                                  \
        }                                                                     \
    } while (0)

static inline int test_finish(const char *name) {
    if (test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

/* ---- fixtures ------------------------------------------------------------- */

typedef struct {
    char name[64];
    size_t n;
    float *v;
} fx_tensor;

typedef struct {
    char path[1024];
    fx_tensor *t;
    int count;
} fixture;

/* Loads tests/fixtures/ops/<name>.txt from DK_SOURCE (or the current
 * directory, the repository root under ctest). A missing or malformed file
 * ends the test with exit code 1 and names the file and the line. */
static inline fixture fx_load(const char *name) {
    fixture f = {0};
    const char *root = getenv("DK_SOURCE");
    snprintf(f.path, sizeof f.path, "%s%stests/fixtures/ops/%s.txt", root ? root : "", root ? "/" : "", name);
    char *text;
    size_t len;
    if (dk_read_file(f.path, &text, &len) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
    int cap = 0, line = 1;
    char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') line += *p++ == '\n';
        if (!*p) break;
        if (*p == '#') {
            while (*p && *p != '\n') p++;
            continue;
        }
        if (f.count == cap) {
            cap = cap ? 2 * cap : 16;
            f.t = dk_realloc(f.t, (size_t)cap * sizeof *f.t);
        }
        fx_tensor *t = &f.t[f.count++];
        int used = 0;
        unsigned long n = 0;
        if (sscanf(p, "%63s %lu%n", t->name, &n, &used) != 2) {
            fprintf(stderr, "%s:%d: expected 'name count'\n", f.path, line);
            exit(1);
        }
        p += used;
        t->n = n;
        t->v = dk_malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            char *end;
            double d = strtod(p, &end);
            if (end == p) {
                fprintf(stderr, "%s:%d: tensor '%s' has fewer than %lu values\n", f.path, line, t->name, n);
                exit(1);
            }
            for (char *q = p; q < end; q++) line += *q == '\n';
            t->v[i] = (float)d;
            p = end;
        }
    }
    free(text);
    return f;
}

/* The tensor `key`; n > 0 also checks its length. Absence is fatal. */
static inline const float *fx_get(const fixture *f, const char *key, size_t n) {
    for (int i = 0; i < f->count; i++) {
        if (strcmp(f->t[i].name, key) != 0) continue;
        if (n && f->t[i].n != n) {
            fprintf(stderr, "%s: tensor '%s' has %zu values, expected %zu\n", f->path, key, f->t[i].n, n);
            exit(1);
        }
        return f->t[i].v;
    }
    fprintf(stderr, "%s: no tensor '%s'\n", f->path, key);
    exit(1);
}

static inline int fx_has(const fixture *f, const char *key) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, key) == 0) return 1;
    return 0;
}

/* A float copy of a fixture tensor the op may write to. */
static inline float *fx_copy(const fixture *f, const char *key, size_t n) {
    float *d = dk_malloc(n * sizeof(float));
    memcpy(d, fx_get(f, key, n), n * sizeof(float));
    return d;
}

static inline int32_t *fx_ints(const fixture *f, const char *key, size_t n) {
    const float *s = fx_get(f, key, n);
    int32_t *d = dk_malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) d[i] = (int32_t)s[i];
    return d;
}

static inline void fx_free(fixture *f) {
    for (int i = 0; i < f->count; i++) free(f->t[i].v);
    free(f->t);
    f->t = NULL;
    f->count = 0;
}

/* ---- random inputs ----------------------------------------------------------- */

static uint64_t test_rng = 0x9e3779b97f4a7c15ull;

static inline void rng_seed(uint64_t s) { test_rng = s * 0x9e3779b97f4a7c15ull + 1; }

static inline uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (test_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double rng_uniform(void) { return (rng_next() >> 11) * (1.0 / 9007199254740992.0); }

static inline float rng_normal(void) {
    double u1 = rng_uniform(), u2 = rng_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static inline float *rand_normal(size_t n, float scale, float offset) {
    float *x = dk_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal() * scale + offset;
    return x;
}

/* ---- error measures ------------------------------------------------------------ */

static inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as the maximum */
    }
    return m;
}

static inline double max_abs(const float *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}

/* max |a - ref| relative to the reference's largest magnitude: one number per
 * tensor that is not blown up by elements that happen to be near zero. */
static inline double rel_err(const float *a, const float *ref, size_t n) {
    double s = max_abs(ref, n);
    return max_abs_diff(a, ref, n) / (s > 0.0 ? s : 1.0);
}

/* ---- finite differences ---------------------------------------------------------- */

/* Runs the forward with the current inputs and returns the scalar
 * L = sum_i r_i * out_i, summed in double. */
typedef double (*fd_loss_fn)(void *state);

/* Central differences of L with respect to every element of x (which the
 * loss function reads), against the analytic gradient `an`. The step is
 * taken as the fp32 values actually stored, so rounding of x + h does not
 * bias the quotient. Returns max |fd - an| / max |an|. */
static inline double fd_check(float *x, size_t n, const float *an, fd_loss_fn loss, void *state, float h) {
    double err = 0.0;
    for (size_t j = 0; j < n; j++) {
        float x0 = x[j];
        float xp = x0 + h, xm = x0 - h;
        x[j] = xp;
        double lp = loss(state);
        x[j] = xm;
        double lm = loss(state);
        x[j] = x0;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        double d = fabs(fd - an[j]);
        if (!(d <= err)) err = d;
    }
    double s = max_abs(an, n);
    return err / (s > 0.0 ? s : 1.0);
}

static inline double dot_f64(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

#endif
