/* rollout.c: the turn loop of rollout.h. The chat structure of a
 * conversation after turn t is
 *   <|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{answer 1}<|im_end|>\n
 *   <|im_start|>user\n{feedback 1}<|im_end|>\n<|im_start|>assistant\n{answer 2} ...
 * where only the answers (and the <|im_end|> the model wrote to close them)
 * are sampled; everything else is appended by this loop and never trained on. */
#include "rl/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "data/chat.h"
#include "env/feedback_hint.h"
#include "rl/prompts.h"

uint64_t rl_rollout_seed(uint64_t seed, int64_t step, int64_t task, int sample) {
    return dk_key(seed, (uint64_t)step, (uint64_t)task, (uint64_t)sample, 2);
}

void rl_task_keys(const int64_t *index, int n, int64_t n_set, int64_t *keys) {
    for (int i = 0; i < n; i++) {
        int64_t repeat = 0;
        for (int j = 0; j < i; j++) repeat += index[j] == index[i];
        keys[i] = index[i] + repeat * n_set;
    }
}

/* Appends a user message and the assistant header to a conversation; sets
 * *no_room (and appends nothing) when they would leave no room in the
 * context for one sampled token: a turn opened at the limit would end at
 * once, empty, and still be scored and trained on as an answer. */
static dk_status append_user_turn(gen_engine *e, tokenizer *tok, gen_seq *s, const char *text, int close_answer,
                                  int *no_room) {
    chat_tokens ct = {0};
    dk_status st = DK_OK;
    /* An answer cut by the budget is closed for the chat structure; the
     * marker is an added token, so encoding its text gives its id. */
    if (close_answer) st = chat_append_text(tok, "<|im_end|>", 0, &ct);
    if (st == DK_OK && s->n_tokens > 0) st = chat_append_text(tok, "\n", 0, &ct);
    chat_message m = {"user", text};
    if (st == DK_OK) st = chat_append_message(tok, &m, &ct);
    if (st == DK_OK) st = chat_append_generation_prompt(tok, &ct);
    *no_room = st == DK_OK && s->n_tokens + ct.n >= gen_get_config(e)->max_context;
    if (st == DK_OK && !*no_room) st = gen_seq_append(e, s, ct.ids, ct.n);
    chat_tokens_free(&ct);
    return st;
}

/* The response text of a turn, without the stop token that closed it. */
static char *turn_text(tokenizer *tok, const gen_seq *s, int start, int end) {
    char *text = NULL;
    size_t len = 0;
    if (tokenizer_decode(tok, s->tokens + start, end - start, 1, &text, &len) != DK_OK) return dk_strdup("");
    return text;
}

