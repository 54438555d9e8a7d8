/* test_cuda_attention.c: the CUDA flash attention (ops_attention_forward /
 * _backward on a CUDA context) against the CPU op, the fp32 reference.
 *
 * Inputs are drawn in fp32 and rounded to bf16 on the host; the CPU op runs on
 * exactly those rounded values, so what remains of the difference comes from
 * the GPU kernels' own roundings, not from the inputs:
 *   out   the kernel rounds P to bf16 before P V (2^-9 relative per term, of
 *         random sign, so it averages down over the keys) and rounds the
 *         output to bf16 (2^-9 relative). Tolerance 1e-2 x max|out|: four
 *         times the worst single rounding, far below the O(1) error of a
 *         wrong mask, tile or head mapping.
 *   lse   never rounded to bf16: fp32 scores from exact bf16 products and
 *         an fp32 row sum. Tolerance 1e-4 x max(1, max|lse|).
 *   dq, dk, dv  P and dS are rounded to bf16 before their products and the
 *         results are stored as bf16; dS = P (dP - D) cancels partly, so
 *         the tolerance is 2e-2 x max|ref| per tensor.
 * The backward is compared on identical inputs: the CPU backward receives
 * the GPU forward's out (bf16) and lse, so a forward error cannot hide or
 * excuse a backward one.
 *
 * Shapes: sequence lengths 1, 17, 200, 1000 and 0 (an empty sequence), tile
 * boundaries (63, 64, 65, 128, 129), one 2048-token sequence, padding tokens
 * after the last sequence, a batch of padding only; GQA groups of 1, 2, 4
 * and 8; head_dim 16, 32 (the small test models), 64 and 128; sharper
 * softmaxes (q scaled by 2 and 4). Outputs are
 * pre-filled with NaN so an element the kernel forgets shows up; padding rows
 * must be exactly 0; two runs must be bit-identical.
 *
 * The backward runs with its two passes pinned (ops_tuning.attn_bwd = 1);
 * at head_dim 128 the one-pass Hopper backward (attn_bwd = 2, and the
 * chosen one, 0, which must give its bits) is checked the same way, and
 * its ordering flags are read back from the scratch (each must count the key tiles that reach its query tile). The
 * persistent forward (ops_tuning.attn_fwd = 2) must give the bits of a
 * block per tile; one case has more query tiles than an H100 or H200 has
 * SMs, so that its blocks walk several. A pinned attn_bwd or attn_fwd out
 * of range aborts, naming the field.
 *
 * The kernels under test are the ones the GPU dispatches to: the wgmma
 * kernels (attention_wgmma.cu) on Hopper, the mma.sync ones (attention.cu)
 * elsewhere; a build with -DATTN_FORCE_MMA=1 runs the latter on Hopper too
 * (give this test the define as well: it then expects no one-pass flags).
 *
 * `--quick` runs the small cases only (for compute-sanitizer). Exits 77
 * where there is no GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "tests/expect_abort.h"
#include "tests/unit/test_ops_common.h"

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

static float *rand_bf16(size_t n, float scale) {
    float *x = rand_normal(n, scale, 0.0f);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
    return x;
}

typedef struct {
    const char *name;
    int D, Hq, Hkv;
    int n_seqs;
    int lens[8];
    int pad;      /* padding tokens after the last sequence */
    float qscale; /* > 1 sharpens the softmax */
    int quick;    /* also run under --quick */
} attn_case;

static const attn_case cases[] = {
    {"odd lengths, D=128, group 8", 128, 8, 1, 4, {1, 17, 200, 1000}, 3, 1.0f, 0},
    {"odd lengths, D=64, group 1", 64, 4, 4, 4, {1000, 17, 1, 200}, 0, 1.0f, 0},
    {"tile edges, D=128, group 4", 128, 8, 2, 5, {64, 128, 129, 63, 65}, 2, 1.0f, 1},
    {"sharp softmax, D=64, group 4", 64, 4, 1, 3, {300, 0, 77}, 5, 4.0f, 1},
    {"short, D=64, group 8", 64, 8, 1, 3, {1, 17, 40}, 1, 1.0f, 1},
    {"short, D=128, group 1", 128, 2, 2, 2, {17, 5}, 0, 1.0f, 1},
    {"long sequence, D=128, group 4", 128, 8, 2, 1, {2048}, 0, 1.0f, 0},
    {"more query tiles than SMs, D=128, group 8", 128, 16, 2, 3, {1100, 900, 600}, 1, 1.0f, 0},
    {"padding only, D=128", 128, 4, 2, 0, {0}, 7, 1.0f, 1},
    {"tiny-model heads, D=16, group 2", 16, 4, 2, 3, {256, 100, 3}, 2, 1.0f, 1},
    {"D=32, group 4", 32, 8, 2, 3, {129, 70, 1}, 0, 2.0f, 1},
    {"group 5 (the 14B shape's 40 / 8), D=128", 128, 10, 2, 3, {300, 129, 64}, 1, 1.0f, 1},
    {"group 3, D=64", 64, 6, 2, 2, {200, 65}, 0, 1.0f, 0},
};

