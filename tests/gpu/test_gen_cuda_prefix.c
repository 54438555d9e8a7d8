/* test_gen_cuda_prefix.c: prefix sharing and 32k-token conversations in the
 * generation engine on the CUDA backend (bf16). Exits 77 where no CUDA GPU
 * (or no CUDA op table) is available. The tiny Qwen3 shape of
 * gen_cuda_common.h, head dim 64 (the tensor-core decode kernel).
 *
 * 1. Sharing on against sharing off (gen_config.prefix_sharing), decode
 *    graphs on, on the peaked model (greedy tokens survive bf16 rounding):
 *    4 tasks x 8 samples, greedy: every sequence's tokens identical, the
 *    prefill saved equal to the hand count, gen_check_pages clean after the
 *    run and every page free once the sequences are. Sampled (T 1): the
 *    agreement is printed (bf16 K/V written by another step's shapes may
 *    move a draw).
 * 2. Memory pressure with sharing: 24 conversations (6 tasks x 4 samples)
 *    through a cache that holds 3 at full length (prompts up to 200, 200 new
 *    tokens) all finish, greedy tokens identical to an ample cache.
 * 3. A 3-turn conversation reaching ~32k tokens (prompt, turn, feedback,
 *    turn, feedback, turn, then a last message): the engine's next-token
 *    logits after it against one prefill of the whole history in a fresh
 *    sequence, within 3% of the logit scale (the bound the multi-turn check
 *    of test_gen_cuda_engine.c uses). Then three such conversations through
 *    a cache of 1.5 conversations at 32k: all finish their turns (the queue
 *    and preemption at 32k neither deadlock nor drop one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "../unit/test_ops_common.h"
#include "gen_cuda_common.h"

typedef struct {
    ops_ctx ctx;
    model m;
} rig;

static void rig_init(rig *r, const model_config *c) {
    must(ops_ctx_init(&r->ctx, DK_DEVICE_CUDA, 0, model_scratch_bytes(c, 8)), "ctx");
    must(model_create(&r->m, c, &r->ctx, 8, 0), "model_create");
}

static void rig_free(rig *r) {
    model_free(&r->m);
    ops_ctx_free(&r->ctx);
}

static void fill_tokens(int32_t *t, int n, int key, int V) {
    for (int j = 0; j < n; j++) t[j] = (int32_t)(((uint64_t)key * 7919 + (uint64_t)j * 104729 + 3) % (uint64_t)V);
}

/* Runs n_tasks x n_samples conversations (task t's prompt has lens[t]
 * tokens) on a fresh engine over m; tokens[i] gets conversation i's tokens
 * (caller frees). Checks the pages afterwards. */
static gen_stats run_tasks(model *m, int n_pages, int max_batch, int sharing, int n_tasks, int n_samples,
                           const int *lens, const gen_params *p, int32_t **tokens, int *n_tokens, int *finished) {
    gen_config gc = {.page_size = 16, .n_pages = n_pages, .max_batch = max_batch, .max_step_tokens = 512,
                     .max_context = 512, .cuda_graphs = 1, .prefix_sharing = sharing};
    gen_engine *e;
    must(gen_create(&e, m, &gc), "gen_create");
    const int n = n_tasks * n_samples;
    gen_seq **s = dk_calloc((size_t)n, sizeof *s);
    int32_t buf[512];
    for (int i = 0; i < n; i++) {
        s[i] = gen_seq_new(e, 500 + (uint64_t)i);
        fill_tokens(buf, lens[i / n_samples], i / n_samples, m->cfg.vocab_size);
        must(gen_seq_append(e, s[i], buf, lens[i / n_samples]), "append");
    }
    must(gen_run(e, s, n, p), "gen_run");
    CHECK(gen_check_pages(e) == DK_OK, "after the run: %s", dk_error());
    *finished = 0;
    for (int i = 0; i < n; i++) {
        n_tokens[i] = s[i]->n_tokens;
        tokens[i] = dk_malloc((size_t)s[i]->n_tokens * sizeof(int32_t));
        memcpy(tokens[i], s[i]->tokens, (size_t)s[i]->n_tokens * sizeof(int32_t));
        *finished += s[i]->stop == GEN_STOP_BUDGET;
    }
    gen_stats st = *gen_get_stats(e);
    for (int i = 0; i < n; i++) gen_seq_free(e, s[i]);
    CHECK(gen_free_pages(e) == n_pages, "%d of %d pages free after freeing every sequence", gen_free_pages(e),
          n_pages);
    free(s);
    gen_free(e);
    return st;
}