dk_status rl_rollout_batch(gen_engine *e, tokenizer *tok, rl_env *env, const rl_task *tasks, int n_tasks,
                           int n_samples, const rl_rollout_config *c, rl_rollout *out, rl_rollout_stats *stats) {
    const int n = n_tasks * n_samples;
    memset(stats, 0, sizeof *stats);
    const gen_stats g0 = *gen_get_stats(e);
    if (c->max_turns < 1 || c->max_turns > RL_MAX_TURNS)
        return dk_fail(DK_ERR_USAGE, "[rl] max_turns = %d: must be in [1, %d]", c->max_turns, RL_MAX_TURNS);
    const int im_end = tokenizer_token_id(tok, "<|im_end|>");
    if (im_end < 0) return dk_fail(DK_ERR_USAGE, "the tokenizer has no <|im_end|> token (ChatML)");
    memset(out, 0, (size_t)n * sizeof *out);
    dk_status st = DK_OK;
    for (int i = 0; i < n && st == DK_OK; i++) {
        rl_rollout *r = &out[i];
        r->task = i / n_samples;
        r->sample = i % n_samples;
        const rl_task *t = &tasks[r->task];
        r->seq = gen_seq_new(e, rl_rollout_seed(c->seed, c->step, c->task_keys ? c->task_keys[r->task] : r->task, r->sample));
        char *prompt = NULL, *hot = NULL;
        kg_hint_bottleneck_json(t->reference_profile, 5, &hot);
        st = prompt_first(c->first_template, t->id, t->name, t->level, t->source, hot, &prompt);
        free(hot);
        int no_room = 0;
        if (st == DK_OK) st = append_user_turn(e, tok, r->seq, prompt, 0, &no_room);
        if (st == DK_OK && no_room)
            st = dk_fail(DK_ERR_USAGE, "task '%s': the first prompt leaves no room to answer within the context "
                                       "limit of %d tokens",
                         t->name, gen_get_config(e)->max_context);
        free(prompt);
    }
    gen_seq **live = dk_calloc((size_t)n, sizeof *live);
    int *live_idx = dk_calloc((size_t)n, sizeof *live_idx);
    rl_task *pair_task = dk_calloc((size_t)n, sizeof *pair_task);
    char **texts = dk_calloc((size_t)n, sizeof *texts);
    rl_turn_result *res = dk_calloc((size_t)n, sizeof *res);
    for (int turn = 0; turn < c->max_turns && st == DK_OK; turn++) {
        int n_live = 0;
        for (int i = 0; i < n; i++) {
            rl_rollout *r = &out[i];
            if (turn > 0 && (r->n_turns < turn || r->stop[turn - 1] == GEN_STOP_CONTEXT)) continue;
            live_idx[n_live] = i;
            live[n_live++] = r->seq;
        }
        if (n_live == 0) break;
        if (c->progress) c->progress(c->progress_user, "generate", turn + 1, 0, n_live);
        double t0 = dk_now();
        st = gen_run(e, live, n_live, &c->gen);
        stats->generate_s += dk_now() - t0;
        if (st != DK_OK) break;
        if (c->progress) c->progress(c->progress_user, "generate", turn + 1, n_live, n_live);
        for (int k = 0; k < n_live; k++) {
            rl_rollout *r = &out[live_idx[k]];
            gen_seq *s = r->seq;
            r->turn_start[turn] = s->turn_start;
            r->turn_end[turn] = s->n_tokens;
            r->stop[turn] = s->stop;
            r->n_turns = turn + 1;
            int end = s->n_tokens;
            if (s->stop == GEN_STOP_TOKEN && end > s->turn_start) end--; /* drop <|im_end|> */
            texts[k] = turn_text(tok, s, s->turn_start, end);
            pair_task[k] = tasks[r->task];
            stats->sampled_tokens += s->n_tokens - s->turn_start;
            stats->response_tokens_per_turn[turn] += s->n_tokens - s->turn_start;
            stats->responses_per_turn[turn]++;
        }
        if (c->progress) c->progress(c->progress_user, "evaluate", turn + 1, 0, n_live);
        t0 = dk_now();
        env->progress_user = c->progress_user;
        env->progress = c->env_progress;
        env->score(env, pair_task, (const char *const *)texts, n_live, res);
        stats->env_s += dk_now() - t0;
        if (c->progress) c->progress(c->progress_user, "evaluate", turn + 1, n_live, n_live);
        for (int k = 0; k < n_live; k++) {
            rl_rollout *r = &out[live_idx[k]];
            r->res[turn] = res[k];
            res[k].feedback = NULL; /* moved into the rollout */
            free(texts[k]);
            texts[k] = NULL;
            if (turn + 1 < c->max_turns && r->stop[turn] != GEN_STOP_CONTEXT && st == DK_OK) {
                char *msg = NULL;
                st = prompt_followup(c->followup_template, r->res[turn].feedback ? r->res[turn].feedback : "",
                                     turn + 2, c->max_turns, &msg);
                int no_room = 0;
                if (st == DK_OK)
                    st = append_user_turn(e, tok, r->seq, msg, r->stop[turn] != GEN_STOP_TOKEN, &no_room);
                free(msg);
                /* A conversation that cannot take the feedback ends here. */
                if (no_room) r->stop[turn] = GEN_STOP_CONTEXT;
            }
        }
    }
    free(live);
    free(live_idx);
    free(pair_task);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(res);
    const gen_stats *g1 = gen_get_stats(e);
    stats->prefill_tokens = g1->prefill_tokens - g0.prefill_tokens;
    stats->prefill_saved = g1->shared_tokens - g0.shared_tokens;
    return st;
}

void rl_rollout_free(gen_engine *e, rl_rollout *r, int n) {
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < RL_MAX_TURNS; t++) free(r[i].res[t].feedback);
        if (r[i].seq) gen_seq_free(e, r[i].seq);
        memset(&r[i], 0, sizeof r[i]);
    }
}
