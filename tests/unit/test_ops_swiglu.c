/* test_ops_swiglu.c: the SwiGLU activation on the CPU backend, out =
 * silu(gate) * up over gu = [gate | up] rows.
 * - forward and backward against torch (F.silu and autograd,
 *   tests/fixtures/ops/swiglu.txt), including saturated gates (-90, +-20)
 *   and a zero gate;
 * - backward against finite differences of L = sum(r * out) on random rows;
 * - dgu is overwritten (filled with garbage first).
 *
 * Tolerances: forward vs torch 1e-6 and backward 1e-5 relative to the largest
 * value (both fp32 with the same formula up to expf's last ulp); finite
 * differences at h = 1e-3 on O(1) gates, where truncation (h^2 |f'''| / 6)
 * and fp32 noise of L / 2h are each ~1e-5 of the gradient: 1e-3. */
#include "tests/unit/test_ops_common.h"

#define TOL_FWD 1e-6
#define TOL_BWD 1e-5
#define TOL_FD 1e-3

typedef struct {
    ops_ctx *ctx;
    float *gu, *r, *out;
    int N, I;
} swiglu_case;

static double swiglu_loss(void *p) {
    swiglu_case *c = p;
    ops_swiglu_forward(c->ctx, c->out, c->gu, c->N, c->I);
    return dot_f64(c->r, c->out, (size_t)c->N * c->I);
}

int main(void) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }

    fixture fx = fx_load("swiglu");
    const float *d = fx_get(&fx, "dims", 2);
    int N = (int)d[0], I = (int)d[1];
    size_t n = (size_t)N * I;
    const float *gu = fx_get(&fx, "gu", 2 * n), *dout = fx_get(&fx, "dout", n);
    float *out = dk_malloc(n * 4), *dgu = rand_normal(2 * n, 1e3f, 0.0f);
    ops_swiglu_forward(&ctx, out, gu, N, I);
    ops_swiglu_backward(&ctx, dgu, dout, gu, N, I);
    double eo = rel_err(out, fx_get(&fx, "out", n), n), eg = rel_err(dgu, fx_get(&fx, "dgu", 2 * n), 2 * n);
    printf("swiglu vs torch N=%d I=%d: out rel err %.3g, dgu rel err %.3g\n", N, I, eo, eg);
    CHECK(eo < TOL_FWD, "swiglu forward vs torch: %.3g", eo);
    CHECK(eg < TOL_BWD, "swiglu backward vs torch: %.3g", eg);
    free(out), free(dgu);
    fx_free(&fx);

    rng_seed(5);
    const int shapes[][2] = {{3, 7}, {2, 33}, {1, 1}};
    for (int s = 0; s < 3; s++) {
        int N2 = shapes[s][0], I2 = shapes[s][1];
        size_t m = (size_t)N2 * I2;
        swiglu_case c = {&ctx, rand_normal(2 * m, 1.5f, 0.0f), rand_normal(m, 1.0f, 0.0f), dk_malloc(m * 4), N2,
                         I2};
        float *g = rand_normal(2 * m, 1e3f, 0.0f);
        ops_swiglu_backward(&ctx, g, c.r, c.gu, N2, I2);
        double e = fd_check(c.gu, 2 * m, g, swiglu_loss, &c, 1e-3f);
        printf("swiglu FD N=%d I=%d: rel err %.3g\n", N2, I2, e);
        CHECK(e < TOL_FD, "swiglu FD N=%d I=%d: rel err %.3g", N2, I2, e);
        free(c.gu), free(c.r), free(c.out), free(g);
    }

    ops_ctx_free(&ctx);
    return test_finish("test_ops_swiglu");
}
