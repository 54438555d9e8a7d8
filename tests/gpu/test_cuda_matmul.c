/* test_cuda_matmul.c: ops_matmul (cuBLASLt) and the linear-layer bias on the
 * CUDA backend against the CPU backend (OpenBLAS sgemm) on the same
 * bf16-valued inputs:
 * - all four transpose combinations, alpha and beta, bf16 and fp32 (c_f32)
 *   outputs, odd sizes (M, N, K in 1..97), the model's shapes, operands at
 *   2-byte offsets (cuBLASLt's unaligned kernels), beta = 0 on a NaN-filled
 *   C, K = 0 (C = beta * C), and bf16 outputs with a long K (K = 5000,
 *   5632: the products staged in fp32 so they are rounded once), and the
 *   few-row products x W^T of decode steps (M <= 8, matmul_gemv.cu; 9 to
 *   64 rows, matmul_skinny.cu and on sm_90 matmul_skinny_wgmma.cu, under
 *   each pinned plan: 64, 96 (wgmma) or 128 columns a block, K unsplit or
 *   split over a cluster, whose sum repeats bit for bit);
 * - ops_matmul_residual (C = A W^T + R) on each of its paths, out of place
 *   and in place, against the CPU with R as large as the product;
 * - ops_bias_forward and ops_bias_backward (accumulating into dbias), with
 *   C a multiple of 8 (vector path) and not, over many rows; the backward
 *   twice on the same inputs gives the same bits.
 *
 * Tolerances. Both backends accumulate in fp32 from identical inputs, so the
 * products differ by the summation order only (< 1e-5 of sum |a||b| for
 * K <= 4096); a bf16 output adds its own rounding, half a bf16 ulp (2^-9
 * relative). Per element: |gpu - cpu| <= 1e-4 * scale + 2^-8 * |cpu| for
 * bf16 outputs and 1e-4 * scale for fp32 ones, scale = max |cpu| (1e-4 of
 * the largest value leaves ~10x margin over the measured ~1e-6..1e-5). The
 * bias backward sums bf16 values in fp32 in another order than the CPU's
 * double sums: 1e-5 relative to the largest column sum of |dy|.
 * A pinned choice out of range (ops_tuning.gemv_residency below -1, a
 * negative skinny_splits, skinny_bn 96 on the mma.sync kernel or 80 on the
 * wgmma one, skinny_use 3) aborts the product, naming the field. */
#include "tests/expect_abort.h"
#include "tests/gpu/test_cuda_common.h"

static double run_case(ctx_pair *p, int M, int N, int K, int ta, int tb, int c_f32, float alpha, float beta,
                       int shift, int nan_c) {
    ops_ctx *g = &p->gpu;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = rand_bf16(na, 1.0f, 0.0f), *b = rand_bf16(nb, 1.0f, 0.0f), *c0 = rand_bf16(nc, 1.0f, 0.0f);
    if (nan_c)
        for (size_t i = 0; i < nc; i++) c0[i] = NAN;
    dev_buf da = dev_act(g, a, na, shift), db = dev_act(g, b, nb, shift);
    dev_buf dc = c_f32 ? dev_f32(g, c0, nc, shift) : dev_act(g, c0, nc, shift);
    float *want = copy_f32(c0, nc);
    if (nan_c)
        for (size_t i = 0; i < nc; i++) want[i] = 0.0f; /* beta = 0: C is never read */
    ops_matmul(g, dc.p, c_f32, da.p, db.p, M, N, K, ta, tb, alpha, beta);
    ops_matmul(&p->cpu, want, 1, a, b, M, N, K, ta, tb, alpha, beta);
    float *got = c_f32 ? get_f32(g, dc.p, nc) : get_act(g, dc.p, nc);
    double scale = max_abs(want, nc);
    if (scale == 0.0) scale = 1.0;
    double r = tol_ratio(got, want, nc, 1e-4 * scale, c_f32 ? 0.0 : 1.0 / 256.0);
    if (r > 1.0) { /* name the worst element */
        size_t w = 0;
        for (size_t i = 1; i < nc; i++)
            if (fabs((double)got[i] - want[i]) > fabs((double)got[w] - want[w])) w = i;
        printf("  worst element %zu: cuda %.6g cpu %.6g (scale %.4g)\n", w, got[w], want[w], scale);
    }
    CHECK(r <= 1.0, "matmul M=%d N=%d K=%d ta=%d tb=%d c_f32=%d alpha=%g beta=%g shift=%d: tolerance ratio %.3g", M,
          N, K, ta, tb, c_f32, alpha, beta, shift, r);
    dev_free(g, &da), dev_free(g, &db), dev_free(g, &dc);
    free(a), free(b), free(c0), free(want), free(got);
    return r;
}

