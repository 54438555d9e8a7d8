/* test_rl_rollout_share.c: RL rollouts (rl/rollout.h) share their tasks'
 * prompts in the engine. Three toy tasks x 4 samples, two turns (the toy
 * environment's feedback appended between them), the BPE tokenizer fixture
 * and a tiny random Qwen3 on the CPU backend, through an engine with prefix
 * sharing and one without:
 * - every conversation has the same tokens either way (the reference is the
 *   engine without sharing: each sample prefills its own prompt);
 * - the prefill saved equals the hand count, (samples - 1) x the whole
 *   pages before each prompt's last token, and prefilled + saved with
 *   sharing equals prefilled without;
 * - the engine's page bookkeeping is clean after the batch, and every page
 *   is free once the rollouts are;
 * - at every context limit from 40 to 160 tokens, no turn is opened that
 *   has no room for a sampled token (the feedback filling the context
 *   exactly ends the conversation);
 * - a task twice in a batch, keyed by rl_task_keys, draws conversations of
 *   its own for the repeat (keyed by its index alone, all repeated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "rl/env_toy.h"
#include "rl/rollout.h"
#include "test_ops_common.h"

static const model_config cfg = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 512, .hidden_size = 32, .intermediate_size = 48, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .max_position = 1024, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};

enum { TASKS = 3, SAMPLES = 4, N = TASKS * SAMPLES, PAGE = 4, N_PAGES = 3000 };

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

typedef struct {
    int32_t *tokens[N];
    int n[N], prompt_len[N];
    rl_rollout_stats st;
} batch_result;

/* An engine over the model, the toy environment and the rollout settings
 * every case starts from (seed 7, step 1, the toy feedback between turns). */
typedef struct {
    gen_engine *e;
    rl_env *env;
    const rl_task *toy;
    int32_t stop;
    rl_rollout_config rc;
} toy_run;

static void toy_open(toy_run *t, model *m, tokenizer *tok, int sharing, int max_context, int max_turns) {
    gen_config gc = {.page_size = PAGE, .n_pages = N_PAGES, .max_batch = 16, .max_step_tokens = 64,
                     .max_context = max_context, .prefix_sharing = sharing};
    must(gen_create(&t->e, m, &gc), "gen_create");
    t->env = rl_env_toy_new(8);
    int n_toy;
    t->toy = rl_env_toy_tasks(&n_toy);
    CHECK(n_toy >= TASKS, "the toy has %d tasks, the test needs %d", n_toy, TASKS);
    t->stop = tokenizer_token_id(tok, "<|im_end|>");
    t->rc = (rl_rollout_config){.max_turns = max_turns, .first_template = "{source}",
                                .followup_template = "{feedback}", .seed = 7, .step = 1,
                                .gen = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 12,
                                        .stop_tokens = &t->stop, .n_stop_tokens = 1}};
}

static void toy_close(toy_run *t) {
    t->env->free(t->env);
    gen_free(t->e);
}

static void run_batch(model *m, tokenizer *tok, int sharing, batch_result *out) {
    toy_run t;
    toy_open(&t, m, tok, sharing, 512, 2);
    rl_rollout r[N];
    must(rl_rollout_batch(t.e, tok, t.env, t.toy, TASKS, SAMPLES, &t.rc, r, &out->st), "rl_rollout_batch");
    CHECK(gen_check_pages(t.e) == DK_OK, "after the batch: %s", dk_error());
    for (int i = 0; i < N; i++) {
        out->n[i] = r[i].seq->n_tokens;
        out->prompt_len[i] = r[i].turn_start[0];
        out->tokens[i] = dk_malloc((size_t)out->n[i] * sizeof(int32_t));
        memcpy(out->tokens[i], r[i].seq->tokens, (size_t)out->n[i] * sizeof(int32_t));
    }
    rl_rollout_free(t.e, r, N);
    CHECK(gen_free_pages(t.e) == N_PAGES, "%d of %d pages free after the rollouts", gen_free_pages(t.e), N_PAGES);
    toy_close(&t);
}

/* Empty turns (a turn reached with no token sampled) over a 3-turn batch at
 * a context limit of max_context; n_turns gets the turns reached. */
static int run_batch_at(model *m, tokenizer *tok, int max_context, int *n_turns) {
    toy_run t;
    toy_open(&t, m, tok, 1, max_context, 3);
    rl_rollout r[N];
    rl_rollout_stats st;
    must(rl_rollout_batch(t.e, tok, t.env, t.toy, TASKS, SAMPLES, &t.rc, r, &st), "rl_rollout_batch");
    int empty = 0;
    *n_turns = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < r[i].n_turns; k++) {
            empty += r[i].turn_end[k] == r[i].turn_start[k];
            (*n_turns)++;
        }
    CHECK(gen_check_pages(t.e) == DK_OK, "context %d: %s", max_context, dk_error());
    rl_rollout_free(t.e, r, N);
    toy_close(&t);
    return empty;
}

/* One task twice in a batch (2 x SAMPLES conversations) under the given
 * task keys: how many of the repeat's conversations equal the first's. */
