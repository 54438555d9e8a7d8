/* rollout.h: multi-turn rollouts (docs/DESIGN.md §8 steps 1-2). Every task of a
 * batch gets n_samples conversations; each turn, all live conversations are
 * generated together (continuous batching), every response is scored by the
 * environment at once, and the feedback goes back as a user message (masked
 * out of the loss) followed by a fresh assistant header. A conversation ends
 * after max_turns, or early when it reaches the context limit. A task's
 * samples are submitted together with the same prompt, so the engine
 * prefills that prompt once and they share its KV pages (model/generate.h). */
#ifndef DK_RL_ROLLOUT_H
#define DK_RL_ROLLOUT_H

#include <stdint.h>

#include "data/tokenizer.h"
#include "model/generate.h"
#include "rl/env.h"

#define RL_MAX_TURNS 8

typedef struct {
    int max_turns;
    gen_params gen;             /* temperature, top-p/k, budget; stop tokens are set here */
    const char *first_template; /* NULL: the built-in prompt */
    const char *followup_template;
    uint64_t seed;              /* with (step, task key, sample) keys each conversation's draws */
    int64_t step;
    const int64_t *task_keys;   /* stable id of each batch task (its index in the task set); NULL: position */
    /* Called as phases advance (may be NULL): phase "generate" or "evaluate";
     * done = 0 starts a phase, done = total ends it. */
    void (*progress)(void *user, const char *phase, int turn, long done, long total);
    void *progress_user;
    void (*env_progress)(void *user, long done, long total); /* results of an "evaluate" phase */
} rl_rollout_config;

typedef struct {
    int task, sample;
    gen_seq *seq;                         /* the whole conversation; seq->sampled marks model tokens */
    int n_turns;                          /* turns that were generated */
    int turn_start[RL_MAX_TURNS];         /* [start, end) of each turn's sampled tokens */
    int turn_end[RL_MAX_TURNS];
    gen_stop stop[RL_MAX_TURNS];
    rl_turn_result res[RL_MAX_TURNS];
} rl_rollout;

typedef struct {
    double generate_s, env_s;
    long sampled_tokens;
    long response_tokens_per_turn[RL_MAX_TURNS]; /* sums, for mean lengths */
    int responses_per_turn[RL_MAX_TURNS];
    long prefill_tokens;        /* prompt and feedback tokens the engine prefilled ... */
    long prefill_saved;         /* ... and those it took from pages another sample had prefilled */
} rl_rollout_stats;

/* Runs the rollouts of n_tasks tasks x n_samples into out[task * n_samples +
 * sample]. Fails (naming the template key or the token) on a bad template or
 * an engine error; judge failures are per-turn outcomes, not failures. */
dk_status rl_rollout_batch(gen_engine *e, tokenizer *tok, rl_env *env, const rl_task *tasks, int n_tasks,
                           int n_samples, const rl_rollout_config *c, rl_rollout *out, rl_rollout_stats *stats);
void rl_rollout_free(gen_engine *e, rl_rollout *r, int n);

/* Hash of (seed, step, task, sample): the seed of one conversation. */
uint64_t rl_rollout_seed(uint64_t seed, int64_t step, int64_t task, int sample);

/* The batch's task keys (rl_rollout_config.task_keys) from the index of
 * each batch task in a set of n_set: the index itself, except that the
 * k-th repeat of a task in the batch (a batch straddling two passes over
 * the set, or larger than it) gets index + k * n_set. Keyed by index alone,
 * the repeats drew the same tokens as the first: identical conversations
 * that cost rollouts and judging and taught nothing new. */
void rl_task_keys(const int64_t *index, int n, int64_t n_set, int64_t *keys);

#endif