/* Each (M, N, K) of shapes as A W^T, both output types, alpha and beta,
 * aligned and not; the worst tolerance ratio into *worst. */
static void run_rows_wt(ctx_pair *p, const int (*shapes)[3], size_t n, double *worst, int *cases) {
    for (size_t s = 0; s < n; s++)
        for (int cf = 0; cf < 2; cf++)
            for (int shift = 0; shift < 2; shift++) {
                float alpha = shift ? 0.75f : 1.0f, beta = cf ? 1.0f : (shift ? 0.5f : 0.0f);
                double r = run_case(p, shapes[s][0], shapes[s][1], shapes[s][2], 0, 1, cf, alpha, beta, shift, 0);
                *worst = r > *worst ? r : *worst;
                (*cases)++;
            }
}

/* A split product twice on the same inputs: the same bits (the cluster
 * adds its partial tiles in rank order). */
static void check_skinny_repeat(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    const int M = 64, N = 512, K = 4096;
    float *a = rand_bf16((size_t)M * K, 1.0f, 0.0f), *b = rand_bf16((size_t)N * K, 1.0f, 0.0f);
    dev_buf da = dev_act(g, a, (size_t)M * K, 0), db = dev_act(g, b, (size_t)N * K, 0);
    dev_buf dc = dev_f32(g, a, (size_t)M * N, 0);
    g->tuning.skinny_splits = 8;
    ops_matmul(g, dc.p, 1, da.p, db.p, M, N, K, 0, 1, 1.0f, 0.0f);
    float *first = get_f32(g, dc.p, (size_t)M * N);
    ops_matmul(g, dc.p, 1, da.p, db.p, M, N, K, 0, 1, 1.0f, 0.0f);
    float *second = get_f32(g, dc.p, (size_t)M * N);
    g->tuning.skinny_splits = 0;
    CHECK(bits_equal(first, second, (size_t)M * N), "skinny product with 8 splits: two runs differ");
    dev_free(g, &da), dev_free(g, &db), dev_free(g, &dc);
    free(a), free(b), free(first), free(second);
}

