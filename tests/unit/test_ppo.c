/* test_ppo.c: rl/ppo.c against the PyTorch re-implementation of
 * tests/make_ppo_fixtures.py: for every aggregation mode and option
 * combination, the loss, its terms, the statistics and the gradients with
 * respect to the logprobs and entropies (autograd) must agree to 1e-6
 * relative. Also: micro-batches with the mini-batch denominator add up to the
 * full-batch gradient, ppo_count agrees with the loss's counts, and bad
 * configs and inputs fail with messages that name the culprit. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "rl/ppo.h"
#include "tests/check.h"

static double rel_err(double got, double want) {
    return fabs(got - want) / (fabs(want) > 1e-12 ? fabs(want) : 1e-12);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsNumber(v)) {
        fprintf(stderr, "fixture: missing number '%s'\n", k);
        exit(1);
    }
    return v->valuedouble;
}

/* A float array of the case, or NULL when the case omits it. */
static float *farr(const cJSON *o, const char *k, int *n) {
    const cJSON *a = cJSON_GetObjectItem(o, k);
    if (!cJSON_IsArray(a)) return NULL;
    *n = cJSON_GetArraySize(a);
    float *v = dk_malloc((size_t)*n * sizeof *v + 1);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = (float)e->valuedouble;
    return v;
}

static double max_err_fixture = 0, max_err_grad = 0;
static int n_cases = 0;

