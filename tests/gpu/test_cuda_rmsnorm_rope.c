/* test_cuda_rmsnorm_rope.c: ops_rmsnorm_rope_forward / _backward (Qwen3's
 * q/k norm and rotation in one pass) on the CUDA backend, against two
 * references:
 * - the ops in turn on the CUDA backend (ops_rmsnorm_forward then
 *   ops_rope_forward; ops_rope_backward then ops_rmsnorm_backward): the
 *   one-pass kernels round where those ops store, and keep their grids and
 *   reductions, so out, rstd, dx and the accumulated dw must be the same
 *   bits;
 * - the CPU backend (fp32 throughout): out within two bf16 units plus one
 *   unit of the largest value (the CUDA ops round the normalised row before
 *   the rotation, which may cancel), rstd within 3e-5, dx within one unit
 *   plus one unit of the largest (the rotated-back gradient is rounded
 *   before the norm's backward, whose two terms are of that size), dw
 *   within one unit of the largest.
 * Head dims 128 (Qwen3: teams of 4 forward, 8 backward), 64, 256, 32 and
 * 16 take the one-pass kernels; 96 (3 vectors a lane) and 12 (not a
 * multiple of 8), and unaligned buffers, the ops in turn, which the same
 * checks hold. T from 1 to 4096 with positions restarting per packed
 * sequence, or far ones up to 32767 at theta 1e6. */
#include "tests/gpu/test_cuda_common.h"

static double worst_cpu_out, worst_cpu_dx, worst_cpu_dw;

static int32_t *positions(int T, int far) {
    int32_t *pos = dk_malloc((size_t)T * sizeof(int32_t));
    int t = 0, start = far ? 32767 - T : 0;
    while (t < T) {
        int len = 1 + (int)(rng_next() % 300);
        for (int i = 0; i < len && t < T; i++, t++) pos[t] = start + i;
        start = far ? start + len : 0;
    }
    return pos;
}

