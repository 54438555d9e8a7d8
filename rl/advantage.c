/* advantage.c: discounted per-turn returns and the trloo / grpo / rloo
 * baselines over a [tasks x samples x turns] batch (see advantage.h). Sums
 * run in double so the group means do not depend on float rounding order. */
#include "rl/advantage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void adv_config_default(adv_config *c) {
    c->estimator = ADV_TRLOO;
    c->gamma = 1.0;
    c->grpo_std = 1;
    c->grpo_eps = 1e-6;
}

const char *const adv_estimator_names[ADV_N_ESTIMATORS] = {
    [ADV_TRLOO] = "trloo", [ADV_GRPO] = "grpo", [ADV_RLOO] = "rloo"};

const char *adv_estimator_name(adv_estimator e) {
    return (unsigned)e < ADV_N_ESTIMATORS ? adv_estimator_names[e] : "?";
}

dk_status adv_estimator_parse(const char *s, adv_estimator *out) {
    for (int i = 0; i < ADV_N_ESTIMATORS; i++)
        if (strcmp(s, adv_estimator_names[i]) == 0) {
            *out = (adv_estimator)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown advantage estimator '%s' (trloo|grpo|rloo)", s);
}

/* A over one group of n values g[] (n >= 1), written to a[]. */
static void group_advantage(const adv_config *c, const double *g, int n, double *a) {
    if (n == 1) {
        a[0] = g[0];
        return;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += g[i];
    double mean = sum / n;
    if (c->estimator != ADV_GRPO) { /* leave one out: G_i - (sum - G_i) / (n - 1) */
        for (int i = 0; i < n; i++) a[i] = g[i] - (sum - g[i]) / (n - 1);
        return;
    }
    double scale = 1.0;
    if (c->grpo_std) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (g[i] - mean) * (g[i] - mean);
        scale = 1.0 / (sqrt(ss / (n - 1)) + c->grpo_eps);
    }
    for (int i = 0; i < n; i++) a[i] = (g[i] - mean) * scale;
}

dk_status adv_compute(const adv_config *c, int n_tasks, int n_samples, int max_turns, const float *rewards,
                      const uint8_t *valid, float *returns, float *adv) {
    if (n_tasks < 1 || n_samples < 1 || max_turns < 1)
        return dk_fail(DK_ERR_USAGE, "advantages: bad batch shape %d tasks x %d samples x %d turns", n_tasks,
                       n_samples, max_turns);
    if (!(c->gamma >= 0 && c->gamma <= 1))
        return dk_fail(DK_ERR_USAGE, "advantages: gamma %g is outside [0, 1]", c->gamma);
    if ((unsigned)c->estimator > ADV_RLOO)
        return dk_fail(DK_ERR_USAGE, "advantages: unknown estimator %d", (int)c->estimator);
    if (c->estimator == ADV_GRPO && !(c->grpo_eps >= 0))
        return dk_fail(DK_ERR_USAGE, "advantages: grpo eps %g is negative", c->grpo_eps);
    const long n = (long)n_tasks * n_samples * max_turns;
    for (long i = 0; i < n; i++)
        if (!isfinite(rewards[i]))
            return dk_fail(DK_ERR_RUNTIME, "advantages: reward of task %ld sample %ld turn %ld is %g",
                           i / max_turns / n_samples, i / max_turns % n_samples, i % max_turns, rewards[i]);

    double *G = dk_malloc((size_t)n * sizeof *G);
    for (long s = 0; s < n / max_turns; s++) {
        double acc = 0;
        for (int t = max_turns - 1; t >= 0; t--) {
            acc = rewards[s * max_turns + t] + c->gamma * acc;
            G[s * max_turns + t] = acc;
        }
    }
    if (returns)
        for (long i = 0; i < n; i++) returns[i] = (float)G[i];
    for (long i = 0; i < n; i++) adv[i] = 0.0f;

    double *g = dk_malloc((size_t)n_samples * sizeof *g), *a = dk_malloc((size_t)n_samples * sizeof *a);
    int *who = dk_malloc((size_t)n_samples * sizeof *who);
    for (int task = 0; task < n_tasks; task++) {
        const long base = (long)task * n_samples * max_turns;
        if (c->estimator == ADV_RLOO) {
            int m = 0;
            for (int s = 0; s < n_samples; s++) {
                int any = 0;
                for (int t = 0; t < max_turns; t++) any |= valid[base + (long)s * max_turns + t] != 0;
                if (any) {
                    who[m] = s;
                    g[m++] = G[base + (long)s * max_turns];
                }
            }
            if (m == 0) continue;
            group_advantage(c, g, m, a);
            for (int k = 0; k < m; k++)
                for (int t = 0; t < max_turns; t++) {
                    long i = base + (long)who[k] * max_turns + t;
                    if (valid[i]) adv[i] = (float)a[k];
                }
            continue;
        }
        for (int t = 0; t < max_turns; t++) {
            int m = 0;
            for (int s = 0; s < n_samples; s++) {
                long i = base + (long)s * max_turns + t;
                if (valid[i]) {
                    who[m] = s;
                    g[m++] = G[i];
                }
            }
            if (m == 0) continue;
            group_advantage(c, g, m, a);
            for (int k = 0; k < m; k++) adv[base + (long)who[k] * max_turns + t] = (float)a[k];
        }
    }
    free(G);
    free(g);
    free(a);
    free(who);
    return DK_OK;
}
