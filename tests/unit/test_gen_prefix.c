/* test_gen_prefix.c: prefix sharing in the generation engine
 * (model/generate.h, model/kv_prefix.h) on the CPU backend. The reference
 * is the same engine with sharing off (gen_config.prefix_sharing = -1) over
 * the same model: every sequence then prefills its whole prompt itself.
 *
 * 1. Samples of one task (same prompt, own seeds) with sharing on and off:
 *    identical tokens, logprobs within 2e-5 (fp32: a shared page may have
 *    been written by a step of fresh prompts, which attends with the
 *    training attention op, the unshared one by a paged step), greedy and seeded sampling (T 1, top-p
 *    0.95, top-k 50). Prompts end inside a page, on a page boundary, and
 *    span several prefill chunks. The prefill saved is exactly what a
 *    hand count gives ((samples - 1) whole pages before each prompt's last
 *    token), and prefilled + saved with sharing equals prefilled without.
 *    gen_check_pages (every reference count equals its holders, the free
 *    list is exactly the unheld pages) holds after every sampled token and
 *    after every run; once the sequences are freed every page is free.
 * 2. Memory pressure with sharing: a cache that holds fewer than three
 *    conversations at full length completes all sixteen (preemptions
 *    happen) with the tokens of an ample cache and of sharing off.
 * 3. Multi-turn: three turns with per-sample feedback appended between them
 *    give the tokens of sharing off, and the next-token logits after the
 *    last turn match to 2e-5.
 * 4. A conversation whose cached last token sits in a page another holds
 *    recomputes that page into its own before running again: the shared
 *    page keeps its contents (the other's logits do not move) and both
 *    sample what they sample without sharing.
 *    Decode steps group each task's samples (gen_config.group_reads): the
 *    CPU op checks every step's groups against the pages, and the tokens
 *    skipped are whole pages, at most the shared ones a step.
 * 5. A bad prefix_sharing or group_reads value is refused, naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "test_ops_common.h"

static const model_config cfg = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 512, .hidden_size = 32, .intermediate_size = 48, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .max_position = 1024, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};

enum { PAGE = 4, STEP = 24, MAXCTX = 160 };

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

static int32_t prompt_token(int task, int i) { return (int32_t)((task * 131 + i * 17 + 5) % cfg.vocab_size); }

/* One conversation's result. */
typedef struct {
    int32_t tokens[MAXCTX];
    float logprobs[MAXCTX];
    int n;
    gen_stop stop;
} conv;

/* A stop check that never stops: it verifies the page bookkeeping after
 * every sampled token, in the middle of the run. */
typedef struct {
    gen_engine *e;
    int bad;
} page_check;

static int check_pages_cb(void *user, const gen_seq *s) {
    (void)s;
    page_check *c = user;
    if (gen_check_pages(c->e) != DK_OK && !c->bad) {
        fprintf(stderr, "FAIL mid-run: %s\n", dk_error());
        c->bad = 1;
    }
    return 0;
}

typedef struct {
    int n_tasks, n_samples;
    const int *prompt_len;   /* per task */
    int turns;               /* 1..3; feedback of 5 + sample tokens appended between turns */
    int n_pages, max_batch, sharing;
    int interleave;          /* 1: sequence i is a sample of task i % n_tasks, not i / n_samples */
    gen_params p;
} run_spec;

/* Runs the spec on a fresh engine over m: out[task * n_samples + sample];
 * logits (may be NULL) gets sequence 0's next-token logits after the last
 * turn. Returns the engine's stats. */