static void check_matmul(ctx_pair *p) {
    double worst = 0.0;
    int cases = 0;
    /* Odd sizes: every transpose, both output types, alpha/beta, alignment. */
    const int odd[][3] = {{1, 1, 1}, {37, 19, 53}, {64, 48, 96}, {97, 5, 33}, {8, 97, 16}, {128, 256, 1}};
    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int cf = 0; cf < 2; cf++)
                    for (int shift = 0; shift < 2; shift++) {
                        float alpha = shift ? 0.75f : 1.0f, beta = cf ? 1.0f : (shift ? 0.5f : 0.0f);
                        double r = run_case(p, odd[s][0], odd[s][1], odd[s][2], ta, tb, cf, alpha, beta, shift, 0);
                        worst = r > worst ? r : worst;
                        cases++;
                    }
    /* The model's uses: x W^T (0,1), dX = dY W (0,0), dW += dY^T X (1,0, fp32). */
    const int T = 512, C = 1024, I = 2816;
    const int shapes[][7] = {{T, 3 * C, C, 0, 1, 0, 0}, {T, C, I, 0, 1, 0, 0},   {T, I, C, 0, 0, 0, 0},
                             {C, I, T, 1, 0, 1, 1},     {2 * I, C, T, 1, 0, 1, 1}, {T, C, 2 * I, 0, 0, 0, 1},
                             {200, 300, 5000, 1, 1, 0, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *q = shapes[s];
        double r = run_case(p, q[0], q[1], q[2], q[3], q[4], q[5], 1.0f, q[6] ? 1.0f : 0.0f, 0, 0);
        worst = r > worst ? r : worst;
        cases++;
    }
    /* Few rows times W^T (decode steps: matmul_gemv.cu for M <= 8 and K % 8
     * == 0, cuBLASLt past 32768 columns or unaligned): both output types,
     * alpha and beta, aligned and not; long and odd rows, fewer columns
     * than SMs. */
    const int gemv[][3] = {{1, 2048, 2048}, {1, 6144, 2048}, {3, 257, 1000}, {8, 2048, 6144}, {5, 1, 8},
                           {2, 40000, 64}, {7, 33, 24},     {1, 2047, 4096}, {3, 5, 6144},  {1, 1, 8},
                           {2, 257, 1000}, {1, 100, 5000},  {2, 2048, 6144}, {1, 64, 8200}, {2, 131, 2056}};
    /* Each under the chosen grid, a block a group of columns, and the
     * smallest grid (every warp walking many columns). */
    const int residency[] = {0, -1, 64};
    for (int g = 0; g < 3; g++) {
        p->gpu.tuning.gemv_residency = residency[g];
        run_rows_wt(p, gemv, sizeof gemv / sizeof gemv[0], &worst, &cases);
    }
    p->gpu.tuning.gemv_residency = 0;
    /* 9 to 64 rows times W^T with a long K (matmul_skinny.cu for K % 64 ==
     * 0 and K > 2 (M + N); split-K where the columns alone leave SMs idle):
     * partial 16-row tiles, column counts off the 64-column tile; and
     * shorter products that stay with cuBLASLt. */
    const int skinny[][3] = {{64, 2048, 6144}, {64, 4096, 2048}, {9, 2048, 6144}, {33, 200, 640},
                             {16, 1000, 4096}, {50, 20, 256}, {64, 72, 4096}};
    run_rows_wt(p, skinny, sizeof skinny / sizeof skinny[0], &worst, &cases);
    /* Every product the skinny kernel can take, under each pinned plan:
     * 64 and 128 columns a block, K unsplit and split over clusters of 2
     * and 8 (rows summed across the cluster's shared memories). */
    const int plans[][2] = {{64, 1}, {128, 1}, {64, 2}, {128, 8}, {64, 8}};
    const int every[][3] = {{64, 4096, 2048}, {9, 300, 1024}, {40, 136, 512}, {17, 2048, 6144}};
    p->gpu.tuning.skinny_use = 1;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        p->gpu.tuning.skinny_bn = plans[i][0], p->gpu.tuning.skinny_splits = plans[i][1];
        run_rows_wt(p, every, sizeof every / sizeof every[0], &worst, &cases);
    }
    p->gpu.tuning.skinny_bn = 0, p->gpu.tuning.skinny_splits = 0;
    check_skinny_repeat(p);
    /* The same on the wgmma kernel (matmul_skinny_wgmma.cu; on other GPUs
     * than sm_90 these run the mma.sync one, which has only 64 and 128):
     * 64, 96 and 128 columns a block (one consumer warpgroup), 192 and 256
     * (two), unsplit and split over clusters of 2, 3 and 8, its chosen
     * plan; rows past M, columns past the tile, K of 2 to 96 stages (more
     * than the ring holds), shapes of the 1.7B decode step. */
    p->gpu.tuning.skinny_use = 2;
    const int wg_plans[][2] = {{0, 0},  {64, 1},  {96, 1},  {128, 1}, {192, 1}, {256, 1},
                               {96, 3}, {128, 8}, {64, 8}, {192, 2}, {256, 8}};
    const int wg_every[][3] = {{64, 4096, 2048}, {9, 300, 1024}, {40, 136, 512}, {17, 2048, 6144},
                               {64, 1000, 128},  {33, 520, 2048}};
    for (size_t i = 0; i < sizeof wg_plans / sizeof wg_plans[0]; i++) {
        const int narrow = wg_plans[i][0] == 0 || wg_plans[i][0] == 64 || wg_plans[i][0] == 128;
        if (!narrow && device_compute_capability(p->gpu.gpu) != 90) continue;
        p->gpu.tuning.skinny_bn = wg_plans[i][0], p->gpu.tuning.skinny_splits = wg_plans[i][1];
        run_rows_wt(p, wg_every, sizeof wg_every / sizeof wg_every[0], &worst, &cases);
        printf("  wgmma skinny, %d columns x %d splits (0: chosen): %d cases so far, worst ratio %.3g\n",
               wg_plans[i][0], wg_plans[i][1], cases, worst);
    }
    p->gpu.tuning.skinny_bn = 0, p->gpu.tuning.skinny_splits = 0;
    const int wg_model[][3] = {{64, 12288, 2048}, {64, 4096, 2048}, {64, 2048, 6144}}; /* 1.7B gate|up, q|k|v, down */
    run_rows_wt(p, wg_model, sizeof wg_model / sizeof wg_model[0], &worst, &cases);
    p->gpu.tuning.skinny_bn = 0, p->gpu.tuning.skinny_splits = 0;
    check_skinny_repeat(p);
    p->gpu.tuning.skinny_use = 0;
    for (int cf = 0; cf < 2; cf++) worst = fmax(worst, run_case(p, 4, 100, 64, 0, 1, cf, 1.0f, 0.0f, 0, 1)), cases++;
    for (int cf = 0; cf < 2; cf++) worst = fmax(worst, run_case(p, 40, 60, 512, 0, 1, cf, 1.0f, 0.0f, 0, 1)), cases++;
    /* beta = 0 must not read C (NaN there stays out of the result). */
    for (int cf = 0; cf < 2; cf++) worst = fmax(worst, run_case(p, 33, 65, 40, 0, 1, cf, 1.0f, 0.0f, 0, 1)), cases++;
    printf("matmul: %d cases, worst tolerance ratio %.3g (<= 1 passes)\n", cases, worst);

    /* K = 0: C = beta * C. */
    ops_ctx *g = &p->gpu;
    for (int cf = 0; cf < 2; cf++) {
        float *c0 = rand_bf16(30, 1.0f, 0.0f);
        dev_buf dc = cf ? dev_f32(g, c0, 30, 0) : dev_act(g, c0, 30, 0);
        ops_matmul(g, dc.p, cf, NULL, NULL, 5, 6, 0, 0, 0, 1.0f, 0.5f);
        float *got = cf ? get_f32(g, dc.p, 30) : get_act(g, dc.p, 30);
        for (int i = 0; i < 30; i++) c0[i] = cf ? 0.5f * c0[i] : bf16_round(0.5f * c0[i]);
        CHECK(bits_equal(got, c0, 30), "matmul K=0 c_f32=%d: C != beta * C", cf);
        dev_free(g, &dc);
        free(c0), free(got);
    }
}