static void check(const char *what, double diff, double tol) {
    int ok = diff <= tol;
    printf("    %-6s max|diff| %.3e  tol %.3e  %s\n", what, diff, tol, ok ? "ok" : "FAIL");
    if (!ok) test_failures++;
}

/* Device act buffer filled with bf16 NaN (all bits set). */
static void *dev_nan_act(ops_ctx *g, size_t n) {
    void *p = ops_alloc(g, n * 2);
    unsigned char *h = dk_malloc(n * 2 + 1);
    memset(h, 0xff, n * 2);
    ops_upload(g, p, h, n * 2);
    ops_sync(g);
    free(h);
    return p;
}

static float *dev_nan_f32(ops_ctx *g, size_t n) {
    float *p = ops_alloc(g, n * sizeof(float) + 4);
    float *h = dk_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    ops_upload(g, p, h, n * sizeof(float));
    ops_sync(g);
    free(h);
    return p;
}

static void *dev_act(ops_ctx *g, const float *x, size_t n) {
    void *p = ops_alloc(g, n * 2 + 16);
    ops_upload_act(g, p, x, n);
    return p;
}

/* Raw bytes of a device buffer, for bit-for-bit comparisons. */
static void *raw(ops_ctx *g, const void *p, size_t bytes) {
    void *h = dk_malloc(bytes + 1);
    ops_download(g, h, p, bytes);
    return h;
}

static int zero_rows(const float *x, int from, int T, size_t row) {
    for (size_t i = (size_t)from * row; i < (size_t)T * row; i++)
        if (x[i] != 0.0f) return 0;
    return 1;
}

/* The GPU's gradients dev[] (dq, dk, dv) against the CPU's ref[]: within
 * 2e-2 of each tensor's largest value, padding rows (from `covered`, rows
 * of row[] elements) exactly 0. `what` names the backward in messages. */
static void check_grads(ops_ctx *g, const char *name, const char *what, void *const dev[3], float *const ref[3],
                        const size_t row[3], int covered, int T) {
    static const char *names[3] = {"dq", "dk", "dv"};
    int pad_ok = 1;
    for (int b = 0; b < 3; b++) {
        const size_t n = (size_t)T * row[b];
        float *x = dk_malloc(n * 4 + 4);
        ops_download_act(g, x, dev[b], n);
        check(names[b], max_abs_diff(x, ref[b], n), 2e-2 * fmax(max_abs(ref[b], n), 1e-30));
        pad_ok &= zero_rows(x, covered, T, row[b]);
        free(x);
    }
    CHECK(pad_ok, "%s: %s padding rows are not exactly zero", name, what);
}

/* Whether two device gradient sets (dq, dk, dv of T rows of row[] bf16
 * elements) hold the same bits. */
static int same_grads(ops_ctx *g, void *const a[3], void *const b[3], const size_t row[3], int T) {
    int same = 1;
    for (int i = 0; i < 3; i++) {
        const size_t bytes = (size_t)T * row[i] * 2;
        void *x = raw(g, a[i], bytes), *y = raw(g, b[i], bytes);
        same &= memcmp(x, y, bytes) == 0;
        free(x);
        free(y);
    }
    return same;
}

/* The one-pass backward (ops_tuning.attn_bwd = 2, head dim 128) on the same
 * inputs, against the same CPU gradients ref, twice for the bits.
 * Where it runs (sm_90, the wgmma kernels) its flags in the scratch after
 * dvec must end at the number of key tiles of 128 that reach each 64-row
 * query tile (its shares were all added, in turn); elsewhere the call falls
 * back to the two passes and must leave that region as it was. */
