/* reward.c: the reward formulas of reward.h. */
#include "env/reward.h"

#include <math.h>
#include <string.h>

void kg_reward_config_default(kg_reward_config *c, kg_reward_formula formula) {
    c->formula = formula;
    c->alpha = 0.7;
    c->speedup_cap = formula == KG_REWARD_PUBLIC ? 3.0 : 10.0;
    c->hack_penalty = 0.0;
    c->unprofiled_coverage = 1.0;
}

const char *const kg_reward_formula_names[KG_N_REWARD_FORMULAS] = {[KG_REWARD_PROFILE] = "profile",
                                                                    [KG_REWARD_PUBLIC] = "public"};

const char *kg_reward_formula_name(kg_reward_formula f) {
    return kg_reward_formula_names[f == KG_REWARD_PUBLIC ? KG_REWARD_PUBLIC : KG_REWARD_PROFILE];
}

dk_status kg_reward_formula_parse(const char *s, kg_reward_formula *out) {
    for (int i = 0; s && i < KG_N_REWARD_FORMULAS; i++)
        if (strcmp(s, kg_reward_formula_names[i]) == 0) {
            *out = (kg_reward_formula)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown reward formula '%s' (expected profile or public)", s ? s : "(null)");
}

dk_status kg_reward_config_check(const kg_reward_config *c) {
    if (!(c->alpha >= 0 && c->alpha <= 1)) return dk_fail(DK_ERR_USAGE, "reward alpha must be in [0, 1], got %g", c->alpha);
    if (!(c->speedup_cap > 0) || !isfinite(c->speedup_cap))
        return dk_fail(DK_ERR_USAGE, "reward speedup cap must be a positive number, got %g", c->speedup_cap);
    if (!isfinite(c->hack_penalty)) return dk_fail(DK_ERR_USAGE, "reward hack penalty must be finite");
    if (!(c->unprofiled_coverage >= 0 && c->unprofiled_coverage <= 1))
        return dk_fail(DK_ERR_USAGE, "reward unprofiled coverage must be in [0, 1], got %g", c->unprofiled_coverage);
    return DK_OK;
}

double kg_reward_compute(const kg_reward_config *c, const kg_result *r) {
    if (r->hack || r->status == KG_STATUS_HACK) return c->hack_penalty;
    if (!kg_result_passed(r)) return 0.0;
    double s = (r->timing_available && isfinite(r->speedup) && r->speedup > 0) ? r->speedup : 0.0;
    if (s > c->speedup_cap) s = c->speedup_cap;
    double cov;
    if (!r->has_profile)
        cov = c->unprofiled_coverage;
    else
        cov = isfinite(r->coverage) ? r->coverage : 0.0;
    if (cov < 0) cov = 0;
    if (cov > 1) cov = 1;
    if (c->formula == KG_REWARD_PUBLIC) return 0.5 + 0.5 * s + 0.5 * cov;
    return c->alpha * s + (1.0 - c->alpha) * cov;
}
