/* reward.h: the turn reward of a KernelGym result (docs/DESIGN.md §8 step 3).
 *
 *   profile (default):  R = C * (alpha * min(speedup, cap) + (1 - alpha) * coverage)
 *   public:             R = C * (0.5 + 0.5 * min(speedup, cap) + 0.5 * coverage)
 *
 * C = 1 only when the candidate compiled, is correct and no hack was found;
 * a hack gets hack_penalty instead (whatever else the result says); every
 * other failure (compile error, incorrect, timeout, crash, error) gets 0. The
 * public formula is the published 0.5 * correct + 0.5 * min(speedup, 3) +
 * 0.5 * coverage with its speedup and coverage terms counted only when
 * correct, as its compile-failure/timeout rule implies.
 *
 * Missing measurements (CPU mode, where the harness reports timing and
 * profiling as unavailable):
 *  - no speedup counts as speedup 0: an unmeasured kernel earns no speed
 *    credit, so a CPU run never pretends to know a speedup;
 *  - no profile counts as coverage = unprofiled_coverage (default 1): the
 *    coverage term exists to punish lazy rewrites that leave the heavy work to
 *    torch, which cannot be measured without a profile, and crediting it fully
 *    keeps a useful signal for correctness: a correct CPU candidate earns
 *    1 - alpha = 0.3 (profile) or 1.0 (public), a wrong one 0. Set it to 0 to
 *    make CPU rewards exactly zero instead.
 * A profile that is present but has no coverage number counts as coverage 0. */
#ifndef KG_REWARD_H
#define KG_REWARD_H

#include "common/error.h"
#include "env/result.h"

typedef enum { KG_REWARD_PROFILE = 0, KG_REWARD_PUBLIC } kg_reward_formula;
enum { KG_N_REWARD_FORMULAS = KG_REWARD_PUBLIC + 1 };
/* The formulas' names ("profile", "public"), indexed by kg_reward_formula. */
extern const char *const kg_reward_formula_names[KG_N_REWARD_FORMULAS];

typedef struct {
    kg_reward_formula formula;
    double alpha;               /* profile: weight of the speedup term (0.7) */
    double speedup_cap;         /* min(speedup, cap): 10 for profile, 3 for public */
    double hack_penalty;        /* the reward of a detected hack (0; negative punishes) */
    double unprofiled_coverage; /* coverage assumed when there is no profile (1) */
} kg_reward_config;

/* Defaults for a formula (alpha 0.7, the formula's cap, penalty 0). */
void kg_reward_config_default(kg_reward_config *c, kg_reward_formula formula);
const char *kg_reward_formula_name(kg_reward_formula f);
dk_status kg_reward_formula_parse(const char *s, kg_reward_formula *out);
/* Rejects alpha outside [0, 1], a cap <= 0 and non-finite values. */
dk_status kg_reward_config_check(const kg_reward_config *c);

double kg_reward_compute(const kg_reward_config *c, const kg_result *r);

#endif
