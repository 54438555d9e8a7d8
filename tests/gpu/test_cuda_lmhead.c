/* test_cuda_lmhead.c: the CUDA fused lm head (ops_lmhead_forward / _backward
 * on a CUDA context) against the CPU op, the fp32 reference.
 *
 * h and W are drawn in fp32 and rounded to bf16 on the host; the CPU op runs
 * on exactly those values, so the difference is the GPU path's own:
 *   logprob, entropy, lse  fp32 logits from cuBLASLt (exact bf16 products,
 *         fp32 accumulation in another order than OpenBLAS: ~1e-6 relative),
 *         fp32 chunk statistics merged in double. Tolerance
 *         2e-4 x max(1, max|ref|): loose against rounding, tight against a
 *         wrong chunk, a missed column or a wrong merge (those are O(1)).
 *   dh    dz is rounded to bf16 before the two GEMMs and dh is stored as
 *         bf16 (2^-9 relative each): 1e-2 x max|ref|.
 *   dW    fp32, accumulated onto a random starting value; its increment
 *         carries the bf16 rounding of dz: 1e-2 x max|increment|.
 * The backward is compared on identical inputs (the GPU forward's lse and
 * entropy go to both).
 *
 * Shapes: V not a multiple of the chunk, a chunk wider than V, inv_temp != 1,
 * sharp logits (small entropy), entropy given or NULL, masked targets
 * (target < 0: logprob and every gradient exactly 0), and the scratch that
 * ops.h promises (T x min(chunk, V) floats) or more: with the promised size
 * the backward has to walk the tokens in blocks. Outputs are pre-filled with
 * NaN; two runs must be bit-identical. `--quick` runs the small cases only
 * (for compute-sanitizer). Every case runs on each lm head path: the
 * one-kernel wgmma passes of lmhead_wgmma.cu on sm_90 in clusters of two
 * blocks (row tiles in pairs, so an odd count leaves a block of zeros) and
 * one block a tile, and cuBLASLt logits through scratch. Exits 77 where
 * there is no GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "tests/unit/test_ops_common.h"

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

typedef struct {
    const char *name;
    int T, C, V, chunk;
    float inv_temp, wscale; /* logits ~ N(0, wscale^2) before inv_temp */
    int mask_every;         /* every k-th target is -1 (0: none) */
    int with_entropy;       /* entropy and dentropy given */
    int tight_scratch;      /* scratch exactly T x min(chunk, V) floats */
    int quick;
    int keep;               /* the forward keeps the logits, the backward reads them */
} lm_case;

static const lm_case cases[] = {
    {"V % chunk != 0, masked, entropy, tight scratch", 37, 64, 1000, 256, 1.0f / 0.7f, 1.0f, 5, 1, 1, 1, 0},
    {"no entropy, big scratch", 130, 128, 5003, 1024, 1.0f, 1.0f, 0, 0, 0, 1, 0},
    {"chunk > V", 5, 64, 100, 300, 1.0f, 1.0f, 2, 1, 1, 1, 0},
    {"sharp logits, inv_temp 1/0.6", 300, 256, 32000, 4096, 1.0f / 0.6f, 4.0f, 7, 1, 0, 0, 0},
    {"token blocks in the backward", 200, 512, 3000, 512, 1.0f, 1.0f, 3, 1, 1, 1, 0},
    {"Qwen vocabulary, chunk 8192", 64, 512, 151936, 8192, 1.0f, 1.0f, 9, 1, 1, 0, 0},
    {"C % 64 != 0, odd chunk, several row tiles", 300, 200, 2500, 999, 1.0f / 0.8f, 1.0f, 4, 1, 1, 1, 0},
    {"5 row tiles x 594 column tiles, C 1024", 640, 1024, 151936, 8192, 1.0f, 1.0f, 11, 0, 0, 0, 0},
    {"36 row tiles: several tile groups, the last short", 4500, 64, 3000, 1024, 1.0f, 1.0f, 13, 1, 0, 0, 0},
    {"kept logits, masked, entropy, inv_temp 1/0.7", 37, 64, 1000, 256, 1.0f / 0.7f, 1.0f, 5, 1, 1, 1, 1},
    {"kept logits, no entropy", 130, 128, 5003, 1024, 1.0f, 1.0f, 0, 0, 0, 1, 1},
    {"kept logits, Qwen vocabulary", 96, 512, 151936, 8192, 1.0f, 1.0f, 9, 1, 1, 0, 1},
};

static void check(const char *what, double diff, double tol) {
    int ok = diff <= tol;
    printf("    %-8s max|diff| %.3e  tol %.3e  %s\n", what, diff, tol, ok ? "ok" : "FAIL");
    if (!ok) test_failures++;
}

static float *dev_f32(ops_ctx *g, const float *x, size_t n) {
    float *p = ops_alloc(g, n * sizeof(float) + 16);
    if (x) ops_upload(g, p, x, n * sizeof(float));
    ops_sync(g);
    return p;
}