static gen_stats run_tasks(model *m, const run_spec *r, conv *out, float *logits) {
    gen_config gc = {.page_size = PAGE, .n_pages = r->n_pages, .max_batch = r->max_batch, .max_step_tokens = STEP,
                     .max_context = MAXCTX, .prefix_sharing = r->sharing};
    page_check chk = {0};
    must(gen_create(&chk.e, m, &gc), "gen_create");
    gen_engine *e = chk.e;
    const int n = r->n_tasks * r->n_samples;
    gen_seq **seqs = dk_calloc((size_t)n, sizeof *seqs);
    int32_t buf[MAXCTX];
    for (int i = 0; i < n; i++) {
        const int task = r->interleave ? i % r->n_tasks : i / r->n_samples;
        seqs[i] = gen_seq_new(e, 1000 + (uint64_t)i);
        for (int j = 0; j < r->prompt_len[task]; j++) buf[j] = prompt_token(task, j);
        must(gen_seq_append(e, seqs[i], buf, r->prompt_len[task]), "append prompt");
    }
    gen_params p = r->p;
    p.stop_fn = check_pages_cb;
    p.stop_user = &chk;
    for (int t = 0; t < r->turns; t++) {
        if (t > 0)
            for (int i = 0; i < n; i++) {
                const int len = 5 + i % 4;
                for (int j = 0; j < len; j++) buf[j] = (int32_t)((i * 29 + j * 13 + t * 7) % cfg.vocab_size);
                must(gen_seq_append(e, seqs[i], buf, len), "append feedback");
            }
        must(gen_run(e, seqs, n, &p), "gen_run");
        CHECK(gen_check_pages(e) == DK_OK, "after turn %d: %s", t + 1, dk_error());
    }
    CHECK(!chk.bad, "the page bookkeeping broke during a run");
    if (logits) must(gen_logits(e, seqs[0], logits), "gen_logits");
    for (int i = 0; i < n; i++) {
        out[i].n = seqs[i]->n_tokens;
        memcpy(out[i].tokens, seqs[i]->tokens, (size_t)out[i].n * sizeof(int32_t));
        memcpy(out[i].logprobs, seqs[i]->logprobs, (size_t)out[i].n * sizeof(float));
        out[i].stop = seqs[i]->stop;
    }
    gen_stats st = *gen_get_stats(e);
    for (int i = 0; i < n; i++) gen_seq_free(e, seqs[i]);
    CHECK(gen_free_pages(e) == r->n_pages, "%d of %d pages free after freeing every sequence", gen_free_pages(e),
          r->n_pages);
    CHECK(gen_check_pages(e) == DK_OK, "after freeing: %s", dk_error());
    free(seqs);
    gen_free(e);
    return st;
}

/* Sequences with the same tokens; the largest logprob difference in *lp. */
static int same_convs(const conv *a, const conv *b, int n, double *lp) {
    int same = 0;
    *lp = 0.0;
    for (int i = 0; i < n; i++) {
        if (a[i].n != b[i].n || memcmp(a[i].tokens, b[i].tokens, (size_t)a[i].n * sizeof(int32_t))) continue;
        same++;
        for (int j = 0; j < a[i].n; j++) *lp = fmax(*lp, fabs((double)a[i].logprobs[j] - b[i].logprobs[j]));
    }
    return same;
}

/* ---- 1. shared vs unshared ------------------------------------------------------- */