static void one_pass_case(const attn_case *c, ops_ctx *g, const int *cu, int T, void *ddout, void *dq_in,
                          void *dk_in, void *dv_in, void *dout_gpu, const float *dlse, const int32_t *dcu,
                          float *const ref[3], const size_t row[3]) {
    const int Hq = c->Hq, Hkv = c->Hkv, D = c->D, covered = cu[c->n_seqs];
    const size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hkv * D;
    const float scale = 1.0f / sqrtf((float)D);
    const int entries = ops_attention_backward_tiles(T, c->n_seqs);
    const size_t flag_at = ops_attention_backward_scratch(T, c->n_seqs, Hq, D, 0);
    const size_t nflags = (size_t)Hq * entries;
    CHECK(ops_attention_backward_scratch(T, c->n_seqs, Hq, D, 1) <= g->scratch_size,
          "%s: the test context's scratch is too small for the one-pass backward", c->name);
    int *flags = dk_malloc(nflags * sizeof(int) + 4);
    memset(flags, 0xff, nflags * sizeof(int)); /* -1: a sentinel the two passes leave alone */
    ops_upload(g, (char *)g->scratch + flag_at, flags, nflags * sizeof(int));

    /* Runs 0 and 1 pinned to the one pass, run 2 the chosen backward. */
    void *out[3][3];
    for (int run = 0; run < 3; run++) {
        g->tuning.attn_bwd = run < 2 ? 2 : 0;
        for (int b = 0; b < 3; b++) out[run][b] = dev_nan_act(g, b ? nk : nq);
        ops_attention_backward(g, out[run][0], out[run][1], out[run][2], ddout, dq_in, dk_in, dv_in, dout_gpu, dlse,
                               dcu, c->n_seqs, T, Hq, Hkv, D, scale);
        if (run == 0) ops_download(g, flags, (char *)g->scratch + flag_at, nflags * sizeof(int));
    }
    g->tuning.attn_bwd = 0;

    printf("    one pass (ops_tuning.attn_bwd = 2):\n");
    check_grads(g, c->name, "one-pass backward", out[0], ref, row, covered, T);
    CHECK(same_grads(g, out[0], out[1], row, T), "%s: one-pass backward not bit-reproducible", c->name);
    CHECK(same_grads(g, out[0], out[2], row, T), "%s: the chosen backward (attn_bwd = 0) is not the one pass",
          c->name);

#ifndef ATTN_FORCE_MMA
    const int runs = device_compute_capability(0) == 90;
#else
    const int runs = 0;
#endif
    int bad = 0;
    for (int h = 0; h < Hq; h++) {
        int e = 0;
        for (int s = 0; s < c->n_seqs; s++) {
            const int L = c->lens[s];
            for (int m = 0; m * 64 < L; m++, e++) {
                const int last = (L - 1 < 64 * m + 63 ? L - 1 : 64 * m + 63) / 128;
                const int want = runs ? last + 1 : -1, got = flags[(size_t)h * entries + e];
                if (got != want && bad++ < 3)
                    printf("    flag of head %d, sequence %d, tile %d: %d, want %d\n", h, s, m, got, want);
            }
        }
    }
    CHECK(bad == 0, "%s: %d one-pass flags off (the pass %s)", c->name, bad, runs ? "must run here" : "cannot run here");
    for (int run = 0; run < 3; run++)
        for (int b = 0; b < 3; b++) ops_free(g, out[run][b]);
    free(flags);
}