static void run_case(const cJSON *c) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    const cJSON *cf = cJSON_GetObjectItem(c, "config"), *ex = cJSON_GetObjectItem(c, "expect");
    ppo_config cfg;
    ppo_config_default(&cfg);
    cfg.clip_low = num(cf, "clip_low");
    cfg.clip_high = num(cf, "clip_high");
    cfg.dual_clip = num(cf, "dual_clip");
    cfg.kl_coef = num(cf, "kl_coef");
    cfg.entropy_coef = num(cf, "entropy_coef");
    cfg.tis_cap = num(cf, "tis_cap");
    cfg.rs_token_band = num(cf, "rs_token_band");
    cfg.rs_seq_band = num(cf, "rs_seq_band");
    cfg.rs_veto = num(cf, "rs_veto");
    if (ppo_agg_parse(cJSON_GetObjectItem(cf, "agg")->valuestring, &cfg.agg)) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
    int T = 0, n = 0, ns = 0;
    const cJSON *cu = cJSON_GetObjectItem(c, "cu_seqlens"), *mk = cJSON_GetObjectItem(c, "mask");
    ns = cJSON_GetArraySize(cu) - 1;
    int32_t *cus = dk_malloc((size_t)(ns + 1) * sizeof *cus);
    for (int i = 0; i <= ns; i++) cus[i] = cJSON_GetArrayItem(cu, i)->valueint;
    T = cus[ns];
    uint8_t *mask = dk_malloc((size_t)T);
    for (int i = 0; i < T; i++) mask[i] = (uint8_t)cJSON_GetArrayItem(mk, i)->valueint;
    ppo_batch b = {.T = T, .n_seqs = ns, .cu_seqlens = cus, .mask = mask};
    b.logp = farr(c, "logp", &n);
    b.logp_old = farr(c, "logp_old", &n);
    b.adv = farr(c, "adv", &n);
    b.logp_ref = farr(c, "logp_ref", &n);
    b.entropy = farr(c, "entropy", &n);
    b.logp_rollout = farr(c, "logp_rollout", &n);

    float *dlp = dk_malloc((size_t)T * sizeof *dlp), *dent = dk_malloc((size_t)T * sizeof *dent);
    ppo_stats st;
    dk_status s = ppo_loss(&cfg, &b, num(c, "denom"), dlp, dent, &st);
    CHECK(s == DK_OK, "%s: %s", name, dk_error());
    const struct {
        const char *k;
        double v;
    } got[] = {
        {"loss", st.loss},
        {"pg_loss", st.pg_loss},
        {"kl_loss", st.kl_loss},
        {"entropy", st.entropy},
        {"clip_frac_low", st.clip_frac_low},
        {"clip_frac_high", st.clip_frac_high},
        {"clip_frac_dual", st.clip_frac_dual},
        {"approx_kl", st.approx_kl},
        {"ratio_mean", st.ratio_mean},
        {"ratio_max", st.ratio_max},
        {"ref_kl", st.ref_kl},
        {"tis_mean", st.tis_mean},
        {"tis_capped_frac", st.tis_capped_frac},
        {"mismatch_mean", st.mismatch_mean},
        {"mismatch_max", st.mismatch_max},
        {"n_tokens", st.n_tokens},
        {"n_seqs", st.n_seqs},
        {"n_tokens_rejected", st.n_tokens_rejected},
        {"n_seqs_rejected", st.n_seqs_rejected},
    };
    for (size_t i = 0; i < sizeof got / sizeof got[0]; i++) {
        double want = num(ex, got[i].k), e = rel_err(got[i].v, want);
        if (e > max_err_fixture) max_err_fixture = e;
        CHECK(e <= 1e-6, "%s: %s = %.12g, PyTorch %.12g", name, got[i].k, got[i].v, want);
    }
    const cJSON *gl = cJSON_GetObjectItem(ex, "dlogprob"), *ge = cJSON_GetObjectItem(ex, "dentropy");
    for (int t = 0; t < T; t++) {
        double e = rel_err(dlp[t], cJSON_GetArrayItem(gl, t)->valuedouble);
        if (e > max_err_grad) max_err_grad = e;
        CHECK(e <= 1e-6, "%s: dlogprob[%d] = %.9g, autograd %.9g", name, t, dlp[t],
              cJSON_GetArrayItem(gl, t)->valuedouble);
        if (cJSON_IsArray(ge)) {
            e = rel_err(dent[t], cJSON_GetArrayItem(ge, t)->valuedouble);
            if (e > max_err_grad) max_err_grad = e;
            CHECK(e <= 1e-6, "%s: dentropy[%d] = %.9g, autograd %.9g", name, t, dent[t],
                  cJSON_GetArrayItem(ge, t)->valuedouble);
        }
    }
    int nt, nsq;
    CHECK(ppo_count(&cfg, &b, &nt, &nsq) == DK_OK && nt == st.n_tokens && nsq == st.n_seqs,
          "%s: ppo_count disagrees with ppo_loss", name);

    /* Two micro-batches (the sequences split in halves) with the whole
     * batch's denominator give gradients that add up to the full batch's. */
    if (num(c, "denom") == 0 && st.n_tokens > 0) {
        double D = cfg.agg == PPO_AGG_TOKEN_MEAN ? st.n_tokens : st.n_seqs;
        int half = ns / 2, split = cus[half];
        int32_t *cu2 = dk_malloc((size_t)(ns + 1) * sizeof *cu2);
        for (int i = half; i <= ns; i++) cu2[i - half] = cus[i] - split;
        ppo_batch b1 = b, b2 = b;
        b1.n_seqs = half;
        b1.T = split;
        b2.n_seqs = ns - half;
        b2.T = T - split;
        b2.cu_seqlens = cu2;
        b2.mask += split;
        b2.logp += split;
        b2.logp_old += split;
        b2.adv += split;
        if (b2.logp_ref) b2.logp_ref += split;
        if (b2.entropy) b2.entropy += split;
        if (b2.logp_rollout) b2.logp_rollout += split;
        float *g = dk_malloc((size_t)T * sizeof *g), *h = dk_malloc((size_t)T * sizeof *h);
        ppo_stats s1, s2;
        CHECK(ppo_loss(&cfg, &b1, D, g, h, &s1) == DK_OK && ppo_loss(&cfg, &b2, D, g + split, h + split, &s2) == DK_OK,
              "%s: micro-batch: %s", name, dk_error());
        CHECK(fabs(s1.loss + s2.loss - st.loss) <= 1e-12 + 1e-9 * fabs(st.loss), "%s: micro-batch losses", name);
        for (int t = 0; t < T; t++) CHECK(g[t] == dlp[t], "%s: micro-batch dlogprob[%d]", name, t);
        free(cu2);
        free(g);
        free(h);
    }
    n_cases++;
    free(cus);
    free(mask);
    free((void *)b.logp);
    free((void *)b.logp_old);
    free((void *)b.adv);
    free((void *)b.logp_ref);
    free((void *)b.entropy);
    free((void *)b.logp_rollout);
    free(dlp);
    free(dent);
}

