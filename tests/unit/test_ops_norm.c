/* test_ops_norm.c: RMSNorm and LayerNorm on the CPU backend.
 * - forward (out, rstd, mean) and backward (dx, dw, db) against Hugging Face's
 *   Qwen3RMSNorm / torch's layer_norm and autograd (tests/fixtures/ops);
 * - backward against central finite differences of L = sum(r * out) for a
 *   random projection r, on odd sizes, including Qwen3's per-head q/k norm
 *   shape (many short rows);
 * - the contract of ops.h: dx is overwritten, dw and db accumulate; dx may
 *   also be the dout buffer itself.
 *
 * Tolerances. Forward vs torch: both are fp32 with a handful of roundings per
 * element, 1e-6 relative to the largest output. Backward vs torch: 1e-5.
 * Finite differences: step h = 1e-2 on O(1) inputs; the truncation error
 * h^2 f'''/6 and the fp32 rounding noise of L divided by 2h are each at most
 * ~1e-4 of the gradient scale (measured <= 7e-5), so 2e-3 leaves a wide
 * margin while a missing term of the backward (e.g. the -r^3/C x S part of
 * RMSNorm, ~1/sqrt(C) of dx) shows up as 1e-1. */
#include "tests/unit/test_ops_common.h"

#define TOL_FWD 1e-6
#define TOL_BWD 1e-5
#define TOL_FD 2e-3
#define FD_STEP 1e-2f

typedef struct {
    ops_ctx *ctx;
    float *x, *w, *b, *r, *out, *s1, *s2;
    int N, C, layer;
    float eps;
} norm_case;

static double norm_loss(void *p) {
    norm_case *c = p;
    if (c->layer) ops_layernorm_forward(c->ctx, c->out, c->s1, c->s2, c->x, c->w, c->b, c->N, c->C, c->eps);
    else ops_rmsnorm_forward(c->ctx, c->out, c->s1, c->x, c->w, c->N, c->C, c->eps);
    return dot_f64(c->r, c->out, (size_t)c->N * c->C);
}

/* FD check of one norm on random inputs; returns the worst relative error. */
static double fd_norm(ops_ctx *ctx, int layer, int N, int C, float offset, int with_bias) {
    size_t n = (size_t)N * C;
    norm_case c = {ctx, rand_normal(n, 1.0f, offset), rand_normal(C, 0.3f, 1.0f),
                   with_bias ? rand_normal(C, 0.5f, 0.0f) : NULL, rand_normal(n, 1.0f, 0.0f),
                   dk_malloc(n * sizeof(float)), dk_malloc(N * sizeof(float)), dk_malloc(N * sizeof(float)),
                   N, C, layer, 1e-5f};
    float *dx = rand_normal(n, 1e3f, 0.0f); /* garbage: dx must be overwritten */
    float *dw = dk_calloc(C, sizeof(float)), *db = dk_calloc(C, sizeof(float));
    norm_loss(&c);
    if (layer) ops_layernorm_backward(ctx, dx, dw, with_bias ? db : NULL, c.r, c.x, c.w, c.s1, c.s2, N, C);
    else ops_rmsnorm_backward(ctx, dx, dw, c.r, c.x, c.w, c.s1, N, C, 0);
    double ex = fd_check(c.x, n, dx, norm_loss, &c, FD_STEP);
    double ew = fd_check(c.w, C, dw, norm_loss, &c, FD_STEP);
    double eb = with_bias ? fd_check(c.b, C, db, norm_loss, &c, FD_STEP) : 0.0;
    const char *name = layer ? "layernorm" : "rmsnorm";
    printf("%s FD N=%d C=%d offset=%g: rel err dx %.3g dw %.3g db %.3g\n", name, N, C, offset, ex, ew, eb);
    CHECK(ex < TOL_FD && ew < TOL_FD && eb < TOL_FD, "%s FD N=%d C=%d: dx %.3g dw %.3g db %.3g", name, N, C, ex, ew,
          eb);
    double worst = fmax(ex, fmax(ew, eb));
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.out), free(c.s1), free(c.s2), free(dx), free(dw), free(db);
    return worst;
}

