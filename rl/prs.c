/* prs.c: hard and soft profiling-based rejection of correct but lazy turns
 * (see prs.h), with a keyed hash as the random source. */
#include "rl/prs.h"

#include <math.h>
#include <string.h>

void prs_config_default(prs_config *c) {
    c->mode = PRS_HARD;
    c->threshold = 0.3;
    c->width = 0.1;
    c->seed = 0;
}

const char *const prs_mode_names[PRS_N_MODES] = {[PRS_OFF] = "off", [PRS_HARD] = "hard", [PRS_SOFT] = "soft"};

const char *prs_mode_name(prs_mode m) {
    return (unsigned)m < PRS_N_MODES ? prs_mode_names[m] : "?";
}

dk_status prs_mode_parse(const char *s, prs_mode *out) {
    for (int i = 0; i < PRS_N_MODES; i++)
        if (strcmp(s, prs_mode_names[i]) == 0) {
            *out = (prs_mode)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown prs mode '%s' (off|hard|soft)", s);
}

dk_status prs_config_check(const prs_config *c) {
    if ((unsigned)c->mode > PRS_SOFT) return dk_fail(DK_ERR_USAGE, "prs: unknown mode %d", (int)c->mode);
    if (!(c->threshold >= 0 && c->threshold <= 1))
        return dk_fail(DK_ERR_USAGE, "prs: threshold %g is outside [0, 1]", c->threshold);
    if (c->mode == PRS_SOFT && !(c->width > 0 && isfinite(c->width)))
        return dk_fail(DK_ERR_USAGE, "prs: soft width %g must be > 0", c->width);
    return DK_OK;
}

double prs_keep_prob(const prs_config *c, int correct, double coverage) {
    if (c->mode == PRS_OFF || !correct || isnan(coverage)) return 1.0;
    if (c->mode == PRS_HARD) return coverage < c->threshold ? 0.0 : 1.0;
    double p = (coverage - c->threshold) / c->width;
    return p < 0 ? 0.0 : p > 1 ? 1.0 : p;
}

/* splitmix64's finaliser: a bijective mix with full avalanche. */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double prs_uniform(uint64_t seed, int64_t step, int64_t task, int sample, int turn) {
    /* Chained so that each field's change flips the whole key; the constant
     * separates this stream from the other users of the run seed. */
    uint64_t h = mix64(seed ^ 0x5052535f6b656570ull);
    h = mix64(h ^ (uint64_t)step);
    h = mix64(h ^ (uint64_t)task);
    h = mix64(h ^ (uint64_t)(uint32_t)sample);
    h = mix64(h ^ (uint64_t)(uint32_t)turn);
    return (double)(h >> 11) * 0x1.0p-53;
}

int prs_keep(const prs_config *c, int64_t step, int64_t task, int sample, int turn, int correct, double coverage) {
    double p = prs_keep_prob(c, correct, coverage);
    if (p >= 1.0) return 1;
    if (p <= 0.0) return 0;
    return prs_uniform(c->seed, step, task, sample, turn) < p;
}

void prs_apply(const prs_config *c, int64_t step, int n_tasks, int n_samples, int max_turns, const int64_t *task_ids,
               const uint8_t *correct, const float *coverage, uint8_t *valid, prs_stats *stats) {
    prs_stats st = {0};
    for (int task = 0; task < n_tasks; task++)
        for (int s = 0; s < n_samples; s++)
            for (int t = 0; t < max_turns; t++) {
                long i = ((long)task * n_samples + s) * max_turns + t;
                if (!valid[i] || !correct[i]) continue;
                st.n_correct++;
                if (isnan(coverage[i])) st.n_unprofiled++;
                if (!prs_keep(c, step, task_ids ? task_ids[task] : task, s, t, 1, coverage[i])) {
                    valid[i] = 0;
                    st.n_dropped++;
                }
            }
    if (stats) *stats = st;
}
