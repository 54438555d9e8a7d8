/* test_gen_ops.c: the generation ops of the CPU backend (ops_kv_write,
 * ops_paged_attention, ops_sample) against independent references.
 *
 * 1. Paged attention vs the training attention op (ops_attention_forward,
 *    itself tested against PyTorch): packed sequences are written into a
 *    paged cache through ops_kv_write, with pages handed out in a shuffled
 *    order; queries are either the whole sequence (a prompt prefill) or its
 *    last few tokens (a continuation or a decode step), whose rows must
 *    equal the last rows of causal attention over the full sequence. GQA
 *    ratios 1, 2, 4; D = 16 and 64; page sizes 1, 3 and 16. Both are fp32
 *    with different summation orders: tolerance 2e-6.
 * 2. ops_kv_write puts each row in its slot and skips slot -1.
 * 3. ops_sample: logprobs against a double-precision log-softmax (1e-5);
 *    greedy is the first argmax; every draw lies in the truncated set
 *    computed here by sorting in double; the empirical frequencies of 40000
 *    draws (fixed seed) pass a chi-square test at p = 0.001 against
 *    softmax(logits / T) restricted to that set, for several temperature /
 *    top-k / top-p settings; a draw depends only on (seed, counter); a row
 *    with all its mass on one token draws it in 1024 rows of 2^17 tokens.
 * 4. Groups of sequences that share leading pages (ops_kv_groups): a call
 *    whose groups keep the contract gives the bits of the call without
 *    them; each way of breaking the contract aborts naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "test_ops_common.h"
#include "tests/expect_abort.h"

static ops_ctx ctx;

/* ---- paged attention --------------------------------------------------------- */

static void check_paged(int n_seqs, const int *lens, const int *nq, int Hq, int Hkv, int D, int P) {
    rng_seed((uint64_t)(n_seqs * 1000 + Hq * 100 + D * 10 + P));
    int total = 0, Tq = 0, maxp = 0;
    for (int s = 0; s < n_seqs; s++) {
        total += lens[s];
        Tq += nq[s];
        int np = (lens[s] + P - 1) / P;
        if (np > maxp) maxp = np;
    }
    const size_t qrow = (size_t)Hq * D, kvrow = (size_t)Hkv * D;
    float *q = rand_normal((size_t)total * qrow, 1.0f, 0.0f);
    float *k = rand_normal((size_t)total * kvrow, 1.0f, 0.0f);
    float *v = rand_normal((size_t)total * kvrow, 1.0f, 0.0f);
    int32_t *cu = dk_malloc((size_t)(n_seqs + 1) * sizeof(int32_t));
    cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) cu[s + 1] = cu[s] + lens[s];
    float *ref = dk_malloc((size_t)total * qrow * sizeof(float));
    float *lse = dk_malloc((size_t)total * Hq * sizeof(float));
    ops_attention_forward(&ctx, ref, lse, q, k, v, cu, n_seqs, total, Hq, Hkv, D, 1.0f / sqrtf((float)D));

    /* Pages in a shuffled order, with unused pages in between. */
    int n_pages = 2 * n_seqs * maxp + 3;
    int32_t *perm = dk_malloc((size_t)n_pages * sizeof(int32_t));
    for (int i = 0; i < n_pages; i++) perm[i] = i;
    for (int i = n_pages - 1; i > 0; i--) {
        int j = (int)(rng_next() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = dk_calloc((size_t)n_seqs * maxp, sizeof(int32_t));
    int32_t *slots = dk_malloc((size_t)total * sizeof(int32_t));
    for (int s = 0, used = 0; s < n_seqs; s++) {
        for (int p = 0; p < (lens[s] + P - 1) / P; p++) bt[s * maxp + p] = perm[2 * used++];
        for (int j = 0; j < lens[s]; j++) slots[cu[s] + j] = bt[s * maxp + j / P] * P + j % P;
    }
    size_t cache_n = (size_t)n_pages * P * kvrow;
    float *kc = rand_normal(cache_n, 100.0f, 0.0f), *vc = rand_normal(cache_n, 100.0f, 0.0f); /* garbage around */
    ops_kv_write(&ctx, kc, vc, k, v, slots, total, Hkv, D);

    /* Queries: the last nq[s] tokens of each sequence, plus two padding rows. */
    const int T = Tq + 2;
    float *qq = dk_malloc((size_t)T * qrow * sizeof(float));
    float *out = dk_malloc((size_t)T * qrow * sizeof(float));
    int32_t *cq = dk_malloc((size_t)(n_seqs + 1) * sizeof(int32_t));
    int32_t *ctx_lens = dk_malloc((size_t)n_seqs * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)T * qrow; i++) out[i] = NAN, qq[i] = 0.0f;
    cq[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        memcpy(qq + (size_t)cq[s] * qrow, q + (size_t)(cu[s + 1] - nq[s]) * qrow, (size_t)nq[s] * qrow * sizeof(float));
        cq[s + 1] = cq[s] + nq[s];
        ctx_lens[s] = lens[s];
    }
    ops_paged_attention(&ctx, out, qq, kc, vc, bt, maxp, ctx_lens, cq, n_seqs, T, Hq, Hkv, D, P,
                        1.0f / sqrtf((float)D), NULL);
    double diff = 0.0;
    for (int s = 0; s < n_seqs; s++) {
        double d = max_abs_diff(out + (size_t)cq[s] * qrow, ref + (size_t)(cu[s + 1] - nq[s]) * qrow,
                                (size_t)nq[s] * qrow);
        if (!(d <= diff)) diff = d;
    }
    double pad = max_abs(out + (size_t)Tq * qrow, 2 * qrow);
    printf("  paged vs causal attention: seqs %d Hq %d Hkv %d D %2d page %2d queries %3d: max|diff| %.2e\n", n_seqs,
           Hq, Hkv, D, P, Tq, diff);
    CHECK(diff <= 2e-6, "paged attention differs from the training attention op by %.3e", diff);
    CHECK(pad == 0.0, "padding rows after the last sequence are not zero (%g)", pad);
    free(q), free(k), free(v), free(cu), free(ref), free(lse), free(perm), free(bt), free(slots);
    free(kc), free(vc), free(qq), free(out), free(cq), free(ctx_lens);
}

