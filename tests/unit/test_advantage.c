/* test_advantage.c: returns and the trloo / grpo / rloo advantages of
 * rl/advantage.c on small batches computed by hand: several turns, gamma < 1,
 * turns never reached, a turn dropped by PRS in the middle of a sample,
 * groups of one, a sample with no valid turn, two tasks; and the errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl/advantage.h"
#include "tests/check.h"

static double max_err = 0;

static void expect(const char *what, const float *got, const double *want, int n) {
    for (int i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (e > max_err) max_err = e;
        CHECK(e <= 1e-6, "%s[%d] = %.7f, expected %.7f", what, i, got[i], want[i]);
    }
}

static void run(adv_estimator est, double gamma, int grpo_std, int nt, int ns, int mt, const float *r,
                const uint8_t *v, float *G, float *A) {
    adv_config c;
    adv_config_default(&c);
    c.estimator = est;
    c.gamma = gamma;
    c.grpo_std = grpo_std;
    dk_status s = adv_compute(&c, nt, ns, mt, r, v, G, A);
    CHECK(s == DK_OK, "adv_compute: %s", dk_error());
}

int main(void) {
    float G[32], A[32];

    /* One task, 3 samples, 2 turns; sample 2 stopped after turn 0.
     * rewards s0 [0.5, 1.0], s1 [0, 0.2], s2 [0.3, -]. */
    const float r1[] = {0.5f, 1.0f, 0.0f, 0.2f, 0.3f, 0.0f};
    const uint8_t v1[] = {1, 1, 1, 1, 1, 0};
    /* gamma 1: G s0 [1.5, 1.0], s1 [0.2, 0.2], s2 [0.3, 0].
     * trloo turn 0, N = 3: 1.5 - (0.2+0.3)/2 = 1.25; 0.2 - (1.5+0.3)/2 = -0.7;
     * 0.3 - (1.5+0.2)/2 = -0.55. Turn 1, N = 2 (s2 invalid): +-0.8, s2 0. */
    run(ADV_TRLOO, 1.0, 1, 1, 3, 2, r1, v1, G, A);
    expect("returns", G, (const double[]){1.5, 1.0, 0.2, 0.2, 0.3, 0.0}, 6);
    expect("trloo", A, (const double[]){1.25, 0.8, -0.7, -0.8, -0.55, 0.0}, 6);
    /* gamma 0.5: G s0 [0.5 + 0.5, 1.0], s1 [0 + 0.1, 0.2], s2 [0.3, 0].
     * turn 0: 1.0 - 0.2 = 0.8; 0.1 - 0.65 = -0.55; 0.3 - 0.55 = -0.25. */
    run(ADV_TRLOO, 0.5, 1, 1, 3, 2, r1, v1, G, A);
    expect("returns g=0.5", G, (const double[]){1.0, 1.0, 0.1, 0.2, 0.3, 0.0}, 6);
    expect("trloo g=0.5", A, (const double[]){0.8, 0.8, -0.55, -0.8, -0.25, 0.0}, 6);
    /* grpo, gamma 1, turn 0: mean 2/3, deviations 5/6, -7/15, -11/30, sample
     * std sqrt((25/36 + 49/225 + 121/900) / 2) = 0.7234178; turn 1: +-0.4
     * over std 0.4 * sqrt(2): +-1/sqrt(2) (less the 1e-6 eps). */
    run(ADV_GRPO, 1.0, 1, 1, 3, 2, r1, v1, G, A);
    expect("grpo", A, (const double[]){1.1519376, 0.7071055, -0.6450851, -0.7071055, -0.5068525, 0.0}, 6);
    run(ADV_GRPO, 1.0, 0, 1, 3, 2, r1, v1, G, A);
    expect("grpo no std", A, (const double[]){5.0 / 6, 0.4, -7.0 / 15, -0.4, -11.0 / 30, 0.0}, 6);
    /* rloo: trajectory returns 1.5, 0.2, 0.3 -> 1.25, -0.7, -0.55 on every
     * valid turn of the sample. */
    run(ADV_RLOO, 1.0, 1, 1, 3, 2, r1, v1, G, A);
    expect("rloo", A, (const double[]){1.25, 1.25, -0.7, -0.7, -0.55, 0.0}, 6);

    /* PRS dropped s0's middle turn: it leaves the turn-1 group (s1 alone there,
     * A = G) but its reward 0.9 stays in s0's turn-0 return. Sample s2 has no
     * valid turn at all (every turn dropped) and joins no group, not even
     * rloo's. rewards s0 [0.2, 0.9, 0.4], s1 [0.1, 0.1, 0.1], s2 [5, 5, 5].
     * G s0 [1.5, 1.3, 0.4], s1 [0.3, 0.2, 0.1], s2 [15, 10, 5]. */
    const float r2[] = {0.2f, 0.9f, 0.4f, 0.1f, 0.1f, 0.1f, 5, 5, 5};
    const uint8_t v2[] = {1, 0, 1, 1, 1, 1, 0, 0, 0};
    run(ADV_TRLOO, 1.0, 1, 1, 3, 3, r2, v2, G, A);
    expect("returns prs", G, (const double[]){1.5, 1.3, 0.4, 0.3, 0.2, 0.1, 15, 10, 5}, 9);
    expect("trloo prs", A, (const double[]){1.2, 0, 0.3, -1.2, 0.2, -0.3, 0, 0, 0}, 9);
    run(ADV_GRPO, 1.0, 0, 1, 3, 3, r2, v2, G, A);
    expect("grpo prs", A, (const double[]){0.6, 0, 0.15, -0.6, 0.2, -0.15, 0, 0, 0}, 9);
    /* rloo over s0 and s1 only: 1.5 - 0.3 = 1.2, -1.2. */
    run(ADV_RLOO, 1.0, 1, 1, 3, 3, r2, v2, G, A);
    expect("rloo prs", A, (const double[]){1.2, 0, 1.2, -1.2, -1.2, -1.2, 0, 0, 0}, 9);

    /* Groups of one everywhere: one sample per task, A = G (per turn for
     * trloo and grpo; the trajectory's G_1 on every turn for rloo); two
     * tasks never mix. task 0 [0.4, 0.6], task 1 [1, -]. */
    const float r3[] = {0.4f, 0.6f, 1.0f, 0.0f};
    const uint8_t v3[] = {1, 1, 1, 0};
    for (int e = 0; e < 3; e++) {
        run((adv_estimator)e, 1.0, 1, 2, 1, 2, r3, v3, G, A);
        const double want[] = {1.0, e == ADV_RLOO ? 1.0 : 0.6, 1.0, 0.0};
        expect(adv_estimator_name((adv_estimator)e), A, want, 4);
    }
    /* Two tasks x 2 samples x 1 turn: groups are per task. */
    const float r4[] = {1, 0, 0.5f, 0.25f};
    const uint8_t v4[] = {1, 1, 1, 1};
    run(ADV_TRLOO, 1.0, 1, 2, 2, 1, r4, v4, G, A);
    expect("two tasks", A, (const double[]){1, -1, 0.25, -0.25}, 4);
    /* Equal returns: zero advantage (and no division by a zero std). */
    const float r5[] = {0.7f, 0.7f, 0.7f};
    const uint8_t v5[] = {1, 1, 1};
    run(ADV_GRPO, 1.0, 1, 1, 3, 1, r5, v5, G, A);
    expect("grpo equal", A, (const double[]){0, 0, 0}, 3);

    /* Errors. */
    adv_config c;
    adv_config_default(&c);
    const float bad[] = {0.1f, NAN, 0, 0};
    CHECK(adv_compute(&c, 1, 2, 2, bad, v4, NULL, A) == DK_ERR_RUNTIME &&
              strstr(dk_error(), "task 0 sample 0 turn 1"),
          "NaN reward: %s", dk_error());
    c.gamma = 1.5;
    CHECK(adv_compute(&c, 1, 2, 2, r4, v4, NULL, A) == DK_ERR_USAGE && strstr(dk_error(), "gamma"), "gamma: %s",
          dk_error());
    adv_estimator e;
    CHECK(adv_estimator_parse("ppo", &e) == DK_ERR_USAGE && strstr(dk_error(), "'ppo'"), "parse: %s", dk_error());
    CHECK(adv_estimator_parse("rloo", &e) == DK_OK && e == ADV_RLOO, "parse rloo");

    printf("advantage: trloo/grpo/rloo on hand-computed cases, max abs err %.2e (limit 1e-6)\n", max_err);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
