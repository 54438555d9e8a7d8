/* test_cuda_embedding.c: token embedding forward and its deterministic
 * backward on the CUDA backend against the CPU backend.
 * - forward: an exact copy of table rows (no arithmetic), so exact;
 * - backward: dtable[ids[t]] += dout[t] accumulated onto a non-zero dtable,
 *   with vocabularies from 1 to 20000 tokens, so runs of one id range from
 *   single tokens to thousands (a run that crosses many of the sort's
 *   windows), T from 1 to 40000 (not powers of two: the sort's padding), row
 *   widths that take the vector path (C % 8 == 0, aligned) and the scalar
 *   path (C = 33, unaligned dout). Called twice from the same dtable it must
 *   give the same bits (the determinism the op promises), and ids the batch
 *   does not use must leave their rows untouched (bit-exact).
 *
 * Tolerances, with k the row's token count and m = |dtable0| + the sum of
 * |dout| over the row's tokens:
 * - against a float64 reference: the GPU adds runs of at most 32 tokens,
 *   then the runs' pieces, then adds once to dtable, all in fp32, so its
 *   error grows like sqrt(32 + k / 32) fp32 roundings of m: 3e-7 *
 *   sqrt(34 + k / 32) * m (a dropped or doubled token is ~m / k, 7x over
 *   this even at k = 20000);
 * - against the CPU op, which adds k terms one at a time in fp32: 1e-6 *
 *   (k + 1) * m. */
#include "tests/gpu/test_cuda_common.h"

static double worst_bwd;

static void run_case(ctx_pair *p, int T, int C, int V, int shift, int skew) {
    ops_ctx *g = &p->gpu;
    int32_t *ids = dk_malloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) {
        /* skew: one id takes about half the tokens (a padding-like run). */
        ids[t] = (skew && rng_next() % 2) ? V / 2 : (int32_t)(rng_next() % (uint64_t)V);
    }
    size_t nt = (size_t)V * C, no = (size_t)T * C;
    float *table = rand_bf16(nt, 1.0f, 0.0f);
    dev_buf dids = dev_i32(g, ids, T), dtab = dev_act(g, table, nt, shift), dout = dev_act(g, NULL, no, shift);
    ops_embedding_forward(g, dout.p, dids.p, dtab.p, T, C);
    float *out = dk_malloc(no * sizeof(float));
    ops_embedding_forward(&p->cpu, out, ids, table, T, C);
    float *g_out = get_act(g, dout.p, no);
    CHECK(bits_equal(g_out, out, no), "embedding forward T=%d C=%d V=%d shift=%d: not an exact copy", T, C, V, shift);

    float *gy = rand_bf16(no, 1.0f, 0.0f), *dt0 = rand_normal(nt, 1.0f, 0.0f);
    dev_buf dgy = dev_act(g, gy, no, shift), ddt = dev_f32(g, dt0, nt, 0);
    ops_embedding_backward(g, ddt.p, dgy.p, dids.p, T, C);
    float *got1 = get_f32(g, ddt.p, nt);
    ops_upload(g, ddt.p, dt0, nt * sizeof(float));
    ops_embedding_backward(g, ddt.p, dgy.p, dids.p, T, C);
    float *got2 = get_f32(g, ddt.p, nt);
    float *want = copy_f32(dt0, nt);
    ops_embedding_backward(&p->cpu, want, gy, ids, T, C);

    /* A float64 reference, the row's sum of magnitudes and its token count. */
    double *ref = dk_calloc(nt, sizeof(double)), *mag = dk_calloc(nt, sizeof(double));
    int *cnt = dk_calloc((size_t)V, sizeof(int));
    for (size_t i = 0; i < nt; i++) ref[i] = dt0[i], mag[i] = fabs(dt0[i]);
    for (int t = 0; t < T; t++) {
        cnt[ids[t]]++;
        for (int c = 0; c < C; c++) {
            ref[(size_t)ids[t] * C + c] += gy[(size_t)t * C + c];
            mag[(size_t)ids[t] * C + c] += fabs(gy[(size_t)t * C + c]);
        }
    }
    double worst = 0.0, worst_cpu = 0.0;
    int untouched_ok = 1;
    for (size_t i = 0; i < nt; i++) {
        int k = cnt[i / C];
        /* GPU: runs of <= 32 tokens, then their pieces, then one add. */
        double tol_gpu = 3e-7 * sqrt(34.0 + k / 32.0) * mag[i] + 1e-30;
        double q = fabs((double)got1[i] - ref[i]) / tol_gpu;
        if (!(q <= worst)) worst = q;
        /* Against the CPU op, whose sequential sum may be off by more. */
        double q2 = fabs((double)got1[i] - want[i]) / (1e-6 * (k + 1.0) * mag[i] + 1e-30);
        if (!(q2 <= worst_cpu)) worst_cpu = q2;
        if (!k && memcmp(&got1[i], &dt0[i], sizeof(float)) != 0) untouched_ok = 0;
    }
    worst = fmax(worst, worst_cpu);
    worst_bwd = fmax(worst_bwd, worst);
    CHECK(worst <= 1.0, "embedding backward T=%d C=%d V=%d shift=%d skew=%d: tolerance ratio %.3g", T, C, V, shift,
          skew, worst);
    CHECK(untouched_ok, "embedding backward T=%d C=%d V=%d: rows of unused ids changed", T, C, V);
    CHECK(bits_equal(got1, got2, nt), "embedding backward T=%d C=%d V=%d: two runs differ", T, C, V);

    dev_free(g, &dids), dev_free(g, &dtab), dev_free(g, &dout), dev_free(g, &dgy), dev_free(g, &ddt);
    free(ids), free(table), free(out), free(g_out), free(gy), free(dt0), free(got1), free(got2), free(want);
    free(ref), free(mag), free(cnt);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(9);
    const int cases[][3] = {{1, 8, 1},     {5, 16, 3},      {100, 64, 1},    {1000, 64, 7},  {4097, 128, 3},
                            {3000, 33, 50}, {40000, 64, 2},  {12345, 256, 1000}, {20000, 1024, 20000},
                            {777, 1024, 151}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
        for (int shift = 0; shift < 2; shift++)
            for (int skew = 0; skew < 2; skew++) run_case(&p, cases[s][0], cases[s][1], cases[s][2], shift, skew);
    printf("embedding: forward exact; backward worst tolerance ratio %.3g (<= 1 passes), repeat bit-identical, "
           "unused rows untouched\n",
           worst_bwd);
    pair_free(&p);
    return test_finish("test_cuda_embedding");
}
