/* test_cuda_common.h: what the CUDA op tests share. Each test runs an op on
 * the CUDA backend and on the CPU backend (the fp32 reference) with the same
 * inputs: inputs are drawn on the host, rounded to bf16 first (the CUDA act
 * type), so both backends see exactly the same values, and the outputs are
 * compared with a tolerance that each test states. Header-only, like
 * tests/unit/test_ops_common.h (whose CHECK, generator and error measures it
 * reuses), because every test_*.c is its own program.
 *
 * A test exits 77 (skipped) where no CUDA GPU is visible or the build has no
 * CUDA op table. */
#ifndef DK_TEST_CUDA_COMMON_H
#define DK_TEST_CUDA_COMMON_H

#include "kernels/device.h"
#include "tests/unit/test_ops_common.h"

typedef struct {
    ops_ctx cpu, gpu;
} ctx_pair;

static inline void pair_init(ctx_pair *p, size_t cpu_scratch) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("no CUDA GPU or no CUDA op table in this build: skipped\n");
        exit(77);
    }
    if (ops_ctx_init(&p->cpu, DK_DEVICE_CPU, 0, cpu_scratch) != DK_OK ||
        ops_ctx_init(&p->gpu, DK_DEVICE_CUDA, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        exit(1);
    }
    char desc[256];
    if (device_describe(0, desc, sizeof desc) == 0) printf("device: %s\n", desc);
}

static inline void pair_free(ctx_pair *p) {
    ops_ctx_free(&p->gpu);
    ops_ctx_free(&p->cpu);
}

/* fp32 -> nearest bf16 (ties to even), returned as fp32: what the device
 * stores for an act value. */
static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

static inline void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

/* Random normal values already rounded to bf16. */
static inline float *rand_bf16(size_t n, float scale, float offset) {
    float *x = rand_normal(n, scale, offset);
    round_bf16(x, n);
    return x;
}

/* Device buffers. `shift` elements of slack at the front let a test hand the
 * op a pointer that is not 16-byte aligned (shift = 1), to reach the scalar
 * paths; the returned pointer is the shifted one, base the allocation. */
typedef struct {
    void *base;
    void *p;
} dev_buf;

static inline dev_buf dev_act(ops_ctx *g, const float *host, size_t n, int shift) {
    dev_buf b;
    b.base = ops_alloc(g, (n + 8) * ops_act_size(g));
    b.p = (char *)b.base + (size_t)shift * ops_act_size(g);
    if (host && n) ops_upload_act(g, b.p, host, n);
    return b;
}

static inline dev_buf dev_f32(ops_ctx *g, const float *host, size_t n, int shift) {
    dev_buf b;
    b.base = ops_alloc(g, (n + 8) * sizeof(float));
    b.p = (char *)b.base + (size_t)shift * sizeof(float);
    if (host && n) ops_upload(g, b.p, host, n * sizeof(float));
    ops_sync(g);
    return b;
}

static inline dev_buf dev_i32(ops_ctx *g, const int32_t *host, size_t n) {
    dev_buf b;
    b.base = b.p = ops_alloc(g, (n + 1) * sizeof(int32_t));
    if (n) ops_upload(g, b.p, host, n * sizeof(int32_t));
    ops_sync(g);
    return b;
}

static inline void dev_free(ops_ctx *g, dev_buf *b) {
    ops_free(g, b->base);
    b->base = b->p = NULL;
}

static inline float *get_act(ops_ctx *g, const void *d, size_t n) {
    float *h = dk_malloc((n ? n : 1) * sizeof(float));
    ops_download_act(g, h, d, n);
    return h;
}

static inline float *get_f32(ops_ctx *g, const void *d, size_t n) {
    float *h = dk_malloc((n ? n : 1) * sizeof(float));
    ops_download(g, h, d, n * sizeof(float));
    return h;
}

static inline float *copy_f32(const float *x, size_t n) {
    float *y = dk_malloc((n ? n : 1) * sizeof(float));
    if (n) memcpy(y, x, n * sizeof(float));
    return y;
}

/* Worst |a - ref| / (atol + rtol * |ref|) over the elements: <= 1 passes.
 * NaN in either counts as infinitely bad. */
static inline double tol_ratio(const float *a, const float *ref, size_t n, double atol, double rtol) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]), lim = atol + rtol * fabs((double)ref[i]);
        double q = d / lim;
        if (!(q <= worst)) worst = isnan(q) ? INFINITY : q;
    }
    return worst;
}

static inline int bits_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* One bf16 unit in the last place, relative: values stored in bf16 are
 * within half of it of the exact result. */
#define BF16_ULP (1.0 / 128.0)

#endif
