/* test_kg_reward.c: KernelGym rewards on hand-computed cases (both formulas,
 * the cap, the hack penalty, CPU results without timing or profile), read
 * from result JSON the way the trainer reads it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "env/result.h"
#include "env/reward.h"

static int failures = 0, checks = 0;
static double worst = 0;

static void expect(const char *what, const kg_reward_config *c, const char *json, double want) {
    kg_result r;
    kg_result_init(&r);
    checks++;
    if (kg_result_parse(json, &r) != DK_OK) {
        fprintf(stderr, "FAIL %s: cannot parse: %s\n", what, dk_error());
        failures++;
        return;
    }
    double got = kg_reward_compute(c, &r);
    double err = fabs(got - want);
    if (err > worst) worst = err;
    if (err > 1e-12) {
        fprintf(stderr, "FAIL %s: reward %.12g, expected %.12g\n", what, got, want);
        failures++;
    }
    kg_result_free(&r);
}

#define OK_GPU(speedup, coverage)                                                                      \
    "{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"hack\":{\"detected\":false,\"reasons\":[]}," \
    "\"speedup\":" speedup ",\"timing_available\":true,\"runtime_ms\":{\"mean\":1},"                     \
    "\"profile\":{\"kernels\":[],\"coverage\":" coverage "}}"

int main(void) {
    kg_reward_config prof, pub;
    kg_reward_config_default(&prof, KG_REWARD_PROFILE);
    kg_reward_config_default(&pub, KG_REWARD_PUBLIC);

    /* profile: R = C * (0.7 * min(s, 10) + 0.3 * coverage) */
    expect("profile 1.5x cov 0.8", &prof, OK_GPU("1.5", "0.8"), 0.7 * 1.5 + 0.3 * 0.8); /* 1.29 */
    expect("profile 0.5x cov 0.2", &prof, OK_GPU("0.5", "0.2"), 0.35 + 0.06);
    expect("profile capped 25x", &prof, OK_GPU("25", "0.5"), 0.7 * 10 + 0.3 * 0.5); /* 7.15 */
    kg_reward_config c3 = prof;
    c3.speedup_cap = 2.0;
    c3.alpha = 0.5;
    expect("profile alpha 0.5 cap 2", &c3, OK_GPU("3", "0.4"), 0.5 * 2 + 0.5 * 0.4); /* 1.2 */
    expect("profile coverage null", &prof, OK_GPU("2", "null"), 1.4);
    expect("profile coverage above 1 clamps", &prof, OK_GPU("1", "1.5"), 0.7 + 0.3);

    /* C = 0 for every failure */
    expect("incorrect", &prof,
           "{\"status\":\"incorrect\",\"compiled\":true,\"correct\":false,\"speedup\":3,\"timing_available\":true}", 0);
    expect("compile error", &prof, "{\"status\":\"compile_error\",\"compiled\":false,\"correct\":false}", 0);
    expect("timeout", &prof, "{\"status\":\"timeout\"}", 0);
    expect("crash", &prof, "{\"status\":\"crash\",\"error\":\"illegal address\"}", 0);
    expect("error", &prof, "{\"status\":\"error\"}", 0);
    expect("ok but correct false", &prof,
           "{\"status\":\"ok\",\"compiled\":true,\"correct\":false,\"speedup\":2,\"timing_available\":true}", 0);

    /* hacks get the penalty, whatever their speedup */
    const char *hack = "{\"status\":\"hack\",\"compiled\":true,\"correct\":true,"
                       "\"hack\":{\"detected\":true,\"reasons\":[\"static:try_except_fallback\"]},\"speedup\":50,"
                       "\"timing_available\":true}";
    expect("hack default penalty", &prof, hack, 0);
    kg_reward_config pen = prof;
    pen.hack_penalty = -1.0;
    expect("hack penalty -1", &pen, hack, -1.0);
    expect("hack flag with another status", &pen,
           "{\"status\":\"incorrect\",\"hack\":{\"detected\":true,\"reasons\":[\"runtime:side_stream\"]}}", -1.0);

    /* CPU mode: no timing (speedup counts 0), no profile (coverage counts 1) */
    const char *cpu = "{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"speedup\":null,"
                      "\"runtime_ms\":null,\"profile\":null,\"timing_available\":false}";
    expect("cpu profile formula", &prof, cpu, 0.3);
    kg_reward_config zero = prof;
    zero.unprofiled_coverage = 0;
    expect("cpu with unprofiled coverage 0", &zero, cpu, 0);
    expect("speedup present but timing unavailable", &prof,
           "{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"speedup\":4,\"timing_available\":false}", 0.3);
    expect("cpu public formula", &pub, cpu, 0.5 + 0 + 0.5);

    /* public: C * (0.5 + 0.5 * min(s, 3) + 0.5 * coverage) */
    expect("public 2x cov 0.6", &pub, OK_GPU("2", "0.6"), 0.5 + 1.0 + 0.3); /* 1.8 */
    expect("public capped 5x", &pub, OK_GPU("5", "0.6"), 0.5 + 1.5 + 0.3);  /* 2.3 */
    expect("public incorrect", &pub, "{\"status\":\"incorrect\",\"compiled\":true,\"speedup\":2,\"timing_available\":true}", 0);
    expect("public hack", &pub, hack, 0);

    /* configuration checks */
    kg_reward_formula f;
    checks += 4;
    if (kg_reward_formula_parse("public", &f) != DK_OK || f != KG_REWARD_PUBLIC) failures++, fprintf(stderr, "FAIL parse public\n");
    if (kg_reward_formula_parse("fast", &f) == DK_OK || !strstr(dk_error(), "'fast'")) failures++, fprintf(stderr, "FAIL parse fast\n");
    kg_reward_config bad = prof;
    bad.alpha = 1.5;
    if (kg_reward_config_check(&bad) == DK_OK || !strstr(dk_error(), "alpha")) failures++, fprintf(stderr, "FAIL alpha check\n");
    if (kg_reward_config_check(&prof) != DK_OK) failures++, fprintf(stderr, "FAIL default check\n");

    printf("reward: %d checks, max |error| %.3g, %d failures\n", checks, worst, failures);
    return failures ? 1 : 0;
}
