/* env_kernelgym.c: turns responses into KernelGym jobs and results into
 * rewards and feedback. A response without a python block never reaches the
 * judge: it gets reward 0 and feedback that says what was missing. */
#include "rl/env_kernelgym.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "env/feedback_hint.h"
#include "rl/extract.h"

typedef struct {
    kg_client *client; /* NULL while Redis is unreachable */
    char *url;
    rl_kg_config cfg;
} kg_env;

/* Connects when there is no client; with patient set, retries with backoff
 * for up to reconnect_s (a Redis being restarted), else tries once. */
static void ensure_client(kg_env *k, int patient) {
    if (k->client) return;
    const double t0 = dk_now();
    double pause = 0.05;
    for (;;) {
        dk_status st;
        k->client = kg_client_connect(k->url, &st);
        if (k->client) {
            kg_client_set_reconnect(k->client, k->cfg.reconnect_s);
            return;
        }
        if (!patient || dk_now() - t0 >= k->cfg.reconnect_s) break;
        struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 < 2.0 ? pause * 2 : 2.0;
    }
    fprintf(stderr, "warning: kernelgym: %s; this batch is scored 0\n", dk_error());
}

static const char *no_code_feedback =
    "Your answer contained no ```python code block, so nothing was evaluated. Reply with the complete "
    "ModelNew implementation in one ```python block.";

static rl_outcome outcome_of(const kg_result *r) {
    switch (r->status) {
    case KG_STATUS_OK: return kg_result_passed(r) ? RL_OUT_OK : RL_OUT_INCORRECT;
    case KG_STATUS_COMPILE_ERROR: return RL_OUT_COMPILE_ERROR;
    case KG_STATUS_INCORRECT: return RL_OUT_INCORRECT;
    case KG_STATUS_HACK: return RL_OUT_HACK;
    case KG_STATUS_TIMEOUT: return RL_OUT_TIMEOUT;
    /* Still queued or running at the batch's deadline: the fleet was slow,
     * which says nothing about the answer (the candidate's own time limit
     * gives KG_STATUS_TIMEOUT). */
    case KG_STATUS_PENDING: return RL_OUT_ERROR;
    case KG_STATUS_CRASH: return RL_OUT_CRASH;
    default: return RL_OUT_ERROR;
    }
}

static void kg_score(rl_env *env, const rl_task *tasks, const char *const *responses, int n, rl_turn_result *out) {
    kg_env *k = env->impl;
    kg_job *jobs = dk_calloc((size_t)n, sizeof *jobs);
    char **code = dk_calloc((size_t)n, sizeof *code);
    int *slot = dk_calloc((size_t)n, sizeof *slot); /* job index of pair i, or -1 */
    int n_jobs = 0;
    for (int i = 0; i < n; i++) {
        rl_turn_result_clear(&out[i]);
        slot[i] = -1;
        if (extract_code_block(responses[i], strlen(responses[i]), &code[i]) == EXTRACT_NONE) {
            out[i].outcome = RL_OUT_NO_CODE;
            out[i].feedback = dk_strdup(no_code_feedback);
            continue;
        }
        kg_job *j = &jobs[n_jobs];
        kg_job_init(j);
        j->task_source = tasks[i].source;
        j->candidate_source = code[i];
        j->task_name = tasks[i].name;
        j->device = k->cfg.device;
        j->opt.timeout_s = k->cfg.timeout_s;
        slot[i] = n_jobs++;
    }
    kg_result *res = dk_calloc((size_t)(n_jobs ? n_jobs : 1), sizeof *res);
    for (int j = 0; j < n_jobs; j++) kg_result_init(&res[j]);
    int n_done = 0;
    dk_status st = DK_OK;
    if (n_jobs) {
        ensure_client(k, 1);
        st = k->client ? kg_client_submit_batch(k->client, jobs, n_jobs, res) : DK_ERR_RUNTIME;
    }
    /* Wait in slices so the caller sees results arrive; a slice's deadline
     * passing is not an error, the wait simply continues. Time without Redis
     * does not count against the batch: the wait is extended by it, and
     * while Redis is away the client decides when to give up. */
    const double deadline = dk_now() + k->cfg.wait_s;
    kg_client_stats cs0 = {0}, cs;
    if (k->client) kg_client_get_stats(k->client, &cs0);
    while (st == DK_OK && n_jobs && n_done < n_jobs) {
        kg_client_get_stats(k->client, &cs);
        double left = deadline + (cs.down_s - cs0.down_s) - dk_now();
        if (left <= 0 && !kg_client_is_down(k->client)) break;
        if (left <= 0) left = 1.0;
        st = kg_client_wait(k->client, res, n_jobs, left < 1.0 ? left : 1.0, &n_done);
        if (env->progress) env->progress(env->progress_user, n_done + (n - n_jobs), n);
    }
    char lost[1024] = "";
    if (st != DK_OK) {
        snprintf(lost, sizeof lost, "%s", dk_error());
        /* Drop a broken connection; the next batch reconnects. */
        if (k->client) kg_client_close(k->client);
        k->client = NULL;
    }
    for (int i = 0; i < n; i++) {
        if (slot[i] < 0) continue;
        kg_result *r = &res[slot[i]];
        if (st != DK_OK && r->status == KG_STATUS_PENDING) {
            env->judge_lost++;
            out[i].outcome = RL_OUT_ERROR;
            char fb[1200];
            snprintf(fb, sizeof fb, "The evaluation could not run: %s", lost);
            out[i].feedback = dk_strdup(fb);
            continue;
        }
        out[i].outcome = outcome_of(r);
        out[i].correct = kg_result_passed(r);
        out[i].speedup = r->speedup;
        out[i].coverage = r->coverage;
        out[i].reward = r->status == KG_STATUS_PENDING ? 0.0 : kg_reward_compute(&k->cfg.reward, r);
        if (!isfinite(out[i].reward)) out[i].reward = 0.0;
        if (r->status == KG_STATUS_PENDING)
            out[i].feedback = dk_strdup("The evaluation did not finish in time; nothing is known about this answer.");
        else
            out[i].feedback = kg_feedback_fit(r->feedback && r->feedback[0] ? r->feedback : kg_status_name(r->status),
                                              k->cfg.feedback_max_tokens);
    }
    for (int j = 0; j < n_jobs; j++) kg_result_free(&res[j]);
    for (int i = 0; i < n; i++) free(code[i]);
    free(res);
    free(code);
    free(slot);
    free(jobs);
}

static void kg_env_free(rl_env *env) {
    kg_env *k = env->impl;
    if (k->client) kg_client_close(k->client);
    free(k->url);
    free(k);
    free(env);
}

rl_env *rl_env_kernelgym_new(const char *url, const rl_kg_config *cfg) {
    kg_env *k = dk_calloc(1, sizeof *k);
    k->url = dk_strdup(url);
    k->cfg = *cfg;
    ensure_client(k, 0);
    rl_env *env = dk_calloc(1, sizeof *env);
    env->name = "kernelgym";
    env->score = kg_score;
    env->free = kg_env_free;
    env->impl = k;
    return env;
}