static int repeat_same(model *m, tokenizer *tok, const int64_t keys[2]) {
    toy_run t;
    toy_open(&t, m, tok, 1, 512, 1);
    t.rc.step = 3;
    t.rc.task_keys = keys;
    const rl_task tasks[2] = {t.toy[1], t.toy[1]};
    rl_rollout r[2 * SAMPLES];
    rl_rollout_stats st;
    must(rl_rollout_batch(t.e, tok, t.env, tasks, 2, SAMPLES, &t.rc, r, &st), "rl_rollout_batch");
    int same = 0;
    for (int i = 0; i < SAMPLES; i++) {
        const gen_seq *a = r[i].seq, *b = r[SAMPLES + i].seq;
        same += a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
    }
    rl_rollout_free(t.e, r, 2 * SAMPLES);
    toy_close(&t);
    return same;
}

int main(void) {
    tokenizer *tok;
    must(tokenizer_load("tests/fixtures/tokenizers/bpe/tokenizer.json", &tok), "tokenizer");
    ops_ctx ctx;
    gen_config g0 = {.max_step_tokens = 64};
    must(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, gen_scratch_bytes(&cfg, &g0, DK_DEVICE_CPU)), "ops_ctx_init");
    model m;
    must(model_create(&m, &cfg, &ctx, 8, 0), "model_create");
    model_init_random(&m, 31, 0.3f);
    static batch_result on, off;
    run_batch(&m, tok, 1, &on);
    run_batch(&m, tok, -1, &off);
    int same = 0;
    long want = 0;
    for (int i = 0; i < N; i++) {
        same += on.n[i] == off.n[i] && !memcmp(on.tokens[i], off.tokens[i], (size_t)on.n[i] * sizeof(int32_t));
        if (i % SAMPLES) want += (on.prompt_len[i] - 1) / PAGE * PAGE;
    }
    printf("  %d tasks x %d samples, 2 turns: %d/%d conversations identical with and without sharing; prefilled "
           "%ld vs %ld tokens, %ld saved (%ld expected); first prompts of %d, %d, %d tokens\n",
           TASKS, SAMPLES, same, N, on.st.prefill_tokens, off.st.prefill_tokens, on.st.prefill_saved, want,
           on.prompt_len[0], on.prompt_len[SAMPLES], on.prompt_len[2 * SAMPLES]);
    CHECK(same == N, "sharing changed %d conversations", N - same);
    CHECK(on.st.prefill_saved == want, "saved %ld prefill tokens, expected %ld", on.st.prefill_saved, want);
    CHECK(off.st.prefill_saved == 0, "sharing off saved %ld tokens", off.st.prefill_saved);
    CHECK(on.st.prefill_tokens + on.st.prefill_saved == off.st.prefill_tokens,
          "prefilled %ld + saved %ld != %ld prefilled without sharing", on.st.prefill_tokens, on.st.prefill_saved,
          off.st.prefill_tokens);
    for (int i = 0; i < N; i++) free(on.tokens[i]), free(off.tokens[i]);
    /* Every context limit from just past the longest first prompt up: the
     * feedback fills the context exactly at some, and the conversation must
     * end there rather than open a turn with no room to sample in. */
    int empty = 0, turns = 0, limits = 0;
    for (int mc = 40; mc <= 160; mc++, limits++) {
        int nt;
        empty += run_batch_at(&m, tok, mc, &nt);
        turns += nt;
    }
    printf("  context limits 40..160, 3 turns: %d empty turns of %d reached\n", empty, turns);
    CHECK(empty == 0, "%d turns were opened with no room to sample", empty);

    /* Repeats of a task in one batch: keyed by the task's index alone they
     * repeat the first's conversations; rl_task_keys gives them their own. */
    const int64_t index[6] = {3, 1, 3, 0, 3, 1}, want_keys[6] = {3, 1, 7, 0, 11, 5};
    int64_t keys[6];
    rl_task_keys(index, 6, 4, keys);
    CHECK(!memcmp(keys, want_keys, sizeof keys), "task keys %lld %lld %lld %lld %lld %lld", (long long)keys[0],
          (long long)keys[1], (long long)keys[2], (long long)keys[3], (long long)keys[4], (long long)keys[5]);
    const int64_t by_index[2] = {1, 1};
    int64_t own[2];
    rl_task_keys(by_index, 2, 3, own);
    const int same_by_index = repeat_same(&m, tok, by_index), same_own = repeat_same(&m, tok, own);
    printf("  a task twice in a batch: %d/%d conversations repeated keyed by index, %d/%d with their own keys\n",
           same_by_index, SAMPLES, same_own, SAMPLES);
    CHECK(same_by_index == SAMPLES, "the same keys must give the same conversations (%d/%d)", same_by_index,
          SAMPLES);
    CHECK(same_own == 0, "%d of the repeat's conversations equal the first's", same_own);
    model_free(&m);
    ops_ctx_free(&ctx);
    tokenizer_free(tok);
    return test_finish("test_rl_rollout_share");
}