static float *dev_nan_f32(ops_ctx *g, size_t n) {
    float *h = dk_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *p = dev_f32(g, h, n);
    free(h);
    return p;
}

static void *dev_nan_act(ops_ctx *g, size_t n) {
    void *p = ops_alloc(g, n * 2 + 16);
    unsigned char *h = dk_malloc(n * 2 + 1);
    memset(h, 0xff, n * 2);
    ops_upload(g, p, h, n * 2);
    ops_sync(g);
    free(h);
    return p;
}

static void *raw(ops_ctx *g, const void *p, size_t bytes) {
    void *h = dk_malloc(bytes + 1);
    ops_download(g, h, p, bytes);
    return h;
}

/* One forward + backward on the GPU; outputs left in the device buffers. */
typedef struct {
    float *logprob, *entropy, *lse, *dW;
    void *dh;
} lm_out;

static void gpu_run(ops_ctx *g, const lm_case *c, lm_out *o, void *h, void *W, int32_t *tg, float *dlp, float *dent,
                    const float *dW0) {
    const size_t T = (size_t)c->T, C = (size_t)c->C, V = (size_t)c->V;
    o->logprob = dev_nan_f32(g, T);
    o->entropy = c->with_entropy ? dev_nan_f32(g, T) : NULL;
    o->lse = dev_nan_f32(g, T);
    o->dW = dev_f32(g, dW0, V * C);
    o->dh = dev_nan_act(g, T * C);
    float *keep = c->keep ? dev_nan_f32(g, T * V) : NULL;
    ops_lmhead_forward(g, o->logprob, o->entropy, o->lse, h, W, tg, c->T, c->C, c->V, c->inv_temp, c->chunk, keep);
    ops_lmhead_backward(g, o->dh, o->dW, dlp, c->with_entropy ? dent : NULL, h, W, tg, o->lse, o->entropy, c->T,
                        c->C, c->V, c->inv_temp, c->chunk, keep);
    ops_sync(g);
    if (keep) ops_free(g, keep);
}

static void lm_free(ops_ctx *g, lm_out *o) {
    ops_free(g, o->logprob);
    if (o->entropy) ops_free(g, o->entropy);
    ops_free(g, o->lse);
    ops_free(g, o->dW);
    ops_free(g, o->dh);
}