static int count_same(int32_t **a, const int *na, int32_t **b, const int *nb, int n) {
    int same = 0;
    for (int i = 0; i < n; i++) same += na[i] == nb[i] && !memcmp(a[i], b[i], (size_t)na[i] * sizeof(int32_t));
    return same;
}

static void free_all(int32_t **t, int n) {
    for (int i = 0; i < n; i++) free(t[i]);
}

/* ---- 1 and 2. sharing on and off, and under pressure ----------------------------- */

static void test_sharing(void) {
    enum { TASKS = 4, SAMPLES = 8, N = TASKS * SAMPLES, NEW = 64 };
    const int lens[TASKS] = {150, 64, 301, 33};
    model_config c = tiny(64);
    rig r;
    rig_init(&r, &c);
    init_peaked(&r.m);
    int32_t *on[N], *off[N];
    int non[N], noff[N], fin;
    for (int sampled = 0; sampled < 2; sampled++) {
        gen_params p = {.temperature = sampled ? 1.0f : 0.0f, .top_p = 1.0f, .max_new_tokens = NEW};
        gen_stats son = run_tasks(&r.m, 512, N, 1, TASKS, SAMPLES, lens, &p, on, non, &fin);
        gen_stats soff = run_tasks(&r.m, 512, N, -1, TASKS, SAMPLES, lens, &p, off, noff, &fin);
        const int same = count_same(on, non, off, noff, N);
        long want = 0;
        for (int t = 0; t < TASKS; t++) want += (long)(SAMPLES - 1) * ((lens[t] - 1) / 16) * 16;
        printf("  %-7s sharing on vs off: %d/%d sequences identical; prefill %ld vs %ld tokens, %ld saved (%ld "
               "expected); %ld steps vs %ld\n",
               sampled ? "sampled" : "greedy", same, N, son.prefill_tokens, soff.prefill_tokens, son.shared_tokens,
               want, son.steps, soff.steps);
        CHECK(son.shared_tokens == want, "saved %ld prefill tokens, expected %ld", son.shared_tokens, want);
        CHECK(son.prefill_tokens + son.shared_tokens == soff.prefill_tokens, "prefill counts do not add up");
        if (!sampled) CHECK(same == N, "greedy tokens differ with sharing in %d sequences", N - same);
        free_all(on, N), free_all(off, N);
    }
    {
        enum { T2 = 6, S2 = 4, N2 = T2 * S2 };
        const int l2[T2] = {20, 90, 150, 7, 64, 200};
        gen_params p = {.temperature = 0.0f, .top_p = 1.0f, .max_new_tokens = 200};
        int32_t *tight[N2], *roomy[N2];
        int nt[N2], nr[N2], fin_t, fin_r;
        /* 96 pages of 16: three conversations at full length (512). */
        gen_stats st = run_tasks(&r.m, 96, 16, 1, T2, S2, l2, &p, tight, nt, &fin_t);
        run_tasks(&r.m, 1024, N2, 1, T2, S2, l2, &p, roomy, nr, &fin_r);
        const int same = count_same(tight, nt, roomy, nr, N2);
        printf("  pressure with sharing: %d/%d finished, %ld preemptions, %ld saved; greedy tokens as an ample cache "
               "%d/%d\n",
               fin_t, N2, st.preemptions, st.shared_tokens, same, N2);
        CHECK(fin_t == N2 && st.preemptions > 0, "%d of %d finished, %ld preemptions", fin_t, N2, st.preemptions);
        CHECK(same == N2, "tokens under pressure differ from an ample cache in %d sequences", N2 - same);
        free_all(tight, N2), free_all(roomy, N2);
    }
    rig_free(&r);
}

/* ---- 3. 32k-token conversations ----------------------------------------------------- */

enum { LONG_CTX = 32768 };

/* Appends n tokens keyed by key. */
static void append_n(gen_engine *e, gen_seq *s, int n, int key) {
    int32_t *t = dk_malloc((size_t)n * sizeof(int32_t));
    fill_tokens(t, n, key, 1000);
    must(gen_seq_append(e, s, t, n), "append");
    free(t);
}

/* Prompt 10000, three turns of 256 with feedback of 10000 and 11000 between
 * them: 31,768 tokens, then a last message of 24. */