static void test_paged_attention(void) {
    {
        int lens[] = {1, 7, 33, 70}, nq[] = {1, 7, 33, 70}; /* prompt prefill */
        check_paged(4, lens, nq, 4, 2, 16, 3);
        check_paged(4, lens, nq, 4, 4, 64, 16);
    }
    {
        int lens[] = {5, 17, 64, 90, 2}, nq[] = {1, 1, 1, 1, 1}; /* decode */
        check_paged(5, lens, nq, 8, 2, 16, 16);
        check_paged(5, lens, nq, 4, 1, 64, 1);
    }
    {
        int lens[] = {40, 9, 77}, nq[] = {13, 1, 30}; /* continuation prefill */
        check_paged(3, lens, nq, 4, 2, 16, 16);
        check_paged(3, lens, nq, 2, 2, 64, 3);
    }
}

static void test_kv_write(void) {
    enum { T = 5, Hkv = 2, D = 3, n_slots = 8 };
    float k[T * Hkv * D], v[T * Hkv * D], kc[n_slots * Hkv * D], vc[n_slots * Hkv * D];
    for (int i = 0; i < T * Hkv * D; i++) k[i] = (float)i, v[i] = (float)(1000 + i);
    for (int i = 0; i < n_slots * Hkv * D; i++) kc[i] = vc[i] = -1.0f;
    int32_t slots[T] = {6, -1, 0, 3, -1};
    ops_kv_write(&ctx, kc, vc, k, v, slots, T, Hkv, D);
    int bad = 0;
    for (int s = 0; s < n_slots; s++) {
        int t = -1;
        for (int j = 0; j < T; j++)
            if (slots[j] == s) t = j;
        for (int e = 0; e < Hkv * D; e++) {
            float ek = t >= 0 ? k[t * Hkv * D + e] : -1.0f, ev = t >= 0 ? v[t * Hkv * D + e] : -1.0f;
            bad += kc[s * Hkv * D + e] != ek || vc[s * Hkv * D + e] != ev;
        }
    }
    printf("  kv_write: %d misplaced elements\n", bad);
    CHECK(bad == 0, "ops_kv_write misplaced %d elements", bad);
}

/* ---- sampling ------------------------------------------------------------------ */

/* The kept set and its probabilities, computed independently: sort by the
 * tempered logit in double, keep the first k (and ties), then the shortest
 * prefix (and ties) whose renormalised probability reaches top_p. */
