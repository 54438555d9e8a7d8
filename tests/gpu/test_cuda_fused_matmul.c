/* test_cuda_fused_matmul.c: ops_rmsnorm_matmul and ops_rmsnorm_matmul_swiglu
 * on the CUDA backend, at 1..8 rows (the fused few-row kernel) and above
 * (the ops in turn). ops_rmsnorm_matmul against
 * - the CPU backend (fp32 throughout): the GPU rounds the transformed rows
 *   to bf16 (2^-9 relative per element) before the product and its output
 *   to bf16: |gpu - cpu| <= 2e-3 * scale + 2^-7 |cpu|, scale = max |cpu|;
 * - the unfused GPU ops run in turn (ops_rmsnorm_forward, then ops_matmul),
 *   which round at the same places:
 *   they differ by summation order, and where that order flips the rounding
 *   of one transformed element, by one of its ulps:
 *   |fused - unfused| <= 2e-4 * scale + 2^-8 |unfused|.
 * Both output a bf16 C with alpha and beta (beta = 1 as a residual add
 * would), and an fp32 C (the lm head's logits) at the same tolerances. ops_rmsnorm_matmul_swiglu against the CPU backend (its SwiGLU of
 * the bf16-rounded product: 2e-3 * scale + 2^-6 |cpu|) and, bit for bit,
 * against ops_rmsnorm_matmul then ops_swiglu_forward on the GPU: its
 * kernel streams the gate and up rows in the order the plain kernel does
 * and rounds where the two ops round (above 8 rows both on the wgmma
 * skinny kernel, ops_tuning.skinny_use 2, which on sm_90 computes gate|up
 * and the SwiGLU in one launch; the default choice against the CPU too). Both fused ops also run under two
 * more grids (a block for every group of columns; the smallest, each warp
 * walking many columns), which must give the same bits. Exits 77 without
 * a GPU. */
#include "tests/expect_abort.h"
#include "tests/gpu/test_cuda_common.h"

/* The grids a fused op runs under after the chosen one (gemv_common.cuh). */
static const int other_grids[] = {-1, 64};

static double worst_cpu = 0.0, worst_gpu = 0.0;
static int cases = 0;

/* The output C as fp32 host values, from bf16 (act) or fp32 device memory. */
static float *get_out(ops_ctx *g, const void *c, size_t n, int f32) {
    if (!f32) return get_act(g, c, n);
    float *h = dk_malloc(n * sizeof(float));
    ops_download(g, h, c, n * sizeof(float));
    return h;
}

/* C's starting values c0 into the device buffer c (bf16 or fp32). */
static void put_out(ops_ctx *g, void *c, const float *c0, size_t n, int f32) {
    if (f32) ops_upload(g, c, c0, n * sizeof(float));
    else ops_upload_act(g, c, c0, n);
}