static void fixture_rmsnorm(ops_ctx *ctx) {
    fixture fx = fx_load("rmsnorm");
    for (int k = 0; k < 2; k++) {
        char key[64];
#define KEY(s) (snprintf(key, sizeof key, "rms%d.%s", k, s), key)
        const float *d = fx_get(&fx, KEY("dims"), 3);
        int N = (int)d[0], C = (int)d[1];
        float eps = d[2];
        size_t n = (size_t)N * C;
        const float *x = fx_get(&fx, KEY("x"), n), *w = fx_get(&fx, KEY("w"), C);
        const float *dout = fx_get(&fx, KEY("dout"), n);
        float *out = dk_malloc(n * sizeof(float)), *rstd = dk_malloc(N * sizeof(float));
        float *dx = rand_normal(n, 1e3f, 0.0f), *dw = dk_malloc(C * sizeof(float));
        for (int i = 0; i < C; i++) dw[i] = 0.25f * i; /* must be accumulated into */
        ops_rmsnorm_forward(ctx, out, rstd, x, w, N, C, eps);
        ops_rmsnorm_backward(ctx, dx, dw, dout, x, w, rstd, N, C, 0);
        for (int i = 0; i < C; i++) dw[i] -= 0.25f * i;
        double eo = rel_err(out, fx_get(&fx, KEY("out"), n), n);
        double er = rel_err(rstd, fx_get(&fx, KEY("rstd"), N), N);
        double ex = rel_err(dx, fx_get(&fx, KEY("dx"), n), n);
        double ew = rel_err(dw, fx_get(&fx, KEY("dw"), C), C);
        printf("rmsnorm vs torch N=%d C=%d: out %.3g rstd %.3g dx %.3g dw %.3g\n", N, C, eo, er, ex, ew);
        CHECK(eo < TOL_FWD && er < TOL_FWD, "rmsnorm fixture %d forward: out %.3g rstd %.3g", k, eo, er);
        CHECK(ex < TOL_BWD && ew < TOL_BWD, "rmsnorm fixture %d backward: dx %.3g dw %.3g", k, ex, ew);
        free(out), free(rstd), free(dx), free(dw);
#undef KEY
    }
    fx_free(&fx);
}

static void fixture_layernorm(ops_ctx *ctx) {
    fixture fx = fx_load("layernorm");
    for (int k = 0; k < 2; k++) {
        char key[64];
#define KEY(s) (snprintf(key, sizeof key, "ln%d.%s", k, s), key)
        const float *d = fx_get(&fx, KEY("dims"), 4);
        int N = (int)d[0], C = (int)d[1], bias = (int)d[3];
        float eps = d[2];
        size_t n = (size_t)N * C;
        const float *x = fx_get(&fx, KEY("x"), n), *w = fx_get(&fx, KEY("w"), C);
        const float *b = bias ? fx_get(&fx, KEY("b"), C) : NULL;
        const float *dout = fx_get(&fx, KEY("dout"), n);
        float *out = dk_malloc(n * sizeof(float)), *mean = dk_malloc(N * sizeof(float));
        float *rstd = dk_malloc(N * sizeof(float)), *dx = rand_normal(n, 1e3f, 0.0f);
        float *dw = dk_calloc(C, sizeof(float)), *db = dk_calloc(C, sizeof(float));
        ops_layernorm_forward(ctx, out, mean, rstd, x, w, b, N, C, eps);
        ops_layernorm_backward(ctx, dx, dw, bias ? db : NULL, dout, x, w, mean, rstd, N, C);
        double eo = rel_err(out, fx_get(&fx, KEY("out"), n), n);
        double em = rel_err(mean, fx_get(&fx, KEY("mean"), N), N);
        double er = rel_err(rstd, fx_get(&fx, KEY("rstd"), N), N);
        double ex = rel_err(dx, fx_get(&fx, KEY("dx"), n), n);
        double ew = rel_err(dw, fx_get(&fx, KEY("dw"), C), C);
        double eb = bias ? rel_err(db, fx_get(&fx, KEY("db"), C), C) : 0.0;
        printf("layernorm vs torch N=%d C=%d bias=%d: out %.3g mean %.3g rstd %.3g dx %.3g dw %.3g db %.3g\n", N,
               C, bias, eo, em, er, ex, ew, eb);
        CHECK(eo < TOL_FWD && em < TOL_FWD && er < TOL_FWD, "layernorm fixture %d forward: out %.3g mean %.3g "
              "rstd %.3g", k, eo, em, er);
        CHECK(ex < TOL_BWD && ew < TOL_BWD && eb < TOL_BWD, "layernorm fixture %d backward: dx %.3g dw %.3g db %.3g",
              k, ex, ew, eb);
        free(out), free(mean), free(rstd), free(dx), free(dw), free(db);
#undef KEY
    }
    fx_free(&fx);
}

/* Two backward calls accumulate exactly twice the parameter gradient and
 * leave the same dx (overwritten, not summed); with accumulate 1 the RMSNorm
 * backward adds its dx into the buffer's old contents instead. */