static void test_identical(model *m) {
    /* 37: ends inside a page; 33: its last token opens a page; 50: longer
     * than a prefill step (24), so the first sample's prefill spans steps and
     * the others wait for it. */
    enum { TASKS = 3, SAMPLES = 5, N = TASKS * SAMPLES };
    const int lens[TASKS] = {37, 33, 50};
    static conv on[N], off[N];
    for (int greedy = 1; greedy >= 0; greedy--) {
        run_spec r = {.n_tasks = TASKS, .n_samples = SAMPLES, .prompt_len = lens, .turns = 1, .n_pages = 600,
                      .max_batch = 16, .p = {.temperature = greedy ? 0.0f : 1.0f, .top_p = greedy ? 1.0f : 0.95f,
                                             .top_k = greedy ? 0 : 50, .max_new_tokens = 24}};
        r.sharing = 1;
        gen_stats son = run_tasks(m, &r, on, NULL);
        r.sharing = -1;
        gen_stats soff = run_tasks(m, &r, off, NULL);
        double lp;
        int same = same_convs(on, off, N, &lp);
        /* Every sample but the first takes the whole pages before its last
         * prompt token: (len - 1) / PAGE pages. */
        long want = 0;
        for (int t = 0; t < TASKS; t++) want += (long)(SAMPLES - 1) * ((lens[t] - 1) / PAGE) * PAGE;
        printf("  %s: %d/%d sequences identical with and without sharing (max |logprob diff| %.1e); prefill %ld vs "
               "%ld tokens, %ld saved (%ld expected), %ld waits for a page being prefilled\n",
               greedy ? "greedy" : "sampled", same, N, lp, son.prefill_tokens, soff.prefill_tokens, son.shared_tokens,
               want, son.share_waits);
        CHECK(same == N, "sharing changed the tokens of %d sequences", N - same);
        CHECK(lp <= 2e-5, "sharing changed a logprob by %.3e", lp);
        CHECK(son.shared_tokens == want, "saved %ld prefill tokens, expected %ld", son.shared_tokens, want);
        CHECK(soff.shared_tokens == 0, "sharing off still shared %ld tokens", soff.shared_tokens);
        CHECK(son.prefill_tokens + son.shared_tokens == soff.prefill_tokens,
              "prefilled %ld + saved %ld with sharing != %ld prefilled without", son.prefill_tokens, son.shared_tokens,
              soff.prefill_tokens);
        CHECK(son.share_waits > 0, "no sample waited for its task's prefill: the pending path is not exercised");
        /* Decode steps group each task's samples (group_reads, the
         * default); the CPU op checks every step's groups. A step skips at
         * most the pages the samples share. */
        printf("  %s: %ld of %ld steps grouped, %ld cached tokens read once per group instead of per sequence\n",
               greedy ? "greedy" : "sampled", son.grouped_steps, son.steps, son.group_skipped);
        CHECK(son.grouped_steps > 0 && son.group_skipped > 0 && son.group_max == SAMPLES,
              "no decode step grouped all %d samples of a task (groups of up to %d)", SAMPLES, son.group_max);
        CHECK(son.group_skipped % PAGE == 0 && son.group_skipped <= want * son.grouped_steps,
              "%ld tokens skipped in %ld grouped steps, more than the %ld shared a step", son.group_skipped,
              son.grouped_steps, want);
        CHECK(soff.grouped_steps == 0, "sharing off still grouped %ld steps", soff.grouped_steps);
    }
    /* The samples of each task spread over the batch (sequence i of task
     * i % TASKS), two turns: the engine still groups them, with sharing's
     * tokens. In the second turn every sequence is live from the first
     * step in the caller's order, so only putting a task's samples side by
     * side (gather_groups) makes groups there. */
    run_spec r = {.n_tasks = TASKS, .n_samples = SAMPLES, .prompt_len = lens, .turns = 1, .n_pages = 600,
                  .max_batch = 16, .sharing = 1, .interleave = 1,
                  .p = {.temperature = 1.0f, .top_p = 0.95f, .top_k = 50, .max_new_tokens = 24}};
    const gen_stats s1 = run_tasks(m, &r, on, NULL);
    r.turns = 2;
    gen_stats son = run_tasks(m, &r, on, NULL);
    r.sharing = -1;
    gen_stats soff = run_tasks(m, &r, off, NULL);
    double lp;
    const int same = same_convs(on, off, N, &lp);
    printf("  interleaved samples, 2 turns: %d/%d sequences identical with and without sharing; turn 1 %ld of %ld "
           "steps grouped, turn 2 %ld of %ld, groups of up to %d\n",
           same, N, s1.grouped_steps, s1.steps, son.grouped_steps - s1.grouped_steps, son.steps - s1.steps,
           son.group_max);
    CHECK(same == N && lp <= 2e-5, "interleaved: sharing changed %d sequences (logprobs by %.3e)", N - same, lp);
    CHECK(son.grouped_steps - s1.grouped_steps >= 20 && son.group_max == SAMPLES,
          "interleaved second turn: %ld grouped steps, groups of up to %d of %d", son.grouped_steps - s1.grouped_steps,
          son.group_max, SAMPLES);
    CHECK(soff.grouped_steps == 0, "sharing off still grouped %ld steps", soff.grouped_steps);
}