static void check_case(ctx_pair *p, int M, int N, int K, float beta, int f32) {
    ops_ctx *g = &p->gpu;
    const size_t nin = (size_t)M * K, nout = (size_t)M * N, osz = f32 ? sizeof(float) : 2;
    float *x = rand_bf16(nin, 1.0f, 0.0f), *nw = rand_bf16((size_t)K, 0.3f, 1.0f);
    float *w = rand_bf16((size_t)N * K, 0.05f, 0.0f), *c0 = rand_bf16(nout, 1.0f, 0.0f);
    dev_buf dx = dev_act(g, x, nin, 0), dnw = dev_act(g, nw, K, 0), dw = dev_act(g, w, (size_t)N * K, 0);
    void *dc = ops_alloc(g, nout * osz), *du = ops_alloc(g, nout * osz);
    put_out(g, dc, c0, nout, f32), put_out(g, du, c0, nout, f32);
    void *tmp = ops_alloc(g, (size_t)M * K * 2);
    float *want = copy_f32(c0, nout), *tmp_c = dk_malloc((size_t)M * K * sizeof(float));
    const float alpha = 1.0f, eps = 1e-6f;
    ops_rmsnorm_matmul(g, dc, f32, tmp, dx.p, dnw.p, dw.p, M, N, K, eps, alpha, beta);
    ops_rmsnorm_matmul(&p->cpu, want, 1, tmp_c, x, nw, w, M, N, K, eps, alpha, beta);
    float *rstd = ops_alloc(g, (size_t)M * sizeof(float));
    ops_rmsnorm_forward(g, tmp, rstd, dx.p, dnw.p, M, K, eps);
    ops_free(g, rstd);
    ops_matmul(g, du, f32, tmp, dw.p, M, N, K, 0, 1, alpha, beta);
    float *got = get_out(g, dc, nout, f32), *unf = get_out(g, du, nout, f32);
    for (int i = 0; i < 2; i++) {
        g->tuning.gemv_residency = other_grids[i];
        put_out(g, dc, c0, nout, f32);
        ops_rmsnorm_matmul(g, dc, f32, tmp, dx.p, dnw.p, dw.p, M, N, K, eps, alpha, beta);
        float *again = get_out(g, dc, nout, f32);
        CHECK(!memcmp(again, got, nout * sizeof(float)), "rmsnorm_matmul M=%d N=%d K=%d beta=%g %s: grid %d gives other bits",
              M, N, K, beta, f32 ? "fp32" : "bf16", other_grids[i]);
        free(again);
    }
    g->tuning.gemv_residency = 0;
    double scale = max_abs(want, nout);
    if (scale == 0.0) scale = 1.0;
    const double r_cpu = tol_ratio(got, want, nout, 2e-3 * scale, 1.0 / 128.0);
    const double r_gpu = tol_ratio(got, unf, nout, 2e-4 * scale, 1.0 / 256.0);
    worst_cpu = fmax(worst_cpu, r_cpu), worst_gpu = fmax(worst_gpu, r_gpu), cases++;
    CHECK(r_cpu <= 1.0, "rmsnorm_matmul M=%d N=%d K=%d beta=%g %s: tolerance ratio against the CPU %.3g", M, N, K,
          beta, f32 ? "fp32" : "bf16", r_cpu);
    CHECK(r_gpu <= 1.0, "rmsnorm_matmul M=%d N=%d K=%d beta=%g %s: tolerance ratio against the unfused GPU ops %.3g",
          M, N, K, beta, f32 ? "fp32" : "bf16", r_gpu);
    dev_free(g, &dx), dev_free(g, &dnw), dev_free(g, &dw);
    ops_free(g, dc), ops_free(g, du), ops_free(g, tmp);
    free(x), free(nw), free(w), free(c0), free(want), free(tmp_c), free(got), free(unf);
}