static void three_turns(gen_engine *e, gen_seq **s, int n) {
    gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 256};
    const int feedback[2] = {10000, 11000};
    for (int i = 0; i < n; i++) append_n(e, s[i], 10000, 40 + i);
    for (int t = 0; t < 3; t++) {
        if (t > 0)
            for (int i = 0; i < n; i++) append_n(e, s[i], feedback[t - 1], 50 + 10 * t + i);
        must(gen_run(e, s, n, &p), "gen_run");
    }
    for (int i = 0; i < n; i++) append_n(e, s[i], 24, 90 + i);
}

static void test_long(void) {
    model_config c = tiny(64);
    c.max_position = 40960;
    rig r;
    rig_init(&r, &c);
    model_init_random(&r.m, 4, 0.3f);
    const int V = c.vocab_size;
    {
        /* One step takes the whole history: the fresh sequence's logits come
         * from a single prefill (the training attention over 31,792 tokens). */
        gen_config gc = {.page_size = 16, .n_pages = 2 * LONG_CTX / 16 + 64, .max_batch = 4,
                         .max_step_tokens = LONG_CTX, .max_context = LONG_CTX, .cuda_graphs = 1};
        gen_engine *e;
        must(gen_create(&e, &r.m, &gc), "gen_create");
        gen_seq *a = gen_seq_new(e, 1);
        three_turns(e, &a, 1);
        float *lc = dk_malloc((size_t)V * 4), *lf = dk_malloc((size_t)V * 4);
        must(gen_logits(e, a, lc), "logits continued");
        gen_seq *f = gen_seq_new(e, 2);
        must(gen_seq_append(e, f, a->tokens, a->n_tokens), "history");
        const long pre0 = gen_get_stats(e)->prefill_tokens, steps0 = gen_get_stats(e)->steps;
        must(gen_logits(e, f, lf), "logits fresh");
        const long pre = gen_get_stats(e)->prefill_tokens - pre0, steps = gen_get_stats(e)->steps - steps0;
        const double d = max_abs_diff(lc, lf, (size_t)V), sc = max_abs(lf, (size_t)V);
        printf("  3 turns, %d tokens: logits vs one prefill of the history (%ld tokens in %ld step): max|diff| %.3f "
               "of max|logit| %.1f (%.2f%%)\n",
               a->n_tokens, pre, steps, d, sc, 100.0 * d / sc);
        CHECK(a->n_tokens > 31000, "the conversation reached only %d tokens", a->n_tokens);
        CHECK(steps == 1, "the fresh history took %ld steps, not one prefill", steps);
        CHECK(d <= 0.03 * sc, "32k-token continued logits differ from one prefill by %.3f (scale %.1f)", d, sc);
        free(lc), free(lf);
        gen_free(e);
    }
    {
        /* Three such conversations, a cache of 1.5 of them at 32k. */
        gen_config gc = {.page_size = 16, .n_pages = 3 * LONG_CTX / 32, .max_batch = 4, .max_step_tokens = 8192,
                         .max_context = LONG_CTX, .cuda_graphs = 1};
        gen_engine *e;
        must(gen_create(&e, &r.m, &gc), "gen_create");
        gen_seq *s[3];
        for (int i = 0; i < 3; i++) s[i] = gen_seq_new(e, 10 + (uint64_t)i);
        double t0 = dk_now();
        three_turns(e, s, 3);
        int done = 0;
        for (int i = 0; i < 3; i++) done += s[i]->n_tokens == 31768 + 24;
        const gen_stats *st = gen_get_stats(e);
        printf("  3 conversations of 32k through %d pages (1.5 of them): %d/3 complete in %.1f s; %ld preemptions, "
               "%ld evictions, %ld recomputed tokens\n",
               gc.n_pages, done, dk_now() - t0, st->preemptions, st->evictions, st->recomputed_tokens);
        CHECK(done == 3, "only %d of 3 conversations of 32k completed their turns", done);
        CHECK(st->preemptions + st->evictions > 0, "the cache never ran short: the test does not exercise pressure");
        CHECK(gen_check_pages(e) == DK_OK, "32k pressure: %s", dk_error());
        gen_free(e);
    }
    rig_free(&r);
}

int main(void) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("test_gen_cuda_prefix: no CUDA GPU or no CUDA op table in this build, skipped\n");
        return 77;
    }
    test_sharing();
    test_long();
    return test_finish("test_gen_cuda_prefix");
}