/* ---- 2. memory pressure --------------------------------------------------------- */

static void test_pressure(model *m) {
    enum { TASKS = 4, SAMPLES = 4, N = TASKS * SAMPLES };
    const int lens[TASKS] = {30, 45, 9, 61};
    static conv tight[N], roomy[N], off[N];
    /* A full-length conversation (160 tokens) takes 40 pages. */
    run_spec r = {.n_tasks = TASKS, .n_samples = SAMPLES, .prompt_len = lens, .turns = 1, .n_pages = 100,
                  .max_batch = 12, .sharing = 1,
                  .p = {.temperature = 1.0f, .top_p = 0.95f, .top_k = 50, .max_new_tokens = 60}};
    gen_stats st = run_tasks(m, &r, tight, NULL);
    r.n_pages = 1200;
    r.max_batch = N;
    run_tasks(m, &r, roomy, NULL);
    r.sharing = -1;
    run_tasks(m, &r, off, NULL);
    int finished = 0;
    for (int i = 0; i < N; i++) finished += tight[i].stop == GEN_STOP_BUDGET;
    double lp1, lp2;
    const int same_roomy = same_convs(tight, roomy, N, &lp1), same_off = same_convs(tight, off, N, &lp2);
    printf("  pressure: 16 conversations, 100 pages: %d finished; %ld preemptions, %ld evictions, %ld saved; same "
           "tokens as an ample cache %d/16, as sharing off %d/16\n",
           finished, st.preemptions, st.evictions, st.shared_tokens, same_roomy, same_off);
    CHECK(finished == N, "only %d of %d conversations finished", finished, N);
    CHECK(st.preemptions > 0, "the tight cache never preempted: the test does not exercise pressure");
    CHECK(same_roomy == N && same_off == N, "tokens depend on the cache size or on sharing");
}

/* ---- 3. multi-turn -------------------------------------------------------------- */

static void test_turns(model *m) {
    enum { TASKS = 2, SAMPLES = 3, N = TASKS * SAMPLES };
    const int lens[TASKS] = {26, 19};
    static conv on[N], off[N];
    float *lon = dk_malloc((size_t)cfg.vocab_size * sizeof(float)), *loff = dk_malloc((size_t)cfg.vocab_size * 4);
    run_spec r = {.n_tasks = TASKS, .n_samples = SAMPLES, .prompt_len = lens, .turns = 3, .n_pages = 400,
                  .max_batch = 8, .sharing = 1,
                  .p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 12}};
    gen_stats son = run_tasks(m, &r, on, lon);
    r.sharing = -1;
    run_tasks(m, &r, off, loff);
    double lp;
    const int same = same_convs(on, off, N, &lp);
    const double d = max_abs_diff(lon, loff, (size_t)cfg.vocab_size);
    printf("  3 turns: %d/%d conversations identical with and without sharing (%d tokens each about); next-token "
           "logits max|diff| %.1e; %ld prefill tokens saved\n",
           same, N, on[0].n, d, son.shared_tokens);
    CHECK(same == N, "sharing changed %d multi-turn conversations", N - same);
    CHECK(d <= 2e-5, "logits after the last turn differ by %.3e", d);
    CHECK(son.shared_tokens > 0, "nothing was shared");
    free(lon), free(loff);
}

/* ---- 4. a shared page under a conversation's last token ------------------------- */

