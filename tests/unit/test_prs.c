/* test_prs.c: profiling-based rejection sampling (rl/prs.c): the hard and
 * soft keep rules at and around their edges, what is never dropped
 * (incorrect, unprofiled and already invalid turns), the soft keep rate over
 * many draws against its probability, the draw's independence from batch
 * order (keyed by task id, not position) and its change with the step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/prs.h"
#include "tests/check.h"

static prs_config cfg(prs_mode m) {
    prs_config c;
    prs_config_default(&c);
    c.mode = m;
    c.seed = 1234;
    return c;
}

static void check_probs(void) {
    prs_config hard = cfg(PRS_HARD), soft = cfg(PRS_SOFT), off = cfg(PRS_OFF);
    const struct {
        double cov, hard, soft;
    } k[] = {{0.0, 0, 0},   {0.2, 0, 0},     {0.29, 0, 0},  {0.3, 1, 0},   {0.325, 1, 0.25},
             {0.35, 1, 0.5}, {0.39, 1, 0.9}, {0.4, 1, 1},   {0.75, 1, 1},  {1.0, 1, 1}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        CHECK(prs_keep_prob(&hard, 1, k[i].cov) == k[i].hard, "hard cov %g: %g", k[i].cov,
              prs_keep_prob(&hard, 1, k[i].cov));
        CHECK(fabs(prs_keep_prob(&soft, 1, k[i].cov) - k[i].soft) < 1e-12, "soft cov %g: %g", k[i].cov,
              prs_keep_prob(&soft, 1, k[i].cov));
        CHECK(prs_keep_prob(&off, 1, k[i].cov) == 1, "off cov %g", k[i].cov);
        CHECK(prs_keep_prob(&hard, 0, k[i].cov) == 1 && prs_keep_prob(&soft, 0, k[i].cov) == 1,
              "an incorrect turn is never dropped (cov %g)", k[i].cov);
    }
    CHECK(prs_keep_prob(&hard, 1, NAN) == 1 && prs_keep_prob(&soft, 1, NAN) == 1, "unprofiled turns are kept");
}

/* A batch of n_tasks x 8 samples x 3 turns, all valid and correct at one coverage. */
enum { NS = 8, MT = 3 };

static void soft_rate(double cov, int n_tasks) {
    prs_config c = cfg(PRS_SOFT);
    long n = (long)n_tasks * NS * MT;
    uint8_t *valid = malloc(n), *correct = malloc(n);
    float *coverage = malloc(n * sizeof *coverage);
    for (long i = 0; i < n; i++) valid[i] = correct[i] = 1, coverage[i] = (float)cov;
    prs_stats st;
    prs_apply(&c, 7, n_tasks, NS, MT, NULL, correct, coverage, valid, &st);
    double p = prs_keep_prob(&c, 1, (float)cov), kept = 1.0 - (double)st.n_dropped / n;
    double sigma = sqrt(p * (1 - p) / n);
    printf("prs soft: coverage %.2f keep probability %.3f, kept %.4f of %ld turns (%.1f sigma)\n", cov, p, kept, n,
           sigma > 0 ? fabs(kept - p) / sigma : 0.0);
    CHECK(st.n_correct == n, "counted %d correct turns of %ld", st.n_correct, n);
    CHECK(fabs(kept - p) <= 5 * sigma + 1e-12, "keep rate %.4f vs probability %.4f", kept, p);
    free(valid);
    free(correct);
    free(coverage);
}

