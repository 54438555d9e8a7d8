/* env.h: what scores a turn. The rollout loop hands an environment a batch of
 * (task, response) pairs and gets back, per pair, a reward, the facts the
 * metrics and PRS need, and the feedback text for the next turn. Two
 * environments exist: KernelGym (the real one: extract the last python block,
 * evaluate it through env/client.h) and a toy one with a verifiable reward
 * that checks learning without a GPU or a judge. rl/ reaches env/ only
 * through this interface and env/client.h. */
#ifndef DK_RL_ENV_H
#define DK_RL_ENV_H

#include "common/error.h"

/* One task of the batch: what the first prompt states. */
typedef struct {
    const char *id;
    const char *name;
    int level;
    const char *source; /* KernelBench-format reference (KernelGym), or the toy question */
    const char *reference_profile; /* the reference's time per op as JSON (data/tasks.h), or NULL */
} rl_task;

typedef enum {
    RL_OUT_OK = 0,        /* compiled, correct, not a hack */
    RL_OUT_NO_CODE,       /* the response holds no python block */
    RL_OUT_COMPILE_ERROR,
    RL_OUT_INCORRECT,
    RL_OUT_HACK,
    RL_OUT_TIMEOUT,       /* the evaluation ran out of time */
    RL_OUT_CRASH,
    RL_OUT_ERROR,         /* the task or the judge failed (unreachable Redis, bad task, no verdict by the
                           * batch's deadline): the turn is left out of training */
} rl_outcome;
#define RL_OUT_COUNT (RL_OUT_ERROR + 1)
const char *rl_outcome_name(rl_outcome o);

typedef struct {
    rl_outcome outcome;
    double reward;
    int correct;      /* compiled, correct and not a hack */
    double speedup;   /* NAN when not timed */
    double coverage;  /* NAN without a profile */
    char *feedback;   /* malloc'ed text for the next user turn */
} rl_turn_result;

typedef struct rl_env rl_env;
struct rl_env {
    const char *name;
    /* Scores n responses; out[i] belongs to tasks[i]. A failure of the judge
     * itself is reported per pair (RL_OUT_ERROR, reward 0), not returned:
     * a step survives a lost judge. */
    void (*score)(rl_env *env, const rl_task *tasks, const char *const *responses, int n, rl_turn_result *out);
    void (*free)(rl_env *env);
    void *impl;
    /* Set by the caller (may be NULL): called as results come in. */
    void (*progress)(void *user, long done, long total);
    void *progress_user;
    /* Pairs scored 0 because the judge stayed unreachable past its deadline;
     * the environment adds to it, the caller reads and resets it. */
    long judge_lost;
};

void rl_turn_result_clear(rl_turn_result *r);

#endif