static void redo_case(model *m, int sharing, conv *out, float *logits_b, gen_stats *st) {
    gen_config gc = {.page_size = PAGE, .n_pages = 200, .max_batch = 4, .max_step_tokens = STEP,
                     .max_context = MAXCTX, .prefix_sharing = sharing};
    gen_engine *e;
    must(gen_create(&e, m, &gc), "gen_create");
    int32_t t[25];
    for (int i = 0; i < 25; i++) t[i] = prompt_token(7, i);
    /* a: 20 tokens, all cached (gen_logits), pages 0..4 full. b: those 20
     * and 5 more: it takes a's five pages. Then a runs: its cached last
     * token lies in page 4, which b holds. */
    gen_seq *a = gen_seq_new(e, 1), *b = gen_seq_new(e, 2);
    float *la = dk_malloc((size_t)cfg.vocab_size * sizeof(float));
    must(gen_seq_append(e, a, t, 20), "append");
    must(gen_seq_append(e, b, t, 25), "append");
    must(gen_logits(e, a, la), "gen_logits a");
    gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 10};
    must(gen_run(e, &b, 1, &p), "gen_run b");
    must(gen_run(e, &a, 1, &p), "gen_run a");
    CHECK(gen_check_pages(e) == DK_OK, "redo: %s", dk_error());
    /* b's logits after its turn read the shared pages again. */
    must(gen_logits(e, b, logits_b), "gen_logits b");
    gen_seq *both[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        out[i].n = both[i]->n_tokens;
        memcpy(out[i].tokens, both[i]->tokens, (size_t)out[i].n * sizeof(int32_t));
    }
    *st = *gen_get_stats(e);
    free(la);
    gen_free(e);
}

static void test_redo_shared_page(model *m) {
    conv on[2], off[2];
    float *lon = dk_malloc((size_t)cfg.vocab_size * sizeof(float)), *loff = dk_malloc((size_t)cfg.vocab_size * 4);
    gen_stats son, soff;
    redo_case(m, 1, on, lon, &son);
    redo_case(m, -1, off, loff, &soff);
    double lp;
    const int same = same_convs(on, off, 2, &lp);
    const double d = max_abs_diff(lon, loff, (size_t)cfg.vocab_size);
    printf("  last token in a shared page: b took %ld tokens of a's; a then recomputed its page: %d/2 identical, "
           "b's logits max|diff| %.1e\n",
           son.shared_tokens, same, d);
    CHECK(son.shared_tokens == 20, "b took %ld tokens of a's pages, expected 20", son.shared_tokens);
    CHECK(same == 2, "a shared page under the last token changed the tokens");
    CHECK(d <= 2e-5, "the shared page changed under its other holder (%.3e)", d);
    free(lon), free(loff);
}

/* ---- 5. errors ------------------------------------------------------------------ */

static void test_errors(model *m) {
    gen_config gc = {.page_size = PAGE, .n_pages = 100, .max_batch = 4, .max_context = MAXCTX,
                     .max_step_tokens = STEP, .prefix_sharing = 2};
    gen_engine *e = NULL;
    CHECK(gen_create(&e, m, &gc) == DK_ERR_USAGE && strstr(dk_error(), "prefix_sharing"),
          "prefix_sharing = 2 was accepted");
    printf("  errors: %s\n", dk_error());
    gc.prefix_sharing = 0;
    gc.group_reads = 3;
    CHECK(gen_create(&e, m, &gc) == DK_ERR_USAGE && strstr(dk_error(), "group_reads"), "group_reads = 3 was accepted");
    printf("  errors: %s\n", dk_error());
}

int main(void) {
    ops_ctx ctx;
    gen_config gc = {.max_step_tokens = STEP};
    size_t a = model_scratch_bytes(&cfg, STEP), b = gen_scratch_bytes(&cfg, &gc, DK_DEVICE_CPU);
    must(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, a > b ? a : b), "ops_ctx_init");
    model m;
    must(model_create(&m, &cfg, &ctx, STEP, 0), "model_create");
    model_init_random(&m, 23, 0.3f);
    test_identical(&m);
    test_pressure(&m);
    test_turns(&m);
    test_redo_shared_page(&m);
    test_errors(&m);
    model_free(&m);
    ops_ctx_free(&ctx);
    return test_finish("test_gen_prefix");
}
