/* test_ops_elementwise.c: the CPU backend's context, memory functions and
 * small ops, and the dispatcher's refusal of a device the build cannot run.
 * - ops_ctx_init: CPU works (scratch of the asked size, act size 4, every
 *   ops_tuning field 0 whatever the struct held before); CUDA fails with
 *   DK_ERR_RUNTIME and a message wherever ops_cuda_available() says no GPU
 *   backend is usable; ops_parse_device / ops_device_name;
 * - alloc is zeroed, upload/download and the act casts round-trip bit for bit;
 * - add against hand values, bias forward/backward against a double
 *   loop (over the 256-column block boundary; dbias accumulates) and the
 *   backward against finite differences of L = sum(r * (y + bias)) (linear,
 *   so only fp32 noise remains: 1e-4);
 * - sumsq against a double sum, including a case an fp32 accumulator gets
 *   wrong: 4096^2 followed by a million ones (an fp32 sum stays at 2^24). */
#include "tests/unit/test_ops_common.h"

static void test_context(void) {
    ops_ctx ctx;
    memset(&ctx, 0xff, sizeof ctx); /* a caller's stack holds anything */
    CHECK(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 1000) == DK_OK, "cpu ctx: %s", dk_error());
    CHECK(ctx.device == DK_DEVICE_CPU && ctx.scratch && ctx.scratch_size == 1000, "cpu ctx scratch");
    CHECK(ops_act_size(&ctx) == 4, "cpu act size %zu", ops_act_size(&ctx));
    const ops_tuning automatic = {0};
    CHECK(!memcmp(&ctx.tuning, &automatic, sizeof automatic), "a new context's ops_tuning must be all 0 (automatic)");
    ops_ctx_free(&ctx);

    if (!ops_cuda_available()) {
        dk_error_clear();
        dk_status s = ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, 0);
        printf("cuda ctx without a usable CUDA backend: status %d, \"%s\"\n", (int)s, dk_error());
        CHECK(s == DK_ERR_RUNTIME, "cuda ctx must fail with DK_ERR_RUNTIME, got %d", (int)s);
        CHECK(strstr(dk_error(), "cuda") != NULL, "cuda ctx failure must say why: '%s'", dk_error());
        ops_ctx_free(&ctx); /* a failed init leaves a ctx that is safe to free */
    }

    dk_device dev = DK_DEVICE_CUDA;
    CHECK(ops_parse_device("cpu", &dev) == DK_OK && dev == DK_DEVICE_CPU, "parse cpu");
    CHECK(ops_parse_device("cuda", &dev) == DK_OK && dev == DK_DEVICE_CUDA, "parse cuda");
    CHECK(ops_parse_device("gpu0", &dev) == DK_ERR_USAGE && strstr(dk_error(), "gpu0"), "parse gpu0: '%s'",
          dk_error());
    CHECK(strcmp(ops_device_name(DK_DEVICE_CPU), "cpu") == 0 && strcmp(ops_device_name(DK_DEVICE_CUDA), "cuda") == 0,
          "device names");
}

static void test_memory(ops_ctx *ctx) {
    size_t n = 1001;
    float *a = ops_alloc(ctx, n * 4), *host = rand_normal(n, 1.0f, 0.0f), *back = dk_malloc(n * 4);
    CHECK(max_abs(a, n) == 0.0, "ops_alloc must zero");
    ops_upload(ctx, a, host, n * 4);
    ops_download(ctx, back, a, n * 4);
    CHECK(memcmp(back, host, n * 4) == 0, "upload/download round trip");
    ops_zero(ctx, a, n * 4);
    CHECK(max_abs(a, n) == 0.0, "ops_zero");
    ops_upload_act(ctx, a, host, n);
    float *f = ops_alloc(ctx, n * 4);
    ops_cast_act_to_f32(ctx, f, a, n);
    ops_zero(ctx, a, n * 4);
    ops_cast_f32_to_act(ctx, a, f, n);
    ops_download_act(ctx, back, a, n);
    ops_sync(ctx);
    CHECK(memcmp(back, host, n * 4) == 0, "act upload, casts and download round trip");
    ops_free(ctx, a);
    ops_free(ctx, f);
    free(host), free(back);
}