static void run(ctx_pair *p, int T, int H, int D, int far, int shift) {
    ops_ctx *g = &p->gpu, *c = &p->cpu;
    const float theta = far ? 1000000.0f : 10000.0f, eps = 1e-6f;
    const size_t n = (size_t)T * H * D, N = (size_t)T * H;
    int32_t *pos = positions(T, far);
    float *x = rand_bf16(n, 1.0f, 0.1f), *w = rand_bf16(D, 0.3f, 1.0f), *dy = rand_bf16(n, 1.0f, 0.0f);
    float *dw0 = rand_normal((size_t)D, 1.0f, 0.0f); /* the gradient accumulates (+=) onto these */
    dev_buf dpos = dev_i32(g, pos, T), gx = dev_act(g, x, n, shift), gw = dev_act(g, w, D, 0);

    /* Forward: one pass, and the ops in turn. */
    dev_buf o1 = dev_act(g, NULL, n, shift), o2 = dev_act(g, NULL, n, shift);
    dev_buf r1 = dev_f32(g, NULL, N, 0), r2 = dev_f32(g, NULL, N, 0);
    ops_rmsnorm_rope_forward(g, o1.p, r1.p, gx.p, gw.p, dpos.p, T, H, D, eps, theta);
    ops_rmsnorm_forward(g, o2.p, r2.p, gx.p, gw.p, (int)N, D, eps);
    ops_rope_forward(g, o2.p, dpos.p, T, H, D, theta);
    float *go1 = get_act(g, o1.p, n), *go2 = get_act(g, o2.p, n);
    float *gr1 = get_f32(g, r1.p, N), *gr2 = get_f32(g, r2.p, N);
    CHECK(bits_equal(go1, go2, n) && bits_equal(gr1, gr2, N),
          "forward T=%d H=%d D=%d far=%d shift=%d: one pass and the ops in turn differ", T, H, D, far, shift);
    float *co = dk_malloc(n * sizeof(float)), *cr = dk_malloc(N * sizeof(float));
    ops_rmsnorm_rope_forward(c, co, cr, x, w, pos, T, H, D, eps, theta);
    double ro = tol_ratio(go1, co, n, BF16_ULP * max_abs(co, n), 2 * BF16_ULP), rr = tol_ratio(gr1, cr, N, 0.0, 3e-5);
    worst_cpu_out = fmax(worst_cpu_out, fmax(ro, rr));
    CHECK(ro <= 1.0 && rr <= 1.0, "forward vs CPU T=%d H=%d D=%d far=%d shift=%d: out ratio %.3g, rstd ratio %.3g", T,
          H, D, far, shift, ro, rr);

    /* Backward: one pass, and the ops in turn (each on its own copy of the
     * incoming gradient, which either may overwrite). */
    dev_buf g1 = dev_act(g, dy, n, shift), g2 = dev_act(g, dy, n, shift);
    dev_buf d1 = dev_act(g, NULL, n, shift), d2 = dev_act(g, NULL, n, shift);
    dev_buf w1 = dev_f32(g, dw0, D, 0), w2 = dev_f32(g, dw0, D, 0);
    ops_rmsnorm_rope_backward(g, d1.p, w1.p, g1.p, gx.p, gw.p, r1.p, dpos.p, T, H, D, theta);
    ops_rope_backward(g, g2.p, dpos.p, T, H, D, theta);
    ops_rmsnorm_backward(g, d2.p, w2.p, g2.p, gx.p, gw.p, r2.p, (int)N, D, 0);
    float *gd1 = get_act(g, d1.p, n), *gd2 = get_act(g, d2.p, n);
    float *gw1 = get_f32(g, w1.p, D), *gw2 = get_f32(g, w2.p, D);
    CHECK(bits_equal(gd1, gd2, n) && bits_equal(gw1, gw2, D),
          "backward T=%d H=%d D=%d far=%d shift=%d: one pass and the ops in turn differ", T, H, D, far, shift);
    float *cd = dk_malloc(n * sizeof(float)), *cw = copy_f32(dw0, D), *cdy = copy_f32(dy, n);
    ops_rmsnorm_rope_backward(c, cd, cw, cdy, x, w, cr, pos, T, H, D, theta);
    double rd = tol_ratio(gd1, cd, n, BF16_ULP * max_abs(cd, n), BF16_ULP);
    double rw = tol_ratio(gw1, cw, D, BF16_ULP * max_abs(cw, D), 0.0);
    worst_cpu_dx = fmax(worst_cpu_dx, rd), worst_cpu_dw = fmax(worst_cpu_dw, rw);
    CHECK(rd <= 1.0 && rw <= 1.0, "backward vs CPU T=%d H=%d D=%d far=%d shift=%d: dx ratio %.3g, dw ratio %.3g", T,
          H, D, far, shift, rd, rw);

    dev_free(g, &dpos), dev_free(g, &gx), dev_free(g, &gw), dev_free(g, &o1), dev_free(g, &o2);
    dev_free(g, &r1), dev_free(g, &r2), dev_free(g, &g1), dev_free(g, &g2), dev_free(g, &d1), dev_free(g, &d2);
    dev_free(g, &w1), dev_free(g, &w2);
    free(pos), free(x), free(w), free(dy), free(dw0), free(go1), free(go2), free(gr1), free(gr2), free(co), free(cr);
    free(gd1), free(gd2), free(gw1), free(gw2), free(cd), free(cw), free(cdy);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(5);
    const int shapes[][3] = {{1, 16, 128}, {97, 16, 128}, {4096, 8, 128}, {300, 5, 64}, {129, 8, 256},
                             {77, 3, 32},  {50, 2, 16},   {200, 4, 96},   {60, 3, 12}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int far = 0; far < 2; far++) run(&p, shapes[s][0], shapes[s][1], shapes[s][2], far, 0);
    run(&p, 97, 16, 128, 1, 1); /* unaligned: the ops in turn */
    printf("one pass = the ops in turn (bits); worst tolerance ratios against the CPU (<= 1 passes): forward %.3g, "
           "dx %.3g, dw %.3g\n",
           worst_cpu_out, worst_cpu_dx, worst_cpu_dw);
    pair_free(&p);
    return test_finish("test_cuda_rmsnorm_rope");
}
