/* env_toy.c: the digit-pattern environment of env_toy.h. */
#include "rl/env_toy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"

static const rl_task toy_tasks[] = {
    {"toy-1", "number", 0, "Write a long number.", NULL},
    {"toy-2", "digits", 0, "Reply with digits only.", NULL},
    {"toy-3", "count", 0, "Count something and answer with a number.", NULL},
    {"toy-4", "code", 0, "Give me a numeric code.", NULL},
};

const rl_task *rl_env_toy_tasks(int *n) {
    *n = (int)(sizeof toy_tasks / sizeof toy_tasks[0]);
    return toy_tasks;
}

double rl_env_toy_reward(const char *response, int target_len) {
    int digits = 0;
    for (int i = 0; i < target_len && response[i]; i++) digits += isdigit((unsigned char)response[i]) != 0;
    return (double)digits / target_len;
}

typedef struct {
    int target_len;
} toy_env;

static void toy_score(rl_env *env, const rl_task *tasks, const char *const *responses, int n, rl_turn_result *out) {
    const toy_env *t = env->impl;
    for (int i = 0; i < n; i++) {
        rl_turn_result_clear(&out[i]);
        double r = rl_env_toy_reward(responses[i], t->target_len);
        out[i].reward = r;
        out[i].outcome = r >= 1.0 ? RL_OUT_OK : RL_OUT_INCORRECT;
        out[i].correct = r >= 1.0;
        char fb[128];
        snprintf(fb, sizeof fb, "%d of the first %d characters were digits.", (int)(r * t->target_len + 0.5),
                 t->target_len);
        out[i].feedback = dk_strdup(fb);
    }
}

static void toy_free(rl_env *env) {
    free(env->impl);
    free(env);
}

rl_env *rl_env_toy_new(int target_len) {
    toy_env *t = dk_calloc(1, sizeof *t);
    t->target_len = target_len > 0 ? target_len : 8;
    rl_env *env = dk_calloc(1, sizeof *env);
    env->name = "toy";
    env->score = toy_score;
    env->free = toy_free;
    env->impl = t;
    return env;
}
