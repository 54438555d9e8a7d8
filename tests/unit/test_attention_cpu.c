/* test_attention_cpu.c: the CPU attention op (ops_attention_forward /
 * _backward) against PyTorch and against finite differences.
 *
 * 1. Fixtures from tests/make_attention_fixtures.py: packed varlen batches
 *    (lengths 1..70, one crossing the op's 64-row query block, one with
 *    padding tokens), D = 16 and 64, Hq / Hkv = 1, 2, 4; out, lse and the
 *    gradients of sum(out * dout) come from float64 torch SDPA + autograd.
 *    Outputs are pre-filled with NaN so anything the op fails to write shows.
 *    The scratch is exactly the documented requirement (2 x min(64, L) x L
 *    floats, L the longest sequence), and the backward must be bitwise
 *    repeatable.
 * 2. Central finite differences of a random linear loss on a tiny case.
 * 3. Too little scratch must abort with a message that says how much. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "tests/expect_abort.h"
#include "test_attention_safetensors.h"

static int failures;

static void check(const char *what, double diff, double tol) {
    int ok = diff <= tol;
    printf("  %-26s max|diff| %.3e  tol %.1e  %s\n", what, diff, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* The CPU op's scratch need: two [min(64, L), L] float strips. */
static size_t attn_scratch_bytes(const int32_t *cu, int n_seqs) {
    size_t L = 0;
    for (int s = 0; s < n_seqs; s++)
        if ((size_t)(cu[s + 1] - cu[s]) > L) L = (size_t)(cu[s + 1] - cu[s]);
    size_t rows = L < 64 ? L : 64;
    return 2 * rows * L * sizeof(float);
}

static float *nan_filled(size_t n) {
    float *p = dk_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static void test_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/attention/%s.safetensors", name);
    st_file f;
    st_open(&f, path);
    int qs[4], ks[4], nd;
    size_t nq, nk, ncu;
    float *q = st_get(&f, "q", "F32", qs, &nd, &nq);
    float *k = st_get(&f, "k", "F32", ks, &nd, &nk);
    float *v = st_get(&f, "v", "F32", NULL, NULL, NULL);
    float *dout = st_get(&f, "dout", "F32", NULL, NULL, NULL);
    int32_t *cu = st_get(&f, "cu_seqlens", "I32", NULL, NULL, &ncu);
    float *out_ref = st_get(&f, "out", "F32", NULL, NULL, NULL);
    float *lse_ref = st_get(&f, "lse", "F32", NULL, NULL, NULL);
    float *dq_ref = st_get(&f, "dq", "F32", NULL, NULL, NULL);
    float *dk_ref = st_get(&f, "dk", "F32", NULL, NULL, NULL);
    float *dv_ref = st_get(&f, "dv", "F32", NULL, NULL, NULL);
    float scale = st_scalar(&f, "scale");
    int T = qs[0], Hq = qs[1], D = qs[2], Hkv = ks[1], n_seqs = (int)ncu - 1;
    printf("%s: T=%d n_seqs=%d Hq=%d Hkv=%d D=%d scale=%.4f\n", name, T, n_seqs, Hq, Hkv, D, scale);

    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, attn_scratch_bytes(cu, n_seqs)) != DK_OK) DK_ABORT("%s", dk_error());
    float *out = nan_filled(nq), *lse = nan_filled((size_t)Hq * T);
    ops_attention_forward(&ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, D, scale);
    check("out", st_max_abs_diff(out, out_ref, nq), 1e-5 * fmax(1.0, st_max_abs(out_ref, nq)));
    check("lse", st_max_abs_diff(lse, lse_ref, (size_t)Hq * T), 1e-5 * fmax(1.0, st_max_abs(lse_ref, (size_t)Hq * T)));

    float *dq = nan_filled(nq), *dk = nan_filled(nk), *dv = nan_filled(nk);
    ops_attention_backward(&ctx, dq, dk, dv, dout, q, k, v, out, lse, cu, n_seqs, T, Hq, Hkv, D, scale);
    check("dq", st_max_abs_diff(dq, dq_ref, nq), 1e-5 * fmax(1.0, st_max_abs(dq_ref, nq)));
    check("dk", st_max_abs_diff(dk, dk_ref, nk), 1e-5 * fmax(1.0, st_max_abs(dk_ref, nk)));
    check("dv", st_max_abs_diff(dv, dv_ref, nk), 1e-5 * fmax(1.0, st_max_abs(dv_ref, nk)));

    float *dq2 = nan_filled(nq), *dk2 = nan_filled(nk), *dv2 = nan_filled(nk);
    ops_attention_backward(&ctx, dq2, dk2, dv2, dout, q, k, v, out, lse, cu, n_seqs, T, Hq, Hkv, D, scale);
    int same = !memcmp(dq, dq2, nq * 4) && !memcmp(dk, dk2, nk * 4) && !memcmp(dv, dv2, nk * 4);
    printf("  %-26s %s\n", "backward repeatable", same ? "ok" : "FAIL");
    if (!same) failures++;

    ops_ctx_free(&ctx);
    void *bufs[] = {q, k, v, dout, cu, out_ref, lse_ref, dq_ref, dk_ref, dv_ref, out, lse, dq, dk, dv, dq2, dk2, dv2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    st_close(&f);
}

