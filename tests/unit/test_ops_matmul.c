/* test_ops_matmul.c: ops_matmul on the CPU backend, all four transpose
 * combinations with alpha and beta, odd sizes: against the float64 products
 * of tests/fixtures/ops/matmul.txt (made by PyTorch) and against a plain
 * double loop on larger random shapes. Also the corners the model relies on:
 * beta = 0 never reads C (a NaN-filled output buffer comes out clean), K = 0
 * gives beta * C, and c_f32 changes nothing on this backend. Then
 * ops_matmul_residual (C = A W^T + R) by hand and against the double loop,
 * out of place and in place.
 *
 * Tolerance: fp32 sgemm with K <= 100 has a worst-case error of about
 * K * 2^-24 * sum|a||b|; relative to the largest output that stays well below
 * 1e-5 for these shapes (measured ~1e-7), while any indexing or transpose
 * mistake gives O(1). */
#include "tests/unit/test_ops_common.h"

#define TOL 1e-5

/* C = alpha op(A) op(B) + beta C in double, straight from the definition. */
static void matmul_ref(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb, float alpha,
                       float beta) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                double av = ta ? a[(size_t)k * M + i] : a[(size_t)i * K + k];
                double bv = tb ? b[(size_t)j * K + k] : b[(size_t)k * N + j];
                s += av * bv;
            }
            double prev = beta == 0.0f ? 0.0 : (double)beta * c[(size_t)i * N + j];
            c[(size_t)i * N + j] = (float)(alpha * s + prev);
        }
}

