/* test_lmhead_cpu.c: the CPU fused lm head (ops_lmhead_forward / _backward)
 * against PyTorch fixtures from tests/make_lmhead_fixtures.py: log_softmax of
 * the full float64 logits and autograd of sum a_t logprob_t + b_t entropy_t
 * over unmasked tokens. V is prime and inv_temp != 1; some targets are -1
 * with non-zero a_t, b_t, which the op must ignore; the "peaked" case has
 * logits up to ~60 and entropies down to 1e-6; "t70_c8_v29" has more tokens
 * than the forward's 64-token block.
 *
 * Every case runs with chunk sizes 1, 7, V and one larger than V, with the
 * scratch exactly T x min(chunk, V) floats. Outputs start as NaN (the forward
 * and dh must write every element), dW starts from a non-zero pattern (the
 * backward must add to it), and both the full (entropy + dentropy) and the
 * logprob-only (entropy and dentropy NULL) paths are checked. Finally too
 * little scratch must abort and say how much is needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "tests/expect_abort.h"
#include "test_attention_safetensors.h"

static int failures;

static void check(const char *what, double diff, double tol) {
    int ok = diff <= tol;
    printf("  %-30s max|diff| %.3e  tol %.1e  %s\n", what, diff, tol, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

static float *nan_filled(size_t n) {
    float *p = dk_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* Compares ref against got - base (what the op added onto base). */
static double added_diff(const float *got, const float *base, const float *ref, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(((double)got[i] - base[i]) - ref[i]);
        if (isnan(d)) return INFINITY;
        m = fmax(m, d);
    }
    return m;
}

static double tol_for(const float *ref, size_t n) { return 1e-5 * fmax(1.0, st_max_abs(ref, n)); }

