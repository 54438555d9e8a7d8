/* test_cuda_rope_swiglu.c: RoPE and SwiGLU, forward and backward, on the
 * CUDA backend against the CPU backend on the same bf16-valued inputs.
 * - RoPE on x[T, H, D] in place: head dims 128 and 64 (the vector path),
 *   48 (D/2 = 24, vector path with 3 vectors), 12 and 6 (scalar path), an
 *   unaligned buffer (scalar path), H = 1..5, packed sequences with
 *   positions restarting at 0 and positions up to 32767, theta 1e4 and 1e6;
 *   the backward is the inverse rotation.
 * - SwiGLU on gu[N, 2 * inter]: inter a multiple of 8 (vector path) and not
 *   (scalar path), gates up to |g| = 30 (saturated sigmoid), the backward's
 *   dgate and dup halves.
 *
 * Tolerances (per element, scale = max |cpu|): the outputs are bf16, within
 * 2^-8 relative of the exact value; the fp32 math (sincosf against the CPU's
 * double cos/sin rounded to fp32, expf) adds a few fp32 ulps:
 * |gpu - cpu| <= 2^-8 |cpu| + 1e-5 scale. RoPE's angle is the same fp32
 * product on both backends, so large positions do not widen the gap. */
#include "tests/gpu/test_cuda_common.h"

static double worst_rope, worst_swiglu;

static void run_rope(ctx_pair *p, int T, int H, int D, float theta, int shift, int max_pos) {
    ops_ctx *g = &p->gpu;
    size_t n = (size_t)T * H * D;
    int32_t *pos = dk_malloc((size_t)T * sizeof(int32_t));
    /* Packed sequences of random lengths; one far position range. */
    int t = 0, start = max_pos > 1000 ? max_pos - T : 0;
    while (t < T) {
        int len = 1 + (int)(rng_next() % 40);
        for (int i = 0; i < len && t < T; i++, t++) pos[t] = start + i;
        start = max_pos > 1000 ? start + len : 0;
    }
    dev_buf dpos = dev_i32(g, pos, T);
    for (int dir = 0; dir < 2; dir++) {
        float *x = rand_bf16(n, 1.0f, 0.0f);
        dev_buf dx = dev_act(g, x, n, shift);
        if (dir == 0) {
            ops_rope_forward(g, dx.p, dpos.p, T, H, D, theta);
            ops_rope_forward(&p->cpu, x, pos, T, H, D, theta);
        } else {
            ops_rope_backward(g, dx.p, dpos.p, T, H, D, theta);
            ops_rope_backward(&p->cpu, x, pos, T, H, D, theta);
        }
        float *got = get_act(g, dx.p, n);
        double r = tol_ratio(got, x, n, 1e-5 * max_abs(x, n), 1.0 / 256.0);
        worst_rope = fmax(worst_rope, r);
        CHECK(r <= 1.0, "rope %s T=%d H=%d D=%d theta=%g shift=%d max_pos=%d: tolerance ratio %.3g",
              dir ? "backward" : "forward", T, H, D, theta, shift, max_pos, r);
        dev_free(g, &dx);
        free(x), free(got);
    }
    dev_free(g, &dpos);
    free(pos);
}

static void run_swiglu(ctx_pair *p, int N, int inter, int shift, float gscale) {
    ops_ctx *g = &p->gpu;
    size_t n = (size_t)N * inter;
    float *gu = rand_bf16(2 * n, 1.0f, 0.0f);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < inter; i++) {
            float *v = &gu[(size_t)r * 2 * inter + i];
            *v = bf16_round(*v * gscale);
        }
    float *dout = rand_bf16(n, 1.0f, 0.0f);
    dev_buf dgu = dev_act(g, gu, 2 * n, shift), dout_d = dev_act(g, dout, n, shift);
    dev_buf dout_fwd = dev_act(g, NULL, n, shift), ddgu = dev_act(g, NULL, 2 * n, shift);
    ops_swiglu_forward(g, dout_fwd.p, dgu.p, N, inter);
    ops_swiglu_backward(g, ddgu.p, dout_d.p, dgu.p, N, inter);
    float *out = dk_malloc(n * sizeof(float)), *dref = dk_malloc(2 * n * sizeof(float));
    ops_swiglu_forward(&p->cpu, out, gu, N, inter);
    ops_swiglu_backward(&p->cpu, dref, dout, gu, N, inter);
    float *g_out = get_act(g, dout_fwd.p, n), *g_d = get_act(g, ddgu.p, 2 * n);
    double r1 = tol_ratio(g_out, out, n, 1e-5 * max_abs(out, n), 1.0 / 256.0);
    double r2 = tol_ratio(g_d, dref, 2 * n, 1e-5 * max_abs(dref, 2 * n), 1.0 / 256.0);
    worst_swiglu = fmax(worst_swiglu, fmax(r1, r2));
    CHECK(r1 <= 1.0 && r2 <= 1.0, "swiglu N=%d inter=%d shift=%d gscale=%g: forward ratio %.3g, backward %.3g", N,
          inter, shift, gscale, r1, r2);
    dev_free(g, &dgu), dev_free(g, &dout_d), dev_free(g, &dout_fwd), dev_free(g, &ddgu);
    free(gu), free(dout), free(out), free(dref), free(g_out), free(g_d);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(7);
    const int rope_shapes[][3] = {{1, 1, 128}, {97, 4, 128}, {300, 5, 64}, {64, 3, 48}, {50, 2, 12}, {33, 1, 6},
                                  {2048, 2, 128}};
    for (size_t s = 0; s < sizeof rope_shapes / sizeof rope_shapes[0]; s++)
        for (int shift = 0; shift < 2; shift++) {
            const int *q = rope_shapes[s];
            run_rope(&p, q[0], q[1], q[2], 10000.0f, shift, 0);
            run_rope(&p, q[0], q[1], q[2], 1000000.0f, shift, 32767);
        }
    printf("rope: worst tolerance ratio %.3g (<= 1 passes)\n", worst_rope);

    const int sw_shapes[][2] = {{1, 8}, {7, 13}, {33, 64}, {1000, 512}, {5, 1000}, {257, 2816}};
    for (size_t s = 0; s < sizeof sw_shapes / sizeof sw_shapes[0]; s++)
        for (int shift = 0; shift < 2; shift++) {
            run_swiglu(&p, sw_shapes[s][0], sw_shapes[s][1], shift, 1.0f);
            run_swiglu(&p, sw_shapes[s][0], sw_shapes[s][1], shift, 12.0f);
        }
    printf("swiglu: worst tolerance ratio %.3g (<= 1 passes)\n", worst_swiglu);
    pair_free(&p);
    return test_finish("test_cuda_rope_swiglu");
}