static void check_bias(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    const int shapes[][2] = {{1, 1}, {7, 13}, {300, 64}, {1000, 24}, {4096, 1024}, {333, 1030}, {20000, 128}};
    double worst_f = 0.0, worst_b = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int shift = 0; shift < 2; shift++) {
            int N = shapes[s][0], C = shapes[s][1];
            size_t n = (size_t)N * C;
            float *y = rand_bf16(n, 1.0f, 0.0f), *bias = rand_bf16(C, 1.0f, 0.0f);
            dev_buf dy = dev_act(g, y, n, shift), db = dev_act(g, bias, C, shift);
            ops_bias_forward(g, dy.p, db.p, N, C);
            float *got = get_act(g, dy.p, n);
            for (size_t i = 0; i < n; i++) y[i] = bf16_round(y[i] + bias[i % C]);
            double ef = max_abs_diff(got, y, n);
            worst_f = fmax(worst_f, ef);
            CHECK(ef == 0.0, "bias_forward N=%d C=%d shift=%d: max diff %.3g (must be exact)", N, C, shift, ef);

            /* Backward, accumulating onto a non-zero dbias. */
            float *dy_h = rand_bf16(n, 1.0f, 0.0f), *acc0 = rand_normal(C, 1.0f, 0.0f);
            dev_buf ddy = dev_act(g, dy_h, n, shift), ddb = dev_f32(g, acc0, C, 0);
            ops_bias_backward(g, ddb.p, ddy.p, N, C);
            float *gb = get_f32(g, ddb.p, C);
            float *want = copy_f32(acc0, C);
            ops_bias_backward(&p->cpu, want, dy_h, N, C);
            double scale = 0.0;
            for (int c = 0; c < C; c++) {
                double col = fabs(acc0[c]);
                for (int r = 0; r < N; r++) col += fabs(dy_h[(size_t)r * C + c]);
                scale = fmax(scale, col);
            }
            double r = tol_ratio(gb, want, C, 1e-5 * scale, 0.0);
            worst_b = fmax(worst_b, r);
            CHECK(r <= 1.0, "bias_backward N=%d C=%d shift=%d: tolerance ratio %.3g", N, C, shift, r);
            /* Deterministic: the same inputs give the same bits. */
            ops_upload(g, ddb.p, acc0, C * sizeof(float));
            ops_bias_backward(g, ddb.p, ddy.p, N, C);
            float *gb2 = get_f32(g, ddb.p, C);
            CHECK(bits_equal(gb, gb2, C), "bias_backward N=%d C=%d: two runs differ", N, C);
            dev_free(g, &dy), dev_free(g, &db), dev_free(g, &ddy), dev_free(g, &ddb);
            free(y), free(bias), free(got), free(dy_h), free(acc0), free(gb), free(want), free(gb2);
        }
    printf("bias: forward exact (max diff %.3g), backward worst tolerance ratio %.3g, repeat bit-identical\n",
           worst_f, worst_b);
}

