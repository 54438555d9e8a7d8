/* test_cuda_norm.c: RMSNorm and LayerNorm forward and backward on the CUDA
 * backend against the CPU backend on the same bf16-valued inputs, at row
 * lengths that reach every kernel configuration: one thread per row with 1
 * or 3 vectors (C = 8, 24), teams of 2 and 4 (C = 64, and 128: Qwen3's
 * per-head q/k norm), a warp with 4 vectors a lane, some empty (C = 896,
 * 1000, 1024), two warps (2048), 256 threads with 3 vectors each (5120), 512
 * threads (16384), and the scalar path (C not a multiple of 8, C = 20000,
 * unaligned buffers).
 * Checks the contract of ops.h: dx overwritten, dw and db accumulated, dx
 * may be the dout buffer, or (RMSNorm, accumulate 1) dx added into what the
 * buffer held; db may be NULL; LayerNorm's b may be NULL. The
 * backward run twice gives the same bits (the weight gradients are reduced
 * in a fixed order, without atomics).
 *
 * Tolerances (per element, scale = max |cpu|):
 * - out, dx (bf16): rounding to bf16 is within 2^-8 relative; the fp32 row
 *   statistics differ from the CPU's double ones by ~1e-6 relative, so
 *   |gpu - cpu| <= 2^-8 |cpu| + 1e-4 scale;
 * - rstd, mean (fp32): 3e-5 relative (fp32 sums of up to 625 terms per
 *   thread over C <= 20000, against the CPU's double);
 * - dw, db (fp32): sums over N rows in fp32 against the CPU's double:
 *   1e-5 of the column's sum of |terms|. */
#include "tests/gpu/test_cuda_common.h"

static double worst_out, worst_stat, worst_dx, worst_dw;

/* inplace: 0 dx a buffer of its own, 1 dx over dout, 2 (RMSNorm) dx a
 * buffer of its own holding old values, which the backward adds into
 * (accumulate 1). */