/* Bad configs and inputs fail, naming the key or token. */
static void check_errors(void) {
    ppo_config c;
    ppo_config_default(&c);
    CHECK(ppo_config_check(&c) == DK_OK, "defaults rejected: %s", dk_error());
    c.dual_clip = 0.5;
    CHECK(ppo_config_check(&c) == DK_ERR_USAGE && strstr(dk_error(), "dual_clip"), "dual_clip 0.5: %s", dk_error());
    ppo_config_default(&c);
    c.clip_low = 1.0;
    CHECK(ppo_config_check(&c) == DK_ERR_USAGE && strstr(dk_error(), "clip_low"), "clip_low 1: %s", dk_error());
    ppo_config_default(&c);
    ppo_agg a;
    CHECK(ppo_agg_parse("seq-mean", &a) == DK_ERR_USAGE && strstr(dk_error(), "seq-mean"), "agg: %s", dk_error());

    int32_t cu[3] = {0, 2, 4};
    uint8_t mask[4] = {0, 1, 1, 1};
    float lp[4] = {-1, -1, NAN, -1}, adv[4] = {1, 1, 1, 1}, d[4];
    ppo_batch b = {.T = 4, .n_seqs = 2, .cu_seqlens = cu, .mask = mask, .logp = lp, .logp_old = lp, .adv = adv};
    CHECK(ppo_loss(&c, &b, 0, d, NULL, NULL) == DK_ERR_RUNTIME && strstr(dk_error(), "token 2 (sequence 1)"),
          "NaN logp: %s", dk_error());
    lp[2] = -1;
    c.kl_coef = 0.1;
    CHECK(ppo_loss(&c, &b, 0, d, NULL, NULL) == DK_ERR_USAGE && strstr(dk_error(), "reference"), "kl: %s",
          dk_error());
    c.kl_coef = 0;
    c.rs_veto = 1e-4;
    CHECK(ppo_loss(&c, &b, 0, d, NULL, NULL) == DK_ERR_USAGE && strstr(dk_error(), "rollout"), "veto: %s",
          dk_error());
    c.rs_veto = 0;
    cu[2] = 3;
    CHECK(ppo_loss(&c, &b, 0, d, NULL, NULL) == DK_ERR_USAGE && strstr(dk_error(), "cu_seqlens"), "cu: %s",
          dk_error());
    cu[2] = 4;
    /* Masked-out NaNs are fine (prompt tokens carry no logprob), and a batch
     * with nothing to learn from has loss 0 and zero gradients. */
    lp[0] = NAN;
    memset(mask, 0, sizeof mask);
    ppo_stats st;
    CHECK(ppo_loss(&c, &b, 0, d, NULL, &st) == DK_OK && st.loss == 0 && d[1] == 0 && st.n_tokens == 0,
          "empty batch: %s", dk_error());
}

int main(void) {
    const char *src = getenv("DK_SOURCE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/ppo/cases.json", src ? src : ".");
    char *text;
    if (dk_read_file(path, &text, NULL)) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        fprintf(stderr, "%s: not JSON\n", path);
        return 1;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) run_case(c);
    cJSON_Delete(j);
    check_errors();
    printf("ppo: %d cases vs PyTorch: max rel err loss/stats %.2e, gradients %.2e (limit 1e-6)\n", n_cases,
           max_err_fixture, max_err_grad);
    CHECK(n_cases >= 96, "only %d cases in the fixture", n_cases);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