/* A product whose pinned choice is out of range, run in a child that
 * aborts before any launch. */
typedef struct {
    ops_ctx *g;
    void *c, *a, *b;
    int M, N, K;
} tuning_case;

static void bad_gemv_grid(void *arg) {
    tuning_case *t = arg;
    t->g->tuning.gemv_residency = -2;
    ops_matmul(t->g, t->c, 0, t->a, t->b, t->M, t->N, t->K, 0, 1, 1.0f, 0.0f);
}

static void bad_skinny_splits(void *arg) {
    tuning_case *t = arg;
    t->g->tuning.skinny_splits = -1;
    ops_matmul(t->g, t->c, 0, t->a, t->b, t->M, t->N, t->K, 0, 1, 1.0f, 0.0f);
}

static void bad_skinny_use(void *arg) {
    tuning_case *t = arg;
    t->g->tuning.skinny_use = 3;
    ops_matmul(t->g, t->c, 0, t->a, t->b, t->M, t->N, t->K, 0, 1, 1.0f, 0.0f);
}

static void bad_skinny_bn(void *arg) {
    tuning_case *t = arg;
    t->g->tuning.skinny_use = 1; /* the mma.sync kernel, which has no 96-column block */
    t->g->tuning.skinny_bn = 96;
    ops_matmul(t->g, t->c, 0, t->a, t->b, t->M, t->N, t->K, 0, 1, 1.0f, 0.0f);
}

static void bad_skinny_wgmma_bn(void *arg) {
    tuning_case *t = arg;
    t->g->tuning.skinny_use = 2;
    t->g->tuning.skinny_bn = 80;
    ops_matmul(t->g, t->c, 0, t->a, t->b, t->M, t->N, t->K, 0, 1, 1.0f, 0.0f);
}

static void check_tuning_errors(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    const int N = 64, K = 4096; /* K > 2 (M + N): the skinny kernel's shapes at 16 rows */
    tuning_case t = {g, ops_alloc(g, (size_t)16 * N * 2), ops_alloc(g, (size_t)16 * K * 2),
                     ops_alloc(g, (size_t)N * K * 2), 1, N, K};
    CHECK(expect_abort("gemv_residency -2", bad_gemv_grid, &t, "ops_tuning.gemv_residency"),
          "a few-row product with gemv_residency = -2 must abort naming the field");
    t.M = 16;
    CHECK(expect_abort("skinny_splits -1", bad_skinny_splits, &t, "ops_tuning.skinny_splits"),
          "a skinny product with skinny_splits = -1 must abort naming the field");
    CHECK(expect_abort("skinny_bn 96", bad_skinny_bn, &t, "ops_tuning.skinny_bn"),
          "a skinny product with skinny_bn = 96 must abort naming the field");
    CHECK(expect_abort("skinny_use 3", bad_skinny_use, &t, "ops_tuning.skinny_use"),
          "a product with skinny_use = 3 must abort naming the field");
    CHECK(expect_abort("skinny_bn 80 on wgmma", bad_skinny_wgmma_bn, &t, "ops_tuning.skinny_bn"),
          "a wgmma skinny product with skinny_bn = 80 must abort naming the field");
    ops_free(g, t.c), ops_free(g, t.a), ops_free(g, t.b);
}