typedef struct {
    ops_ctx *ctx;
    float *y0, *y, *b, *r;
    int N, C;
} bias_case;

static double bias_loss(void *p) {
    bias_case *c = p;
    memcpy(c->y, c->y0, (size_t)c->N * c->C * 4);
    ops_bias_forward(c->ctx, c->y, c->b, c->N, c->C);
    return dot_f64(c->r, c->y, (size_t)c->N * c->C);
}

static void test_small_ops(ops_ctx *ctx) {
    float y[5] = {1, 2, 3, 4, 5}, x[5] = {0.5f, -2, 0, 1e-3f, -5};
    ops_add(ctx, y, x, 5);
    CHECK(y[0] == 1.5f && y[1] == 0 && y[2] == 3 && y[3] == 4.001f && y[4] == 0, "ops_add");

    /* bias over the 256-column block boundary, dbias accumulating */
    int N = 7, C = 300;
    float *yb = rand_normal((size_t)N * C, 1.0f, 0.0f), *b = rand_normal(C, 1.0f, 0.0f);
    float *y0 = dk_malloc((size_t)N * C * 4), *db = dk_malloc(C * 4), *want = dk_malloc(C * 4);
    memcpy(y0, yb, (size_t)N * C * 4);
    ops_bias_forward(ctx, yb, b, N, C);
    int ok = 1;
    for (int i = 0; i < N * C; i++) ok &= yb[i] == y0[i] + b[i % C];
    CHECK(ok, "bias forward");
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int i = 0; i < N; i++) s += y0[(size_t)i * C + c];
        db[c] = 1.0f;
        want[c] = (float)(1.0 + s);
    }
    ops_bias_backward(ctx, db, y0, N, C);
    double e = rel_err(db, want, C);
    printf("bias backward vs double column sums N=%d C=%d: rel err %.3g\n", N, C, e);
    CHECK(e < 1e-6, "bias backward: rel err %.3g", e);

    bias_case bc = {ctx, y0, yb, b, rand_normal((size_t)N * C, 1.0f, 0.0f), N, C};
    memset(db, 0, C * 4);
    ops_bias_backward(ctx, db, bc.r, N, C);
    double efd = fd_check(b, C, db, bias_loss, &bc, 1e-2f);
    printf("bias FD N=%d C=%d: rel err %.3g\n", N, C, efd);
    CHECK(efd < 1e-4, "bias FD: rel err %.3g", efd);
    free(bc.r);
    free(yb), free(b), free(y0), free(db), free(want);
}

static void test_sumsq(ops_ctx *ctx) {
    size_t n = 1000003;
    float *x = rand_normal(n, 1.0f, 0.0f);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = ops_sumsq(ctx, x, n);
    printf("sumsq of %zu normals: %.17g vs %.17g (rel %.3g)\n", n, got, want, fabs(got - want) / want);
    CHECK(fabs(got - want) <= 1e-12 * want, "sumsq random: %.17g vs %.17g", got, want);
    x[0] = 4096.0f;
    for (size_t i = 1; i < n; i++) x[i] = 1.0f;
    got = ops_sumsq(ctx, x, n);
    CHECK(got == 16777216.0 + (double)(n - 1), "sumsq with an fp32-absorbing prefix: %.17g", got);
    CHECK(ops_sumsq(ctx, x, 0) == 0.0, "sumsq of nothing");
    free(x);
}

int main(void) {
    test_context();
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }
    rng_seed(9);
    test_memory(&ctx);
    test_small_ops(&ctx);
    test_sumsq(&ctx);
    ops_ctx_free(&ctx);
    return test_finish("test_ops_elementwise");
}
