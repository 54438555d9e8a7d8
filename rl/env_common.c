/* env_common.c: names and cleanup shared by the environments. */
#include "rl/env.h"

#include <math.h>
#include <stdlib.h>

const char *rl_outcome_name(rl_outcome o) {
    static const char *names[RL_OUT_COUNT] = {"ok", "no_code", "compile_error", "incorrect",
                                              "hack", "timeout", "crash", "error"};
    return (o >= 0 && o < RL_OUT_COUNT) ? names[o] : "?";
}

void rl_turn_result_clear(rl_turn_result *r) {
    free(r->feedback);
    r->feedback = NULL;
    r->outcome = RL_OUT_ERROR;
    r->reward = 0.0;
    r->correct = 0;
    r->speedup = NAN;
    r->coverage = NAN;
}