static void accumulate_contract(ops_ctx *ctx) {
    int N = 3, C = 10;
    size_t n = (size_t)N * C;
    float *x = rand_normal(n, 1.0f, 0.0f), *w = rand_normal(C, 0.3f, 1.0f), *g = rand_normal(n, 1.0f, 0.0f);
    float *out = dk_malloc(n * 4), *mean = dk_malloc(N * 4), *rstd = dk_malloc(N * 4);
    float *dx1 = dk_malloc(n * 4), *dx2 = dk_malloc(n * 4);
    float *dw = dk_calloc(C, 4), *dw1 = dk_malloc(C * 4), *db = dk_calloc(C, 4), *db1 = dk_malloc(C * 4);
    ops_rmsnorm_forward(ctx, out, rstd, x, w, N, C, 1e-6f);
    ops_rmsnorm_backward(ctx, dx1, dw, g, x, w, rstd, N, C, 0);
    memcpy(dw1, dw, C * 4);
    ops_rmsnorm_backward(ctx, dx2, dw, g, x, w, rstd, N, C, 0);
    int ok = 1;
    for (int i = 0; i < C; i++) ok &= dw[i] == 2.0f * dw1[i];
    CHECK(ok && max_abs_diff(dx1, dx2, n) == 0.0, "rmsnorm: dw must accumulate, dx be overwritten");
    memset(dw, 0, C * 4);
    ops_layernorm_forward(ctx, out, mean, rstd, x, w, NULL, N, C, 1e-5f);
    ops_layernorm_backward(ctx, dx1, dw, db, g, x, w, mean, rstd, N, C);
    memcpy(dw1, dw, C * 4);
    memcpy(db1, db, C * 4);
    ops_layernorm_backward(ctx, dx2, dw, db, g, x, w, mean, rstd, N, C);
    ok = 1;
    for (int i = 0; i < C; i++) ok &= dw[i] == 2.0f * dw1[i] && db[i] == 2.0f * db1[i];
    CHECK(ok && max_abs_diff(dx1, dx2, n) == 0.0, "layernorm: dw, db must accumulate, dx be overwritten");

    /* in place: dx may be the dout buffer */
    memcpy(dx2, g, n * 4);
    memcpy(dw1, dw, C * 4);
    ops_layernorm_backward(ctx, dx2, dw, NULL, dx2, x, w, mean, rstd, N, C);
    ok = max_abs_diff(dx1, dx2, n) == 0.0;
    for (int i = 0; i < C; i++) ok &= dw[i] == dw1[i] + dw1[i] / 2.0f;
    CHECK(ok, "layernorm: in-place backward (dx == dout) differs");
    ops_rmsnorm_forward(ctx, out, rstd, x, w, N, C, 1e-6f);
    ops_rmsnorm_backward(ctx, dx1, dw, g, x, w, rstd, N, C, 0);
    memcpy(dx2, g, n * 4);
    ops_rmsnorm_backward(ctx, dx2, dw, dx2, x, w, rstd, N, C, 0);
    CHECK(max_abs_diff(dx1, dx2, n) == 0.0, "rmsnorm: in-place backward (dx == dout) differs");

    /* accumulate 1: dx gets old + the gradient the overwriting call wrote
     * (fp32 here, so exactly their sum), dw accumulates as before. */
    float *old = rand_normal(n, 1.0f, 0.0f);
    memcpy(dx2, old, n * 4);
    memcpy(dw1, dw, C * 4);
    ops_rmsnorm_backward(ctx, dx2, dw, g, x, w, rstd, N, C, 1);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= dx2[i] == old[i] + dx1[i];
    float *dw0 = dk_calloc(C, 4);
    ops_rmsnorm_backward(ctx, dx1, dw0, g, x, w, rstd, N, C, 0);
    for (int i = 0; i < C; i++) ok &= dw[i] == dw1[i] + dw0[i];
    CHECK(ok, "rmsnorm: accumulate must add the input gradient into dx and dw as without it");
    free(old), free(dw0);
    free(x), free(w), free(g), free(out), free(mean), free(rstd), free(dx1), free(dx2), free(dw), free(dw1),
        free(db), free(db1);
}

int main(void) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }
    rng_seed(11);
    fixture_rmsnorm(&ctx);
    fixture_layernorm(&ctx);
    fd_norm(&ctx, 0, 4, 13, 0.0f, 0);
    fd_norm(&ctx, 0, 24, 8, 0.5f, 0); /* q/k norm: tokens * heads short rows */
    fd_norm(&ctx, 0, 2, 300, 0.0f, 0); /* more than one column block for dw */
    fd_norm(&ctx, 1, 4, 13, 2.0f, 1);
    fd_norm(&ctx, 1, 3, 7, 0.0f, 0);
    fd_norm(&ctx, 1, 2, 300, -1.0f, 1);
    accumulate_contract(&ctx);
    ops_ctx_free(&ctx);
    return test_finish("test_ops_norm");
}