static void check_swiglu_case(ctx_pair *p, int M, int I, int K) {
    ops_ctx *g = &p->gpu;
    float *x = rand_bf16((size_t)M * K, 1.0f, 0.0f), *nw = rand_bf16((size_t)K, 0.3f, 1.0f);
    float *w = rand_bf16((size_t)2 * I * K, 0.05f, 0.0f);
    dev_buf dx = dev_act(g, x, (size_t)M * K, 0), dnw = dev_act(g, nw, K, 0), dw = dev_act(g, w, (size_t)2 * I * K, 0);
    void *h = ops_alloc(g, (size_t)M * I * 2), *h2 = ops_alloc(g, (size_t)M * I * 2);
    void *gu = ops_alloc(g, (size_t)M * 2 * I * 2), *tmp = ops_alloc(g, (size_t)M * K * 2);
    float *want = dk_malloc((size_t)M * I * 4), *gu_c = dk_malloc((size_t)M * 2 * I * 4);
    float *tmp_c = dk_malloc((size_t)M * K * 4);
    /* Above 8 rows the bits are compared with the ops in turn on the wgmma
     * skinny kernel (skinny_use 2), which the fused form shares on sm_90
     * (one launch for gate|up and the SwiGLU) and falls back to elsewhere
     * or under a split plan; the default choice is held to the CPU below. */
    g->tuning.skinny_use = M > 8 ? 2 : 0;
    ops_rmsnorm_matmul_swiglu(g, h, gu, tmp, dx.p, dnw.p, dw.p, M, I, K, 1e-6f);
    ops_rmsnorm_matmul_swiglu(&p->cpu, want, gu_c, tmp_c, x, nw, w, M, I, K, 1e-6f);
    ops_rmsnorm_matmul(g, gu, 0, tmp, dx.p, dnw.p, dw.p, M, 2 * I, K, 1e-6f, 1.0f, 0.0f);
    ops_swiglu_forward(g, h2, gu, M, I);
    float *got = get_act(g, h, (size_t)M * I), *seq = get_act(g, h2, (size_t)M * I);
    for (int i = 0; i < 2; i++) {
        g->tuning.gemv_residency = other_grids[i];
        ops_rmsnorm_matmul_swiglu(g, h, gu, tmp, dx.p, dnw.p, dw.p, M, I, K, 1e-6f);
        float *again = get_act(g, h, (size_t)M * I);
        CHECK(!memcmp(again, got, (size_t)M * I * sizeof(float)),
              "rmsnorm_matmul_swiglu M=%d I=%d K=%d: grid %d gives other bits", M, I, K, other_grids[i]);
        free(again);
    }
    g->tuning.gemv_residency = 0;
    if (M > 8) { /* the ops in turn on the same kernel (swiglu_fuse -1): the same bits */
        g->tuning.swiglu_fuse = -1;
        ops_rmsnorm_matmul_swiglu(g, h, gu, tmp, dx.p, dnw.p, dw.p, M, I, K, 1e-6f);
        g->tuning.swiglu_fuse = 0;
        float *unf = get_act(g, h, (size_t)M * I);
        CHECK(!memcmp(unf, got, (size_t)M * I * sizeof(float)),
              "rmsnorm_matmul_swiglu M=%d I=%d K=%d: swiglu_fuse -1 gives other bits", M, I, K);
        free(unf);
    }
    if (M > 8) { /* the default choice against the CPU as well */
        g->tuning.skinny_use = 0;
        ops_rmsnorm_matmul_swiglu(g, h, gu, tmp, dx.p, dnw.p, dw.p, M, I, K, 1e-6f);
        float *dflt = get_act(g, h, (size_t)M * I);
        double sc = max_abs(want, (size_t)M * I);
        const double r = tol_ratio(dflt, want, (size_t)M * I, 2e-3 * (sc == 0.0 ? 1.0 : sc), 1.0 / 64.0);
        worst_cpu = fmax(worst_cpu, r), cases++;
        CHECK(r <= 1.0, "rmsnorm_matmul_swiglu M=%d I=%d K=%d, default kernels: tolerance ratio against the CPU %.3g", M,
              I, K, r);
        free(dflt);
    }
    g->tuning.skinny_use = 0;
    double scale = max_abs(want, (size_t)M * I);
    if (scale == 0.0) scale = 1.0;
    const double r_cpu = tol_ratio(got, want, (size_t)M * I, 2e-3 * scale, 1.0 / 64.0);
    worst_cpu = fmax(worst_cpu, r_cpu), cases++;
    CHECK(r_cpu <= 1.0, "rmsnorm_matmul_swiglu M=%d I=%d K=%d: tolerance ratio against the CPU %.3g", M, I, K, r_cpu);
    CHECK(!memcmp(got, seq, (size_t)M * I * sizeof(float)),
          "rmsnorm_matmul_swiglu M=%d I=%d K=%d: differs from rmsnorm_matmul then swiglu on the GPU", M, I, K);
    dev_free(g, &dx), dev_free(g, &dnw), dev_free(g, &dw);
    ops_free(g, h), ops_free(g, h2), ops_free(g, gu), ops_free(g, tmp);
    free(x), free(nw), free(w), free(want), free(gu_c), free(tmp_c), free(got), free(seq);
}

typedef struct {
    ops_ctx *g;
    void *h, *gu, *tmp;
    const void *x, *nw, *w;
} fuse_case;