static void run_case(const lm_case *c, ops_ctx *gfull) {
    const size_t T = (size_t)c->T, C = (size_t)c->C, V = (size_t)c->V;
    const size_t ncol = (size_t)(c->chunk < c->V ? c->chunk : c->V);
    const int pin = gfull->tuning.lmhead_kernel;
    const char *path = c->keep    ? "kept logits"
                       : pin < 0  ? "cuBLASLt logits"
                       : pin == 1 ? "one-kernel, one block a tile"
                                  : "one-kernel (wgmma in clusters of two where the GPU has it)";
    printf("%s: T=%d C=%d V=%d chunk=%d inv_temp=%.3f [%s]\n", c->name, c->T, c->C, c->V, c->chunk, c->inv_temp,
           path);

    /* The CUDA context reserves a large scratch; a copy that admits only
     * the promised T x chunk floats makes the op live within that. */
    ops_ctx g = *gfull;
    if (c->tight_scratch) g.scratch_size = T * ncol * sizeof(float);

    float *h = rand_normal(T * C, 1.0f, 0.0f), *W = rand_normal(V * C, c->wscale / sqrtf((float)C), 0.0f);
    for (size_t i = 0; i < T * C; i++) h[i] = bf16_round(h[i]);
    for (size_t i = 0; i < V * C; i++) W[i] = bf16_round(W[i]);
    int32_t *tg = dk_malloc(T * sizeof(int32_t));
    for (size_t t = 0; t < T; t++) tg[t] = (c->mask_every && t % c->mask_every == 1) ? -1 : (int32_t)(rng_next() % V);
    if (T > 3) tg[T - 1] = c->V - 1, tg[0] = 0; /* the first and last column */
    float *dlp = rand_normal(T, 1.0f, 0.0f), *dent = rand_normal(T, 0.5f, 0.0f);
    float *dW0 = rand_normal(V * C, 1.0f, 0.0f);

    void *dh_in = ops_alloc(&g, T * C * 2 + 16), *dW_in = ops_alloc(&g, V * C * 2 + 16);
    ops_upload_act(&g, dh_in, h, T * C);
    ops_upload_act(&g, dW_in, W, V * C);
    int32_t *dtg = ops_alloc(&g, T * sizeof(int32_t) + 16);
    ops_upload(&g, dtg, tg, T * sizeof(int32_t));
    float *ddlp = dev_f32(&g, dlp, T), *ddent = dev_f32(&g, dent, T);

    lm_out o1, o2;
    gpu_run(&g, c, &o1, dh_in, dW_in, dtg, ddlp, ddent, dW0);
    float *lp = dk_malloc(T * 4 + 4), *ent = dk_malloc(T * 4 + 4), *lse = dk_malloc(T * 4 + 4);
    ops_download(&g, lp, o1.logprob, T * 4);
    ops_download(&g, lse, o1.lse, T * 4);
    if (c->with_entropy) ops_download(&g, ent, o1.entropy, T * 4);
    float *dh = dk_malloc(T * C * 4 + 4), *dW = dk_malloc(V * C * 4 + 4);
    ops_download_act(&g, dh, o1.dh, T * C);
    ops_download(&g, dW, o1.dW, V * C * 4);

    ops_ctx cpu;
    if (ops_ctx_init(&cpu, DK_DEVICE_CPU, 0, T * ncol * sizeof(float)) != DK_OK) DK_ABORT("%s", dk_error());
    float *lp_r = dk_malloc(T * 4 + 4), *ent_r = dk_malloc(T * 4 + 4), *lse_r = dk_malloc(T * 4 + 4);
    ops_lmhead_forward(&cpu, lp_r, c->with_entropy ? ent_r : NULL, lse_r, h, W, tg, c->T, c->C, c->V, c->inv_temp,
                       c->chunk, NULL);
    check("logprob", max_abs_diff(lp, lp_r, T), 2e-4 * fmax(1.0, max_abs(lp_r, T)));
    check("lse", max_abs_diff(lse, lse_r, T), 2e-4 * fmax(1.0, max_abs(lse_r, T)));
    if (c->with_entropy) check("entropy", max_abs_diff(ent, ent_r, T), 2e-4 * fmax(1.0, max_abs(ent_r, T)));

    float *dh_r = dk_malloc(T * C * 4 + 4), *dW_r = dk_malloc(V * C * 4 + 4);
    memcpy(dW_r, dW0, V * C * 4);
    ops_lmhead_backward(&cpu, dh_r, dW_r, dlp, c->with_entropy ? dent : NULL, h, W, tg, lse,
                        c->with_entropy ? ent : NULL, c->T, c->C, c->V, c->inv_temp, c->chunk, NULL);
    check("dh", max_abs_diff(dh, dh_r, T * C), 1e-2 * fmax(max_abs(dh_r, T * C), 1e-30));
    double inc = 0.0;
    for (size_t i = 0; i < V * C; i++) inc = fmax(inc, fabs((double)dW_r[i] - dW0[i]));
    check("dW", max_abs_diff(dW, dW_r, V * C), 1e-2 * fmax(inc, 1e-30));

    int masked_ok = 1;
    for (size_t t = 0; t < T; t++) {
        if (tg[t] >= 0) continue;
        masked_ok &= lp[t] == 0.0f;
        for (size_t j = 0; j < C; j++) masked_ok &= dh[t * C + j] == 0.0f;
    }
    CHECK(masked_ok, "%s: a masked token has a nonzero logprob or dh", c->name);

    gpu_run(&g, c, &o2, dh_in, dW_in, dtg, ddlp, ddent, dW0);
    int same = 1;
    float *outs1[] = {o1.logprob, o1.lse, o1.entropy}, *outs2[] = {o2.logprob, o2.lse, o2.entropy};
    for (int i = 0; i < 3; i++) {
        if (!outs1[i]) continue;
        void *a = raw(&g, outs1[i], T * 4), *b = raw(&g, outs2[i], T * 4);
        same &= memcmp(a, b, T * 4) == 0;
        free(a), free(b);
    }
    void *a = raw(&g, o1.dh, T * C * 2), *b = raw(&g, o2.dh, T * C * 2);
    same &= memcmp(a, b, T * C * 2) == 0;
    free(a), free(b);
    a = raw(&g, o1.dW, V * C * 4), b = raw(&g, o2.dW, V * C * 4);
    same &= memcmp(a, b, V * C * 4) == 0;
    free(a), free(b);
    CHECK(same, "%s: two runs are not bit-identical", c->name);

    lm_free(&g, &o1);
    lm_free(&g, &o2);
    void *dev[] = {dh_in, dW_in, dtg, ddlp, ddent};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ops_free(&g, dev[i]);
    void *host[] = {h, W, tg, dlp, dent, dW0, lp, ent, lse, dh, dW, lp_r, ent_r, lse_r, dh_r, dW_r};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    ops_ctx_free(&cpu);
}

int main(int argc, char **argv) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("test_cuda_lmhead: no usable CUDA GPU, skipped\n");
        return 77;
    }
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    ops_ctx g;
    if (ops_ctx_init(&g, DK_DEVICE_CUDA, 0, (size_t)64 << 20) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    rng_seed(4321);
    /* Each case on every lm head path (ops_tuning.lmhead_kernel 0, 1 and
     * -1); kept logits take one path whatever the pin. */
    const int pins[] = {0, 1, -1};
    for (int k = 0; k < 3; k++) {
        const int pin = pins[k];
        g.tuning.lmhead_kernel = pin;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if ((!quick || cases[i].quick) && !(pin && cases[i].keep)) run_case(&cases[i], &g);
    }
    ops_ctx_free(&g);
    return test_finish("test_cuda_lmhead");
}