/* ops_matmul_residual, C = A W^T + R, against the CPU backend, out of
 * place (R left as it was) and in place (C is R), on each of its paths:
 * cuBLASLt reading R beside its output (M past the few-row kernels, large
 * and small outputs), the fp32 detour of a long K (R staged in fp32), and
 * the copy-then-in-place few-row kernels (8 rows: gemv, 40: skinny). R is
 * of the product's order, so sums that cancel show whether the product was
 * rounded before R was added. Out of place: the product tolerance above,
 * relative to the sum (rounded once). In place cuBLASLt rounds the product
 * to bf16 first (measured on an H100: 8 to 10 times the sum's tolerance
 * where sums cancel, the same as ops_matmul with beta = 1 in place), so
 * there the bound adds half a bf16 ulp of the product: 2^-8 |A W^T|. */
static void check_residual(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    const int shapes[][3] = {{2100, 2048, 256}, {777, 6000, 320}, {100, 96, 72},
                             {100, 96, 5000}, {8, 2048, 1024},    {40, 1024, 6144}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const size_t na = (size_t)M * K, nw = (size_t)N * K, nc = (size_t)M * N;
        const float rs = sqrtf((float)K); /* R of the product's order */
        float *a = rand_bf16(na, 1.0f, 0.0f), *w = rand_bf16(nw, 1.0f, 0.0f), *r = rand_bf16(nc, rs, 0.0f);
        dev_buf da = dev_act(g, a, na, 0), dw = dev_act(g, w, nw, 0), dr = dev_act(g, r, nc, 0);
        dev_buf dc = dev_act(g, r, nc, 0), dref = dev_act(g, r, nc, 0);
        ops_zero(g, dc.p, nc * 2);
        ops_matmul_residual(g, dc.p, da.p, dw.p, dr.p, M, N, K);
        ops_matmul(g, dref.p, 0, da.p, dw.p, M, N, K, 0, 1, 1.0f, 1.0f);
        float *want = copy_f32(r, nc);
        ops_matmul_residual(&p->cpu, want, a, w, r, M, N, K);
        float *got = get_act(g, dc.p, nc), *ref = get_act(g, dref.p, nc), *r_after = get_act(g, dr.p, nc);
        const double scale = max_abs(want, nc) > 0 ? max_abs(want, nc) : 1.0;
        const double tr = tol_ratio(got, want, nc, 1e-4 * scale, 1.0 / 256.0);
        const double tm = tol_ratio(ref, want, nc, 1e-4 * scale, 1.0 / 256.0);
        CHECK(tr <= 1.0, "matmul_residual M=%d N=%d K=%d: tolerance ratio %.3g", M, N, K, tr);
        CHECK(memcmp(r_after, r, nc * sizeof(float)) == 0, "matmul_residual M=%d N=%d K=%d changed R", M, N, K);
        ops_matmul_residual(g, dr.p, da.p, dw.p, dr.p, M, N, K); /* in place */
        float *inplace = get_act(g, dr.p, nc);
        const double ti = tol_ratio(inplace, want, nc, 1e-4 * scale, 1.0 / 256.0);
        double tp = 0.0; /* in place against the bound with the product's own rounding */
        for (size_t i = 0; i < nc; i++) {
            const double bound = 1e-4 * scale + (fabs((double)want[i]) + fabs((double)want[i] - r[i])) / 256.0;
            tp = fmax(tp, fabs((double)inplace[i] - want[i]) / bound);
        }
        CHECK(tp <= 1.0, "matmul_residual M=%d N=%d K=%d in place: %.3g of the bound with the product rounded", M, N,
              K, tp);
        printf("  matmul_residual M=%5d N=%5d K=%5d: tolerance ratio %.3f; in place %.3f (%.3f of the bound with "
               "the product rounded; ops_matmul beta 1 in place %.3f)\n",
               M, N, K, tr, ti, tp, tm);
        dev_free(g, &da), dev_free(g, &dw), dev_free(g, &dr), dev_free(g, &dc), dev_free(g, &dref);
        free(a), free(w), free(r), free(want), free(got), free(ref), free(r_after), free(inplace);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a test stopped by a timeout keeps its progress lines */
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(5);
    check_matmul(&p);
    check_residual(&p);
    check_bias(&p);
    check_tuning_errors(&p);
    pair_free(&p);
    return test_finish("test_cuda_matmul");
}