static void run_case(const attn_case *c, ops_ctx *g) {
    int cu[9] = {0};
    int L = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        cu[s + 1] = cu[s] + c->lens[s];
        if (c->lens[s] > L) L = c->lens[s];
    }
    const int covered = cu[c->n_seqs], T = covered + c->pad, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const size_t nq = (size_t)T * Hq * D, nk = (size_t)T * Hkv * D, nl = (size_t)Hq * T;
    const float scale = 1.0f / sqrtf((float)D);
    printf("%s: T=%d n_seqs=%d Hq=%d Hkv=%d D=%d\n", c->name, T, c->n_seqs, Hq, Hkv, D);

    float *q = rand_bf16(nq, c->qscale), *k = rand_bf16(nk, 1.0f), *v = rand_bf16(nk, 1.0f);
    float *dout = rand_bf16(nq, 1.0f);
    /* Padding rows may hold anything: NaN there must not reach the
     * sequences' rows (the Hopper kernels read whole tiles past a sequence's
     * end and zero what they must; the CPU reference never reads them). */
    for (size_t i = (size_t)covered * Hq * D; i < nq; i++) q[i] = NAN;
    for (size_t i = (size_t)covered * Hkv * D; i < nk; i++) k[i] = v[i] = NAN;
    void *dq_in = dev_act(g, q, nq), *dk_in = dev_act(g, k, nk), *dv_in = dev_act(g, v, nk);
    void *ddout = dev_act(g, dout, nq);
    int32_t *dcu = ops_alloc(g, sizeof cu);
    ops_upload(g, dcu, cu, sizeof cu);

    /* ---- forward ---- */
    void *dout_gpu = dev_nan_act(g, nq);
    float *dlse = dev_nan_f32(g, nl);
    double t0 = dk_now();
    ops_attention_forward(g, dout_gpu, dlse, dq_in, dk_in, dv_in, dcu, c->n_seqs, T, Hq, Hkv, D, scale);
    ops_sync(g);
    double t_fwd = dk_now() - t0;
    float *out = dk_malloc(nq * sizeof(float) + 4), *lse = dk_malloc(nl * sizeof(float) + 4);
    ops_download_act(g, out, dout_gpu, nq);
    ops_download(g, lse, dlse, nl * sizeof(float));

    size_t rows = L < 64 ? (size_t)L : 64;
    size_t cpu_scratch = 2 * rows * (size_t)L * sizeof(float) + 64;
    ops_ctx cpu;
    if (ops_ctx_init(&cpu, DK_DEVICE_CPU, 0, cpu_scratch) != DK_OK) DK_ABORT("%s", dk_error());
    float *out_ref = dk_malloc(nq * sizeof(float) + 4), *lse_ref = dk_malloc(nl * sizeof(float) + 4);
    ops_attention_forward(&cpu, out_ref, lse_ref, q, k, v, cu, c->n_seqs, T, Hq, Hkv, D, scale);
    check("out", max_abs_diff(out, out_ref, nq), 1e-2 * fmax(max_abs(out_ref, nq), 1e-30));
    check("lse", max_abs_diff(lse, lse_ref, nl), 1e-4 * fmax(1.0, max_abs(lse_ref, nl)));
    int pad_ok = zero_rows(out, covered, T, (size_t)Hq * D);
    for (int h = 0; h < Hq; h++)
        for (int t = covered; t < T; t++) pad_ok &= lse[(size_t)h * T + t] == 0.0f;
    CHECK(pad_ok, "%s: forward padding rows are not exactly zero", c->name);

    /* Bit-for-bit repeat. */
    void *out2 = dev_nan_act(g, nq);
    float *lse2 = dev_nan_f32(g, nl);
    ops_attention_forward(g, out2, lse2, dq_in, dk_in, dv_in, dcu, c->n_seqs, T, Hq, Hkv, D, scale);
    void *ra = raw(g, dout_gpu, nq * 2), *rb = raw(g, out2, nq * 2);
    void *la = raw(g, dlse, nl * 4), *lb = raw(g, lse2, nl * 4);
    CHECK(memcmp(ra, rb, nq * 2) == 0 && memcmp(la, lb, nl * 4) == 0, "%s: forward not bit-reproducible", c->name);

    /* The persistent forward (ops_tuning.attn_fwd = 2: a block per SM
     * walking the tiles where there are more) computes each tile as a
     * block of its own does: the same bits. */
    void *out3 = dev_nan_act(g, nq);
    float *lse3 = dev_nan_f32(g, nl);
    g->tuning.attn_fwd = 2;
    ops_attention_forward(g, out3, lse3, dq_in, dk_in, dv_in, dcu, c->n_seqs, T, Hq, Hkv, D, scale);
    g->tuning.attn_fwd = 0;
    void *rc = raw(g, out3, nq * 2), *lc = raw(g, lse3, nl * 4);
    CHECK(memcmp(ra, rc, nq * 2) == 0 && memcmp(la, lc, nl * 4) == 0,
          "%s: the persistent forward differs from a block per tile", c->name);
    free(rc);
    free(lc);
    ops_free(g, out3);
    ops_free(g, lse3);

    /* ---- backward, on the GPU forward's out and lse: the two passes
     * (ops_tuning.attn_bwd = 1; the one pass follows, one_pass_case) ---- */
    g->tuning.attn_bwd = 1;
    void *gdq = dev_nan_act(g, nq), *gdk = dev_nan_act(g, nk), *gdv = dev_nan_act(g, nk);
    t0 = dk_now();
    ops_attention_backward(g, gdq, gdk, gdv, ddout, dq_in, dk_in, dv_in, dout_gpu, dlse, dcu, c->n_seqs, T, Hq, Hkv,
                           D, scale);
    ops_sync(g);
    double t_bwd = dk_now() - t0;
    float *rq = dk_malloc(nq * 4 + 4), *rk = dk_malloc(nk * 4 + 4), *rv = dk_malloc(nk * 4 + 4);
    ops_attention_backward(&cpu, rq, rk, rv, dout, q, k, v, out, lse, cu, c->n_seqs, T, Hq, Hkv, D, scale);
    void *const grads[3] = {gdq, gdk, gdv};
    float *const ref[3] = {rq, rk, rv};
    const size_t row[3] = {(size_t)Hq * D, (size_t)Hkv * D, (size_t)Hkv * D};
    check_grads(g, c->name, "backward", grads, ref, row, covered, T);

    void *gdq2 = dev_nan_act(g, nq), *gdk2 = dev_nan_act(g, nk), *gdv2 = dev_nan_act(g, nk);
    ops_attention_backward(g, gdq2, gdk2, gdv2, ddout, dq_in, dk_in, dv_in, dout_gpu, dlse, dcu, c->n_seqs, T, Hq,
                           Hkv, D, scale);
    void *const grads2[3] = {gdq2, gdk2, gdv2};
    g->tuning.attn_bwd = 0;
    CHECK(same_grads(g, grads, grads2, row, T), "%s: backward not bit-reproducible", c->name);
    printf("    first-call time: forward %.2f ms, backward %.2f ms\n", t_fwd * 1e3, t_bwd * 1e3);
    if (D == 128) one_pass_case(c, g, cu, T, ddout, dq_in, dk_in, dv_in, dout_gpu, dlse, dcu, ref, row);

    void *dev[] = {dq_in, dk_in, dv_in, ddout, dcu, dout_gpu, dlse, out2, lse2, gdq, gdk, gdv, gdq2, gdk2, gdv2};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ops_free(g, dev[i]);
    void *host[] = {q, k, v, dout, out, lse, out_ref, lse_ref, ra, rb, la, lb, rq, rk, rv};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    ops_ctx_free(&cpu);
}