/* Uniform in [-1, 1) from a fixed xorshift stream, so the case is the same
 * on every machine. */
static float rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* loss = sum(out * w), accumulated in double. */
static double fd_loss(ops_ctx *ctx, float *out, float *lse, const float *q, const float *k, const float *v,
                      const float *w, const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    ops_attention_forward(ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, D, scale);
    double l = 0.0;
    for (size_t i = 0; i < (size_t)T * Hq * D; i++) l += (double)out[i] * w[i];
    return l;
}

static void test_finite_differences(void) {
    enum { T = 8, Hq = 4, Hkv = 2, D = 8, NS = 3 };
    const int32_t cu[NS + 1] = {0, 1, 4, 8};
    const float scale = 0.45f, eps = 1e-2f;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hkv * D;
    float *q = dk_malloc(nq * 4), *k = dk_malloc(nk * 4), *v = dk_malloc(nk * 4), *w = dk_malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) q[i] = 1.5f * rnd(&seed);
    for (size_t i = 0; i < nk; i++) k[i] = 1.5f * rnd(&seed);
    for (size_t i = 0; i < nk; i++) v[i] = rnd(&seed);
    for (size_t i = 0; i < nq; i++) w[i] = rnd(&seed);
    float *out = dk_malloc(nq * 4), *lse = dk_malloc((size_t)Hq * T * 4);
    float *grad[3] = {dk_malloc(nq * 4), dk_malloc(nk * 4), dk_malloc(nk * 4)};
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, attn_scratch_bytes(cu, NS)) != DK_OK) DK_ABORT("%s", dk_error());
    fd_loss(&ctx, out, lse, q, k, v, w, cu, NS, T, Hq, Hkv, D, scale);
    ops_attention_backward(&ctx, grad[0], grad[1], grad[2], w, q, k, v, out, lse, cu, NS, T, Hq, Hkv, D, scale);

    printf("finite differences: T=%d seqs {1,3,4} Hq=%d Hkv=%d D=%d, step %.0e\n", T, Hq, Hkv, D, eps);
    float *x[3] = {q, k, v};
    size_t n[3] = {nq, nk, nk};
    const char *names[3] = {"dq vs finite diff", "dk vs finite diff", "dv vs finite diff"};
    for (int a = 0; a < 3; a++) {
        double worst = 0.0, gmax = 0.0;
        for (size_t i = 0; i < n[a]; i++) {
            float keep = x[a][i];
            x[a][i] = keep + eps;
            double lp = fd_loss(&ctx, out, lse, q, k, v, w, cu, NS, T, Hq, Hkv, D, scale);
            x[a][i] = keep - eps;
            double lm = fd_loss(&ctx, out, lse, q, k, v, w, cu, NS, T, Hq, Hkv, D, scale);
            x[a][i] = keep;
            double fd = (lp - lm) / (2.0 * eps);
            worst = fmax(worst, fabs(fd - grad[a][i]));
            gmax = fmax(gmax, fabs(grad[a][i]));
        }
        check(names[a], worst, 1e-4 * fmax(1.0, gmax));
    }
    ops_ctx_free(&ctx);
    free(q), free(k), free(v), free(w), free(out), free(lse);
    for (int a = 0; a < 3; a++) free(grad[a]);
}

/* The forward with one float too little scratch must abort and say on
 * stderr how many bytes it needs. */
enum { SMALL_T = 10, SMALL_H = 1, SMALL_D = 4 };
static const int32_t small_cu[2] = {0, SMALL_T};

static void forward_small_scratch(void *unused) {
    (void)unused;
    static float q[SMALL_T * SMALL_H * SMALL_D], out[SMALL_T * SMALL_H * SMALL_D], lse[SMALL_T * SMALL_H];
    ops_ctx ctx;
    ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, attn_scratch_bytes(small_cu, 1) / 2 - 4);
    ops_attention_forward(&ctx, out, lse, q, q, q, small_cu, 1, SMALL_T, SMALL_H, SMALL_H, SMALL_D, 0.5f);
}

static void test_scratch_too_small(void) {
    char want[64];
    snprintf(want, sizeof want, "needs %zu", attn_scratch_bytes(small_cu, 1) / 2);
    if (!expect_abort("scratch too small", forward_small_scratch, NULL, want)) failures++;
}

int main(void) {
    const char *cases[] = {"d16_h4_kv4", "d16_h4_kv2", "d64_h4_kv1", "d64_h2_kv2_single", "d16_h2_kv1_long",
                           "d16_h2_kv1_pad"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_fixture(cases[i]);
    test_finite_differences();
    test_scratch_too_small();
    if (failures) {
        printf("test_attention_cpu: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("test_attention_cpu: all checks passed\n");
    return 0;
}