int main(void) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }

    /* PyTorch fixtures */
    fixture fx = fx_load("matmul");
    int count = (int)fx_get(&fx, "count", 1)[0];
    double worst_fx = 0.0;
    for (int k = 0; k < count; k++) {
        char key[64];
        snprintf(key, sizeof key, "mm%d.dims", k);
        const float *d = fx_get(&fx, key, 7);
        int M = (int)d[0], N = (int)d[1], K = (int)d[2], ta = (int)d[3], tb = (int)d[4];
        float alpha = d[5], beta = d[6];
        snprintf(key, sizeof key, "mm%d.a", k);
        const float *a = fx_get(&fx, key, (size_t)M * K);
        snprintf(key, sizeof key, "mm%d.b", k);
        const float *b = fx_get(&fx, key, (size_t)K * N);
        snprintf(key, sizeof key, "mm%d.c0", k);
        float *c = fx_copy(&fx, key, (size_t)M * N);
        snprintf(key, sizeof key, "mm%d.c", k);
        const float *want = fx_get(&fx, key, (size_t)M * N);
        ops_matmul(&ctx, c, 0, a, b, M, N, K, ta, tb, alpha, beta);
        double e = rel_err(c, want, (size_t)M * N);
        CHECK(e < TOL, "fixture case %d (M=%d N=%d K=%d ta=%d tb=%d): rel err %.3g", k, M, N, K, ta, tb, e);
        if (e > worst_fx) worst_fx = e;
        free(c);
    }
    fx_free(&fx);
    printf("matmul vs torch: %d cases, max rel err %.3g\n", count, worst_fx);

    /* Larger odd shapes against the double loop, including beta = 0 over a
     * NaN-filled C and c_f32 = 1. */
    rng_seed(7);
    const int shapes[][3] = {{37, 29, 65}, {64, 1, 17}, {1, 1, 1}, {5, 130, 3}};
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int combo = 0; combo < 8; combo++) {
            int ta = combo & 1, tb = (combo >> 1) & 1, zero_beta = combo >> 2;
            float alpha = zero_beta ? 1.0f : -1.25f, beta = zero_beta ? 0.0f : 0.5f;
            float *a = rand_normal((size_t)M * K, 1.0f, 0.0f), *b = rand_normal((size_t)K * N, 1.0f, 0.0f);
            float *c = rand_normal((size_t)M * N, 1.0f, 0.0f);
            float *want = dk_malloc((size_t)M * N * sizeof(float));
            memcpy(want, c, (size_t)M * N * sizeof(float));
            if (zero_beta)
                for (size_t i = 0; i < (size_t)M * N; i++) c[i] = NAN;
            matmul_ref(want, a, b, M, N, K, ta, tb, alpha, beta);
            ops_matmul(&ctx, c, combo & 1, a, b, M, N, K, ta, tb, alpha, beta);
            double e = rel_err(c, want, (size_t)M * N);
            CHECK(e < TOL, "random M=%d N=%d K=%d ta=%d tb=%d beta=%g: rel err %.3g", M, N, K, ta, tb, beta, e);
            if (!(e <= worst)) worst = e;
            free(a), free(b), free(c), free(want);
        }
    }
    printf("matmul vs double loop: 32 cases, max rel err %.3g\n", worst);

    /* K = 0: the product is empty, C = beta * C (and beta = 0 clears C). */
    float c0[6] = {1, 2, 3, 4, 5, NAN}, dummy = 0.0f;
    ops_matmul(&ctx, c0, 0, &dummy, &dummy, 2, 2, 0, 0, 0, 1.0f, 2.0f);
    CHECK(c0[0] == 2 && c0[1] == 4 && c0[2] == 6 && c0[3] == 8 && c0[4] == 5,
          "K=0 beta=2: got %g %g %g %g (and %g untouched)", c0[0], c0[1], c0[2], c0[3], c0[4]);
    ops_matmul(&ctx, c0 + 2, 0, &dummy, &dummy, 1, 4, 0, 1, 1, 1.0f, 0.0f);
    CHECK(c0[2] == 0 && c0[3] == 0 && c0[4] == 0 && c0[5] == 0, "K=0 beta=0 must zero C, NaN included");

    /* The linear-layer form of ops.h: y[T,out] = x[T,in] W[out,in]^T. */
    {
        const float x[2 * 3] = {1, 2, 3, -1, 0, 2}, W[2 * 3] = {1, 0, -1, 2, 1, 0.5f};
        float y[4] = {0};
        ops_matmul(&ctx, y, 0, x, W, 2, 2, 3, 0, 1, 1.0f, 0.0f);
        CHECK(y[0] == -2 && y[1] == 5.5f && y[2] == -3 && y[3] == -1, "linear layer: got %g %g %g %g", y[0], y[1],
              y[2], y[3]);
    }

    /* The residual form: C = A W^T + R, out of place (R unchanged) and in
     * place (C is R), against the double loop. A hand-computed case first:
     * x as above, R = [[10, 20], [30, 40]]. */
    {
        const float x[2 * 3] = {1, 2, 3, -1, 0, 2}, W[2 * 3] = {1, 0, -1, 2, 1, 0.5f};
        const float R[4] = {10, 20, 30, 40};
        float y[4] = {0};
        ops_matmul_residual(&ctx, y, x, W, R, 2, 2, 3);
        CHECK(y[0] == 8 && y[1] == 25.5f && y[2] == 27 && y[3] == 39 && R[0] == 10,
              "matmul_residual: got %g %g %g %g", y[0], y[1], y[2], y[3]);
        for (int s = 0; s < 2; s++) {
            const int M = 37, N = 29, K = 65;
            float *a = rand_normal((size_t)M * K, 1.0f, 0.0f), *w = rand_normal((size_t)N * K, 1.0f, 0.0f);
            float *r = rand_normal((size_t)M * N, 1.0f, 0.0f), *r0 = dk_malloc((size_t)M * N * sizeof(float));
            float *c = s ? r : rand_normal((size_t)M * N, 1.0f, 0.0f), *want = dk_malloc((size_t)M * N * sizeof(float));
            memcpy(r0, r, (size_t)M * N * sizeof(float));
            memcpy(want, r, (size_t)M * N * sizeof(float));
            matmul_ref(want, a, w, M, N, K, 0, 1, 1.0f, 1.0f);
            ops_matmul_residual(&ctx, c, a, w, r, M, N, K);
            double e = rel_err(c, want, (size_t)M * N);
            CHECK(e < TOL, "matmul_residual %s: rel err %.3g", s ? "in place" : "out of place", e);
            if (!s) CHECK(memcmp(r, r0, (size_t)M * N * sizeof(float)) == 0, "matmul_residual changed R");
            free(a), free(w), free(r), free(r0), free(want);
            if (!s) free(c);
        }
    }

    ops_ctx_free(&ctx);
    return test_finish("test_ops_matmul");
}