static const double *cmp_y;
static int cmp_desc(const void *a, const void *b) {
    double ya = cmp_y[*(const int *)a], yb = cmp_y[*(const int *)b];
    if (ya != yb) return ya > yb ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

static void reference_probs(const float *z, int V, float T, int top_k, float top_p, double *prob) {
    double *y = dk_malloc((size_t)V * sizeof(double));
    int *idx = dk_malloc((size_t)V * sizeof(int));
    for (int i = 0; i < V; i++) y[i] = (double)(z[i] / T), idx[i] = i;
    cmp_y = y;
    qsort(idx, (size_t)V, sizeof(int), cmp_desc);
    int keep = V;
    if (top_k > 0 && top_k < V) {
        keep = top_k;
        while (keep < V && y[idx[keep]] == y[idx[keep - 1]]) keep++;
    }
    double m = y[idx[0]], total = 0.0;
    for (int i = 0; i < keep; i++) total += exp(y[idx[i]] - m);
    if (top_p < 1.0f) {
        double cum = 0.0;
        int n = 0;
        while (n < keep) {
            cum += exp(y[idx[n]] - m) / total;
            n++;
            if (cum >= (double)top_p) break;
        }
        while (n < keep && y[idx[n]] == y[idx[n - 1]]) n++;
        keep = n;
    }
    double s = 0.0;
    for (int i = 0; i < V; i++) prob[i] = 0.0;
    for (int i = 0; i < keep; i++) s += exp(y[idx[i]] - m);
    for (int i = 0; i < keep; i++) prob[idx[i]] = exp(y[idx[i]] - m) / s;
    free(y);
    free(idx);
}

/* Upper 0.001 quantile of chi-square with `dof` degrees of freedom
 * (Wilson-Hilferty). */
static double chi2_crit(int dof) {
    double z = 3.0902, a = 2.0 / (9.0 * dof);
    double c = 1.0 - a + z * sqrt(a);
    return dof * c * c * c;
}

static void check_distribution(const float *z, int V, float T, int top_k, float top_p, uint64_t seed) {
    enum { N = 40000, BATCH = 2000 };
    double *prob = dk_malloc((size_t)V * sizeof(double));
    reference_probs(z, V, T, top_k, top_p, prob);
    long *count = dk_calloc((size_t)V, sizeof(long));
    float *logits = dk_malloc((size_t)BATCH * V * sizeof(float));
    sample_params *prm = dk_malloc(BATCH * sizeof(sample_params));
    int32_t tok[BATCH];
    float lp[BATCH];
    int outside = 0;
    double lp_err = 0.0;
    for (int b0 = 0; b0 < N; b0 += BATCH) {
        for (int r = 0; r < BATCH; r++) {
            memcpy(logits + (size_t)r * V, z, (size_t)V * sizeof(float));
            prm[r] = (sample_params){.temperature = T, .top_p = top_p, .top_k = top_k, .seed = seed,
                                     .counter = (uint64_t)(b0 + r)};
        }
        ops_sample(&ctx, tok, lp, logits, prm, BATCH, V);
        for (int r = 0; r < BATCH; r++) {
            if (tok[r] < 0 || tok[r] >= V || prob[tok[r]] == 0.0) {
                outside++;
                continue;
            }
            count[tok[r]]++;
            /* logprob under the full tempered softmax */
            double m = -INFINITY, s = 0.0;
            for (int i = 0; i < V; i++) m = fmax(m, (double)(z[i] / T));
            for (int i = 0; i < V; i++) s += exp((double)(z[i] / T) - m);
            double ref = (double)(z[tok[r]] / T) - m - log(s);
            lp_err = fmax(lp_err, fabs(ref - lp[r]));
        }
    }
    /* Chi-square over the kept tokens, pooling those expected < 5 times. */
    double chi2 = 0.0, pool_e = 0.0, pool_o = 0.0;
    int bins = 0, kept = 0;
    for (int i = 0; i < V; i++) {
        if (prob[i] == 0.0) continue;
        kept++;
        double e = prob[i] * N;
        if (e < 5.0) {
            pool_e += e;
            pool_o += (double)count[i];
            continue;
        }
        chi2 += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (pool_e > 0.0) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    int dof = bins - 1;
    double crit = dof > 0 ? chi2_crit(dof) : 0.0;
    printf("  sample T %.2f top_k %3d top_p %.2f: kept %3d of %d, chi2 %.1f (dof %d, crit %.1f), outside %d, "
           "logprob max|diff| %.1e\n",
           (double)T, top_k, (double)top_p, kept, V, chi2, dof, crit, outside, lp_err);
    CHECK(outside == 0, "%d draws fell outside the truncated set", outside);
    CHECK(dof == 0 || chi2 <= crit, "chi-square %.1f exceeds %.1f (dof %d)", chi2, crit, dof);
    CHECK(lp_err <= 1e-5, "logprob differs from log-softmax by %.2e", lp_err);
    free(prob), free(count), free(logits), free(prm);
}

static void test_sample(void) {
    const int V = 64;
    rng_seed(7);
    float *z = rand_normal(V, 1.5f, 0.0f);
    check_distribution(z, V, 1.0f, 0, 1.0f, 11);
    check_distribution(z, V, 0.7f, 10, 1.0f, 12);
    check_distribution(z, V, 1.3f, 0, 0.8f, 13);
    check_distribution(z, V, 1.0f, 20, 0.9f, 14);
    check_distribution(z, V, 0.5f, 0, 0.5f, 15);

    /* Greedy: first argmax, logprob at temperature 1; ties go to the lower index. */
    float g[8] = {0.5f, 2.0f, -1.0f, 2.0f, 0.0f, 1.0f, -3.0f, 2.0f}, gl[8];
    memcpy(gl, g, sizeof g);
    sample_params gp = {.temperature = 0.0f, .top_p = 1.0f};
    int32_t t;
    float lp;
    ops_sample(&ctx, &t, &lp, gl, &gp, 1, 8);
    double s = 0.0;
    for (int i = 0; i < 8; i++) s += exp((double)g[i] - 2.0);
    double ref = -log(s);
    printf("  greedy: token %d, logprob %.7f (reference %.7f)\n", t, (double)lp, ref);
    CHECK(t == 1, "greedy picked %d, expected the first argmax 1", t);
    CHECK(fabs(lp - ref) <= 1e-6, "greedy logprob %.7f vs %.7f", (double)lp, ref);

    /* top_k = 1 at any temperature is the argmax; tied values are all kept. */
    int ties_seen[8] = {0};
    for (int c = 0; c < 200; c++) {
        memcpy(gl, g, sizeof g);
        sample_params kp = {.temperature = 1.0f, .top_p = 1.0f, .top_k = 1, .seed = 3, .counter = (uint64_t)c};
        ops_sample(&ctx, &t, &lp, gl, &kp, 1, 8);
        ties_seen[t]++;
    }
    printf("  top_k = 1 over tied maxima: tokens 1/3/7 drawn %d/%d/%d times, others %d\n", ties_seen[1],
           ties_seen[3], ties_seen[7], 200 - ties_seen[1] - ties_seen[3] - ties_seen[7]);
    CHECK(ties_seen[1] + ties_seen[3] + ties_seen[7] == 200 && ties_seen[1] && ties_seen[3] && ties_seen[7],
          "top_k = 1 must draw only (and all of) the tied maxima");

    /* A draw depends on (seed, counter) only, not on the row it sits in. */
    enum { R = 6 };
    float rows[R * 64];
    sample_params rp[R];
    int32_t rt[R];
    float rl[R];
    for (int r = 0; r < R; r++) {
        memcpy(rows + r * V, z, (size_t)V * sizeof(float));
        rp[r] = (sample_params){.temperature = 1.0f, .top_p = 1.0f, .seed = 99, .counter = (uint64_t)(R - 1 - r)};
    }
    ops_sample(&ctx, rt, rl, rows, rp, R, V);
    int same = 1, differ = 0;
    for (int r = 0; r < R; r++) {
        float one[64];
        memcpy(one, z, sizeof one);
        sample_params p1 = rp[r];
        int32_t t1;
        float l1;
        ops_sample(&ctx, &t1, &l1, one, &p1, 1, V);
        same &= t1 == rt[r];
        differ += r > 0 && rt[r] != rt[0];
    }
    printf("  counter-based draws: batch == single rows: %s; %d of %d rows differ from row 0\n", same ? "yes" : "no",
           differ, R - 1);
    CHECK(same, "a draw changed with its row position");
    CHECK(differ > 0, "different counters gave the same token every time");
    free(z);

    /* A row whose mass is all on one token (the others 40 below: 2^17 of
     * them hold 6e-13 of it) draws that token, in 1024 rows of a 2^17-token
     * vocabulary: 1.3e8 uniforms, so a generator that returned u = 1 once in
     * 2^24 (an infinite race value, a token drawn whatever its logit) would
     * show about 8 times. */
    enum { PV = 1 << 17, PR = 64, PN = 1024 };
    float *peak = dk_malloc((size_t)PR * PV * sizeof(float));
    sample_params pp[PR];
    int32_t pt[PR];
    float pl[PR];
    int wrong = 0;
    for (int b0 = 0; b0 < PN; b0 += PR) {
        for (int r = 0; r < PR; r++) {
            for (int i = 0; i < PV; i++) peak[(size_t)r * PV + i] = i == 7 ? 0.0f : -40.0f;
            pp[r] = (sample_params){.temperature = 1.0f, .top_p = 1.0f, .seed = 5, .counter = (uint64_t)(b0 + r)};
        }
        ops_sample(&ctx, pt, pl, peak, pp, PR, PV);
        for (int r = 0; r < PR; r++) wrong += pt[r] != 7;
    }
    printf("  one token holding the mass: %d of %d draws took another\n", wrong, PN);
    CHECK(wrong == 0, "%d of %d draws took a token of probability 6e-13 or less", wrong, PN);
    free(peak);
}

/* ---- groups ------------------------------------------------------------------ */

/* Three decode sequences of one KV head, D 4, pages of 2: sequences 0 and 1
 * share their first two pages (4 keys), sequence 2 is alone. */
enum { G_N = 3, G_MAXP = 4, G_D = 4, G_P = 2 };
static float g_q[G_N * G_D], g_kc[12 * G_P * G_D], g_vc[12 * G_P * G_D], g_out[G_N * G_D];
static int32_t g_bt[G_N * G_MAXP] = {0, 1, 2, 0, 0, 1, 3, 4, 5, 6, 7, 0}, g_lens[G_N] = {6, 7, 5};
static int32_t g_cu[G_N + 1] = {0, 1, 2, 3};
static int32_t g_first[1] = {0}, g_end[1] = {2}, g_len[1] = {4}, g_gbt[G_MAXP] = {0, 1, 0, 0};
static int32_t g_skip[G_N] = {4, 4, 0};

static ops_kv_groups good_groups(void) {
    return (ops_kv_groups){.n = 1, .max_len = 4, .first = g_first, .end = g_end, .len = g_len,
                           .block_table = g_gbt, .skip = g_skip};
}

static void grouped_call(const ops_kv_groups *gr) {
    ops_paged_attention(&ctx, g_out, g_q, g_kc, g_vc, g_bt, G_MAXP, g_lens, g_cu, G_N, G_N, 1, 1, G_D, G_P, 0.5f, gr);
}
/* One field of the good groups (or of the call) set to a bad value, then
 * the grouped call: run in a child by expect_abort. */
typedef struct {
    int32_t *at, value;
} breakage;

static void broken_call(void *arg) {
    const breakage *b = arg;
    *b->at = b->value;
    ops_kv_groups gr = good_groups();
    grouped_call(&gr);
}

static void test_groups(void) {
    rng_seed(99);
    float *r = rand_normal(sizeof g_kc / sizeof g_kc[0] * 2 + G_N * G_D, 1.0f, 0.0f);
    memcpy(g_kc, r, sizeof g_kc), memcpy(g_vc, r + sizeof g_kc / 4, sizeof g_vc);
    memcpy(g_q, r + 2 * sizeof g_kc / 4, sizeof g_q);
    free(r);
    float plain[G_N * G_D];
    grouped_call(NULL);
    memcpy(plain, g_out, sizeof plain);
    ops_kv_groups gr = good_groups();
    grouped_call(&gr);
    CHECK(!memcmp(plain, g_out, sizeof plain), "a call with groups differs from the call without");
    static const struct {
        const char *what;
        breakage b;
        const char *want, *fail;
    } cases[] = {
        {"group page", {&g_gbt[1], 3}, "block_table", "a group page no member holds was accepted"},
        {"group skip", {&g_skip[2], 4}, "skip", "skip on a sequence in no group was accepted"},
        {"group len", {&g_len[0], 3}, "whole pages", "a group len of part of a page was accepted"},
        {"group len over queries", {&g_lens[0], 4}, "reaches sequence",
         "a group len past a member's first query was accepted"},
        {"group range", {&g_end[0], 4}, "first 0 .. end 4", "a group past the last sequence was accepted"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        breakage b = cases[i].b;
        CHECK(expect_abort(cases[i].what, broken_call, &b, cases[i].want), "%s", cases[i].fail);
    }
}

int main(void) {
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, (size_t)1 << 20) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    test_paged_attention();
    test_kv_write();
    test_sample();
    test_groups();
    ops_ctx_free(&ctx);
    return test_finish("test_gen_ops");
}