typedef struct {
    ops_ctx *g;
    void *buf;
    int32_t *cu;
} bad_case;

static void bad_attn_fwd(void *arg) {
    bad_case *b = arg;
    char *x = b->buf;
    b->g->tuning.attn_fwd = -1;
    ops_attention_forward(b->g, x, (float *)(x + 2048), x + 256, x + 512, x + 768, b->cu, 1, 1, 1, 1, 128, 1.0f);
    ops_sync(b->g);
}

static void bad_attn_bwd(void *arg) {
    bad_case *b = arg;
    char *x = b->buf;
    b->g->tuning.attn_bwd = 3;
    ops_attention_backward(b->g, x, x + 256, x + 512, x + 768, x + 1024, x + 1280, x + 1536, x + 1792,
                           (const float *)(x + 2048), b->cu, 1, 1, 1, 1, 128, 1.0f);
    ops_sync(b->g);
}

int main(int argc, char **argv) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("test_cuda_attention: no usable CUDA GPU, skipped\n");
        return 77;
    }
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    char desc[256];
    if (device_describe(0, desc, sizeof desc) == 0) printf("device: %s\n", desc);
    ops_ctx g;
    if (ops_ctx_init(&g, DK_DEVICE_CUDA, 0, (size_t)64 << 20) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    rng_seed(1234);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!quick || cases[i].quick) run_case(&cases[i], &g);
    bad_case b = {&g, ops_alloc(&g, 4096), ops_alloc(&g, 2 * sizeof(int32_t))};
    const int32_t cu1[2] = {0, 1};
    ops_upload(&g, b.cu, cu1, sizeof cu1);
    CHECK(expect_abort("attn_bwd 3", bad_attn_bwd, &b, "ops_tuning.attn_bwd"),
          "a backward with attn_bwd = 3 must abort naming the field");
    CHECK(expect_abort("attn_fwd -1", bad_attn_fwd, &b, "ops_tuning.attn_fwd"),
          "a forward with attn_fwd = -1 must abort naming the field");
    ops_free(&g, b.buf);
    ops_free(&g, b.cu);
    ops_ctx_free(&g);
    return test_finish("test_cuda_attention");
}