static void test_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/lmhead/%s.safetensors", name);
    st_file f;
    st_open(&f, path);
    int hs[4], ws[4], nd;
    size_t nh, nw;
    float *h = st_get(&f, "h", "F32", hs, &nd, &nh);
    float *W = st_get(&f, "W", "F32", ws, &nd, &nw);
    int32_t *target = st_get(&f, "target", "I32", NULL, NULL, NULL);
    float *a = st_get(&f, "a", "F32", NULL, NULL, NULL), *b = st_get(&f, "b", "F32", NULL, NULL, NULL);
    float *lp_ref = st_get(&f, "logprob", "F32", NULL, NULL, NULL);
    float *ent_ref = st_get(&f, "entropy", "F32", NULL, NULL, NULL);
    float *lse_ref = st_get(&f, "lse", "F32", NULL, NULL, NULL);
    float *dh_ref = st_get(&f, "dh", "F32", NULL, NULL, NULL), *dW_ref = st_get(&f, "dW", "F32", NULL, NULL, NULL);
    float *dh_lp_ref = st_get(&f, "dh_lp", "F32", NULL, NULL, NULL);
    float *dW_lp_ref = st_get(&f, "dW_lp", "F32", NULL, NULL, NULL);
    float inv_temp = st_scalar(&f, "inv_temp");
    int T = hs[0], C = hs[1], V = ws[0];
    size_t nT = (size_t)T;

    float *base = dk_malloc(nw * sizeof(float)); /* what dW holds before the backward */
    for (size_t i = 0; i < nw; i++) base[i] = 0.25f * (float)((i * 7) % 11) - 1.0f;

    int chunks[] = {1, 7, V, V + 5};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        int chunk = chunks[c];
        printf("%s: T=%d C=%d V=%d inv_temp=%.4f chunk=%d\n", name, T, C, V, inv_temp, chunk);
        ops_ctx ctx;
        size_t scratch = nT * (size_t)(chunk < V ? chunk : V) * sizeof(float);
        if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, scratch) != DK_OK) DK_ABORT("%s", dk_error());

        float *lp = nan_filled(nT), *ent = nan_filled(nT), *lse = nan_filled(nT);
        ops_lmhead_forward(&ctx, lp, ent, lse, h, W, target, T, C, V, inv_temp, chunk, NULL);
        check("logprob", st_max_abs_diff(lp, lp_ref, nT), tol_for(lp_ref, nT));
        check("entropy", st_max_abs_diff(ent, ent_ref, nT), tol_for(ent_ref, nT));
        check("lse", st_max_abs_diff(lse, lse_ref, nT), tol_for(lse_ref, nT));

        float *dh = nan_filled(nh), *dW = dk_malloc(nw * sizeof(float));
        memcpy(dW, base, nw * sizeof(float));
        ops_lmhead_backward(&ctx, dh, dW, a, b, h, W, target, lse, ent, T, C, V, inv_temp, chunk, NULL);
        check("dh (logprob + entropy)", st_max_abs_diff(dh, dh_ref, nh), tol_for(dh_ref, nh));
        check("dW added (logprob + entropy)", added_diff(dW, base, dW_ref, nw), tol_for(dW_ref, nw));

        /* Logits kept from the forward instead of recomputed: the same
         * numbers in the same order, so the same bits. */
        float *keep = nan_filled(nT * (size_t)V), *lpk = nan_filled(nT), *entk = nan_filled(nT);
        float *lsek = nan_filled(nT), *dhk = nan_filled(nh), *dWk = dk_malloc(nw * sizeof(float));
        memcpy(dWk, base, nw * sizeof(float));
        ops_lmhead_forward(&ctx, lpk, entk, lsek, h, W, target, T, C, V, inv_temp, chunk, keep);
        ops_lmhead_backward(&ctx, dhk, dWk, a, b, h, W, target, lsek, entk, T, C, V, inv_temp, chunk, keep);
        int same = !memcmp(lpk, lp, nT * sizeof(float)) && !memcmp(entk, ent, nT * sizeof(float)) &&
                   !memcmp(lsek, lse, nT * sizeof(float)) && !memcmp(dhk, dh, nh * sizeof(float)) &&
                   !memcmp(dWk, dW, nw * sizeof(float));
        printf("  kept logits give the same bits as recomputed ones: %s\n", same ? "yes" : "NO");
        if (!same) failures++;
        free(keep), free(lpk), free(entk), free(lsek), free(dhk), free(dWk);

        /* The logprob-only path: no entropy in the forward, none in the backward. */
        float *lp2 = nan_filled(nT), *lse2 = nan_filled(nT);
        ops_lmhead_forward(&ctx, lp2, NULL, lse2, h, W, target, T, C, V, inv_temp, chunk, NULL);
        check("logprob (entropy NULL)", st_max_abs_diff(lp2, lp_ref, nT), tol_for(lp_ref, nT));
        check("lse (entropy NULL)", st_max_abs_diff(lse2, lse_ref, nT), tol_for(lse_ref, nT));
        float *dh2 = nan_filled(nh);
        memcpy(dW, base, nw * sizeof(float));
        ops_lmhead_backward(&ctx, dh2, dW, a, NULL, h, W, target, lse2, NULL, T, C, V, inv_temp, chunk, NULL);
        check("dh (logprob only)", st_max_abs_diff(dh2, dh_lp_ref, nh), tol_for(dh_lp_ref, nh));
        check("dW added (logprob only)", added_diff(dW, base, dW_lp_ref, nw), tol_for(dW_lp_ref, nw));

        ops_ctx_free(&ctx);
        free(lp), free(ent), free(lse), free(dh), free(dW), free(lp2), free(lse2), free(dh2);
    }
    void *bufs[] = {h, W, target, a, b, lp_ref, ent_ref, lse_ref, dh_ref, dW_ref, dh_lp_ref, dW_lp_ref, base};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    st_close(&f);
}

/* The forward with one float too little scratch must abort and say on
 * stderr how many bytes it needs. */
enum { SMALL_T = 5, SMALL_C = 3, SMALL_V = 11, SMALL_CHUNK = 4 };

static void forward_small_scratch(void *unused) {
    (void)unused;
    static float h[SMALL_T * SMALL_C], W[SMALL_V * SMALL_C], lp[SMALL_T], lse[SMALL_T];
    static int32_t target[SMALL_T];
    ops_ctx ctx;
    ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, (SMALL_T * SMALL_CHUNK - 1) * sizeof(float));
    ops_lmhead_forward(&ctx, lp, NULL, lse, h, W, target, SMALL_T, SMALL_C, SMALL_V, 1.0f, SMALL_CHUNK, NULL);
}

static void test_scratch_too_small(void) {
    char want[64];
    snprintf(want, sizeof want, "needs %zu", (size_t)SMALL_T * SMALL_CHUNK * sizeof(float));
    if (!expect_abort("scratch too small", forward_small_scratch, NULL, want)) failures++;
}

int main(void) {
    test_fixture("t13_c24_v61");
    test_fixture("peaked");
    test_fixture("t70_c8_v29");
    test_scratch_too_small();
    if (failures) {
        printf("test_lmhead_cpu: %d check(s) FAILED\n", failures);
        return 1;
    }
    printf("test_lmhead_cpu: all checks passed\n");
    return 0;
}