static void run_norm(ctx_pair *p, int ln, int N, int C, int shift, int with_b, float offset, int inplace) {
    ops_ctx *g = &p->gpu, *cpu = &p->cpu;
    const char *name = ln ? "layernorm" : "rmsnorm";
    const size_t n = (size_t)N * C;
    const float eps = 1e-5f;
    float *x = rand_bf16(n, 1.0f, offset), *w = rand_bf16(C, 0.3f, 1.0f);
    float *b = with_b ? rand_bf16(C, 0.5f, 0.0f) : NULL;
    dev_buf dx_in = dev_act(g, x, n, shift), dw_in = dev_act(g, w, C, shift);
    dev_buf db_in = dev_act(g, b, with_b ? C : 0, shift);
    dev_buf dout = dev_act(g, NULL, n, shift), dmean = dev_f32(g, NULL, N, 0), drstd = dev_f32(g, NULL, N, 0);

    /* forward */
    float *out = dk_malloc(n * sizeof(float)), *mean = dk_malloc(N * sizeof(float)), *rstd = dk_malloc(N * sizeof(float));
    if (ln) {
        ops_layernorm_forward(g, dout.p, dmean.p, drstd.p, dx_in.p, dw_in.p, with_b ? db_in.p : NULL, N, C, eps);
        ops_layernorm_forward(cpu, out, mean, rstd, x, w, b, N, C, eps);
    } else {
        ops_rmsnorm_forward(g, dout.p, drstd.p, dx_in.p, dw_in.p, N, C, eps);
        ops_rmsnorm_forward(cpu, out, rstd, x, w, N, C, eps);
    }
    float *g_out = get_act(g, dout.p, n), *g_rstd = get_f32(g, drstd.p, N);
    double eo = tol_ratio(g_out, out, n, 1e-4 * max_abs(out, n), 1.0 / 256.0);
    double es = tol_ratio(g_rstd, rstd, N, 0.0, 3e-5);
    if (ln) {
        float *g_mean = get_f32(g, dmean.p, N);
        es = fmax(es, tol_ratio(g_mean, mean, N, 1e-5 * (fabs(offset) + 1.0), 3e-5));
        free(g_mean);
    }
    CHECK(eo <= 1.0 && es <= 1.0, "%s forward N=%d C=%d shift=%d: out ratio %.3g, stats ratio %.3g", name, N, C,
          shift, eo, es);
    worst_out = fmax(worst_out, eo), worst_stat = fmax(worst_stat, es);

    /* backward from the CPU's statistics, so the two backwards see the same
     * inputs; dw and db start non-zero (they accumulate) */
    float *gy = rand_bf16(n, 1.0f, 0.0f), *dw0 = rand_normal(C, 1.0f, 0.0f), *db0 = rand_normal(C, 1.0f, 0.0f);
    ops_upload(g, drstd.p, rstd, N * sizeof(float));
    ops_upload(g, dmean.p, mean, N * sizeof(float));
    dev_buf dgy = dev_act(g, gy, n, shift), ddw = dev_f32(g, dw0, C, 0), ddb = dev_f32(g, db0, C, 0);
    const int acc = inplace == 2;
    float *old = acc ? rand_bf16(n, 1.0f, 0.0f) : NULL;
    dev_buf ddx = inplace == 1 ? dgy : dev_act(g, old, n, shift);
    float *dx = acc ? copy_f32(old, n) : rand_normal(n, 1e3f, 0.0f), *dw = copy_f32(dw0, C), *db = copy_f32(db0, C);
    float *g_dx[2], *g_dw[2], *g_db[2];
    for (int rep = 0; rep < 2; rep++) {
        if (rep) { /* restore the inputs the first run changed */
            ops_upload_act(g, dgy.p, gy, n);
            ops_upload(g, ddw.p, dw0, C * sizeof(float));
            ops_upload(g, ddb.p, db0, C * sizeof(float));
            if (acc) ops_upload_act(g, ddx.p, old, n);
        }
        if (ln)
            ops_layernorm_backward(g, ddx.p, ddw.p, with_b ? ddb.p : NULL, dgy.p, dx_in.p, dw_in.p, dmean.p, drstd.p,
                                   N, C);
        else
            ops_rmsnorm_backward(g, ddx.p, ddw.p, dgy.p, dx_in.p, dw_in.p, drstd.p, N, C, acc);
        g_dx[rep] = get_act(g, ddx.p, n);
        g_dw[rep] = get_f32(g, ddw.p, C);
        g_db[rep] = get_f32(g, ddb.p, C);
    }
    if (ln) ops_layernorm_backward(cpu, dx, dw, with_b ? db : NULL, gy, x, w, mean, rstd, N, C);
    else ops_rmsnorm_backward(cpu, dx, dw, gy, x, w, rstd, N, C, acc);

    double edx = tol_ratio(g_dx[0], dx, n, 1e-4 * max_abs(dx, n), 1.0 / 256.0);
    /* Column scales of the weight-gradient sums. */
    double sw = 0.0, sb = 0.0;
    for (int c = 0; c < C; c++) {
        double aw = fabs(dw0[c]), ab = fabs(db0[c]);
        for (int r = 0; r < N; r++) {
            double gv = gy[(size_t)r * C + c], xv = x[(size_t)r * C + c];
            aw += fabs(gv * (xv - (ln ? mean[r] : 0.0f)) * rstd[r]);
            ab += fabs(gv);
        }
        sw = fmax(sw, aw), sb = fmax(sb, ab);
    }
    double edw = tol_ratio(g_dw[0], dw, C, 1e-5 * sw, 0.0);
    double edb = with_b ? tol_ratio(g_db[0], db, C, 1e-5 * sb, 0.0) : 0.0;
    CHECK(edx <= 1.0 && edw <= 1.0 && edb <= 1.0,
          "%s backward N=%d C=%d shift=%d inplace=%d: dx ratio %.3g, dw ratio %.3g, db ratio %.3g", name, N, C, shift,
          inplace, edx, edw, edb);
    if (ln && !with_b) CHECK(bits_equal(g_db[0], db0, C), "%s backward: db changed although NULL was passed", name);
    CHECK(bits_equal(g_dx[0], g_dx[1], n) && bits_equal(g_dw[0], g_dw[1], C) && bits_equal(g_db[0], g_db[1], C),
          "%s backward N=%d C=%d: two runs differ", name, N, C);
    worst_dx = fmax(worst_dx, edx), worst_dw = fmax(worst_dw, fmax(edw, edb));

    if (inplace != 1) dev_free(g, &ddx);
    dev_free(g, &dx_in), dev_free(g, &dw_in), dev_free(g, &db_in), dev_free(g, &dout), dev_free(g, &dmean);
    dev_free(g, &drstd), dev_free(g, &dgy), dev_free(g, &ddw), dev_free(g, &ddb);
    for (int rep = 0; rep < 2; rep++) free(g_dx[rep]), free(g_dw[rep]), free(g_db[rep]);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(g_out), free(g_rstd);
    free(gy), free(dw0), free(db0), free(dx), free(dw), free(db), free(old);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(3);
    const int shapes[][2] = {{1, 8},     {3, 24},     {5, 37},    {7, 100},  {1000, 128}, {4096, 128},
                             {257, 896}, {300, 1024}, {33, 2048}, {19, 5120}, {9, 16384}, {3, 20000},
                             {2000, 64}, {11, 1000}};
    const int nshapes = sizeof shapes / sizeof shapes[0];
    for (int s = 0; s < nshapes; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        for (int shift = 0; shift < 2; shift++) {
            run_norm(&p, 0, N, C, shift, 0, 0.0f, 0);
            run_norm(&p, 1, N, C, shift, 1, 3.0f, 0);
            run_norm(&p, 1, N, C, shift, 0, -1.0f, 0);
        }
        run_norm(&p, 0, N, C, 0, 0, 0.0f, 1); /* dx written over dout */
        run_norm(&p, 0, N, C, shapes[s][0] % 2, 0, 0.0f, 2); /* dx added into the residual's gradient */
        run_norm(&p, 1, N, C, 0, 1, 0.5f, 1);
    }
    printf("norms over %d shapes: worst tolerance ratios out %.3g, rstd/mean %.3g, dx %.3g, dw/db %.3g "
           "(<= 1 passes); repeated backward bit-identical\n",
           nshapes, worst_out, worst_stat, worst_dx, worst_dw);
    pair_free(&p);
    return test_finish("test_cuda_norm");
}