static void check_batch_rules(void) {
    /* 2 tasks x 2 samples x 3 turns, hard mode. Per turn: (valid, correct, coverage). */
    const uint8_t valid0[12] = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    const uint8_t correct[12] = {1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1};
    const float cov[12] = {0.1f, 0.5f, 0.0f, 0.3f, 0.29f, 0.0f, NAN, 0.05f, 0.9f, 0.2f, 0.31f, 0.0f};
    const uint8_t want_hard[12] = {0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0};
    uint8_t v[12];
    memcpy(v, valid0, sizeof v);
    prs_config c = cfg(PRS_HARD);
    prs_stats st;
    prs_apply(&c, 3, 2, 2, 3, NULL, correct, cov, v, &st);
    for (int i = 0; i < 12; i++) CHECK(v[i] == want_hard[i], "hard: turn %d valid %d, expected %d", i, v[i], want_hard[i]);
    /* correct and valid: 0,1,3,4,6,7,8,10,11 = 9; dropped 0,4,7,11 = 4; NaN at 6. */
    CHECK(st.n_correct == 9 && st.n_dropped == 4 && st.n_unprofiled == 1, "hard stats %d %d %d", st.n_correct,
          st.n_dropped, st.n_unprofiled);
    memcpy(v, valid0, sizeof v);
    c = cfg(PRS_OFF);
    prs_apply(&c, 3, 2, 2, 3, NULL, correct, cov, v, &st);
    CHECK(memcmp(v, valid0, sizeof v) == 0 && st.n_dropped == 0, "off changed the mask");
}

/* The decision depends on (seed, step, task id, sample, turn) only. */
static void check_keying(void) {
    enum { NT = 64 };
    prs_config c = cfg(PRS_SOFT);
    static uint8_t v1[NT * NS * MT], v2[NT * NS * MT], v3[NT * NS * MT], correct[NT * NS * MT];
    static float cov[NT * NS * MT], cov_r[NT * NS * MT];
    int64_t ids[NT], ids_r[NT];
    for (int i = 0; i < NT * NS * MT; i++) correct[i] = 1, cov[i] = 0.35f, v1[i] = v2[i] = v3[i] = 1;
    for (int t = 0; t < NT; t++) ids[t] = 1000 + t, ids_r[t] = 1000 + (NT - 1 - t);
    memcpy(cov_r, cov, sizeof cov);
    prs_apply(&c, 5, NT, NS, MT, ids, correct, cov, v1, NULL);
    prs_apply(&c, 5, NT, NS, MT, ids_r, correct, cov_r, v2, NULL); /* the same tasks in reverse order */
    int same = 1;
    for (int t = 0; t < NT; t++)
        if (memcmp(v1 + t * NS * MT, v2 + (NT - 1 - t) * NS * MT, NS * MT) != 0) same = 0;
    CHECK(same, "decisions depend on the batch order");
    prs_apply(&c, 6, NT, NS, MT, ids, correct, cov, v3, NULL);
    int diff = 0;
    for (int i = 0; i < NT * NS * MT; i++) diff += v1[i] != v3[i];
    double frac = (double)diff / (NT * NS * MT); /* independent draws at p = 0.5 differ half the time */
    printf("prs keying: reordered batch identical; step 5 vs 6 differ on %.3f of turns (expected 0.5)\n", frac);
    CHECK(fabs(frac - 0.5) < 0.06, "step change altered %.3f of the decisions", frac);
    /* Uniform draws: mean 1/2, 10 equal bins. */
    int bins[10] = {0};
    double sum = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = prs_uniform(42, i / 1000, i % 1000, i % 7, i % 3);
        CHECK(u >= 0 && u < 1, "draw %g outside [0, 1)", u);
        sum += u;
        bins[(int)(u * 10)]++;
    }
    double chi2 = 0;
    for (int b = 0; b < 10; b++) chi2 += (bins[b] - n / 10.0) * (bins[b] - n / 10.0) / (n / 10.0);
    printf("prs uniform: mean %.4f, chi2 over 10 bins %.1f (9 dof, 0.1%% level 27.9)\n", sum / n, chi2);
    CHECK(fabs(sum / n - 0.5) < 0.005 && chi2 < 27.9, "draws are not uniform");
}

int main(void) {
    check_probs();
    check_batch_rules();
    soft_rate(0.35, 200);
    soft_rate(0.32, 200);
    soft_rate(0.38, 200);
    check_keying();
    prs_mode m;
    CHECK(prs_mode_parse("medium", &m) == DK_ERR_USAGE && strstr(dk_error(), "'medium'"), "parse: %s", dk_error());
    prs_config c = cfg(PRS_SOFT);
    c.width = 0;
    CHECK(prs_config_check(&c) == DK_ERR_USAGE && strstr(dk_error(), "width"), "width 0: %s", dk_error());
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