static void bad_swiglu_fuse(void *arg) {
    fuse_case *t = arg;
    t->g->tuning.swiglu_fuse = 2;
    ops_rmsnorm_matmul_swiglu(t->g, t->h, t->gu, t->tmp, t->x, t->nw, t->w, 16, 64, 128, 1e-6f);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, (size_t)64 << 20);
    rng_seed(11);
    /* Rows 1..8 take the fused kernel; 9 and 40 the two ops in turn. The
     * model's shapes (2048 -> 4096, 2048 -> 12288), long rows (several warps
     * per output column) and odd ones. */
    const int shapes[][3] = {{1, 4096, 2048}, {1, 12288, 2048}, {3, 1000, 256}, {8, 2048, 2048}, {5, 33, 64},
                             {2, 2048, 6144}, {3, 7, 4096},     {9, 512, 512},  {40, 300, 128}, {1, 33, 1000},
                             {2, 5, 24},      {1, 200, 5000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int beta = 0; beta < 2; beta++) check_case(&p, shapes[s][0], shapes[s][1], shapes[s][2], (float)beta, 0);
    /* fp32 output, as a decode step's final norm and lm head: wider than the
     * plain few-row product takes (GEMV_MAX_N), the model's K, odd ones, and
     * 9 rows (the ops in turn). */
    const int wide[][3] = {{1, 40000, 512}, {3, 33001, 256}, {1, 4096, 2048}, {8, 5000, 2048}, {2, 77, 24}, {9, 700, 512}};
    for (size_t s = 0; s < sizeof wide / sizeof wide[0]; s++)
        for (int beta = 0; beta < 2; beta++) check_case(&p, wide[s][0], wide[s][1], wide[s][2], (float)beta, 1);
    /* The MLP's first half at the model's shape (2048 -> 2 x 6144), a long K
     * (several warps per column) and odd ones; from 9 rows the wgmma form
     * on sm_90 (its block widths, an odd I whose last block overhangs it,
     * and 256 -> 512 at K 4096, whose plan splits K and so runs the ops in
     * turn) or the ops in turn elsewhere. */
    const int sw[][3] = {{1, 6144, 2048}, {8, 6144, 2048}, {2, 1000, 6144}, {5, 33, 64},  {9, 256, 512},
                         {33, 64, 128},   {1, 7, 5000},    {2, 3, 16},      {64, 6144, 2048}, {16, 6144, 2048},
                         {40, 1000, 512}, {64, 256, 4096}, {24, 4100, 256}};
    for (size_t s = 0; s < sizeof sw / sizeof sw[0]; s++) check_swiglu_case(&p, sw[s][0], sw[s][1], sw[s][2]);
    /* A pinned choice out of range aborts, naming the field. */
    {
        ops_ctx *g = &p.gpu;
        fuse_case t = {g,
                       ops_alloc(g, (size_t)16 * 64 * 2),
                       ops_alloc(g, (size_t)16 * 128 * 2),
                       ops_alloc(g, (size_t)16 * 128 * 2),
                       ops_alloc(g, (size_t)16 * 128 * 2),
                       ops_alloc(g, (size_t)128 * 2),
                       ops_alloc(g, (size_t)128 * 128 * 2)};
        CHECK(expect_abort("swiglu_fuse 2", bad_swiglu_fuse, &t, "ops_tuning.swiglu_fuse"),
              "rmsnorm_matmul_swiglu with swiglu_fuse = 2 must abort naming the field");
        ops_free(g, t.h), ops_free(g, t.gu), ops_free(g, t.tmp);
        ops_free(g, (void *)t.x), ops_free(g, (void *)t.nw), ops_free(g, (void *)t.w);
    }
    printf("rmsnorm + matmul (+ swiglu): %d cases, worst tolerance ratio %.3g against the CPU, %.3g against the unfused GPU ops "
           "(<= 1 passes)\n",
           cases, worst_cpu, worst_gpu);
    pair_free(&p);
    return test_finish("test_cuda_fused_matmul");
}
