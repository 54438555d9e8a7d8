/* test_gen_engine.c: the generation engine (model/generate.h) on the CPU
 * backend, against independent references:
 *
 * 1. Hugging Face: for the tiny Qwen3, Qwen2 and Llama checkpoints of
 *    tests/fixtures/models (logits computed by transformers), the engine's
 *    next-token logits after every prefix of each reference sequence, fed
 *    one token at a time (decode steps over pages of 3 tokens), and after the
 *    whole sequence in one prefill, match HF's logits to 1e-4.
 * 2. The training forward: the logprob the engine recorded for every sampled
 *    token equals model_forward's logprob of that token (targets = the
 *    sampled tokens, same temperature), to 2e-5 (fp32, different op order).
 *    Sampled (T 0.8, top-p 0.9) and greedy rollouts, Qwen3 and Qwen2 shapes;
 *    steps of one token, of several (fused q|k|v projection) and a prefill
 *    of more than GEN_FUSED_QKV_TOKENS tokens (separate projections).
 * 3. Multi-turn: after a turn and appended feedback, the next-token logits of
 *    the continued conversation equal those of a fresh prefill of the whole
 *    history (2e-5), and the continuation prefills only the new tokens.
 * 4. Memory pressure: twelve sequences through a cache that holds fewer than
 *    three at full length all finish (sequences wait and are preempted), and
 *    produce exactly the tokens of a run with a roomy cache, and of each
 *    sequence run alone: draws are keyed by (seed, position).
 * 5. Stops: stop token (kept as the last token), stop check (stop strings
 *    matched on text decoded with the BPE tokenizer fixture), turn budget,
 *    context limit; and bad arguments fail with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "test_ops_common.h"

static const model_config qwen3_cfg = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 512, .hidden_size = 32, .intermediate_size = 48, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .max_position = 1024, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};
static const model_config qwen2_cfg = {
    .arch = DK_ARCH_QWEN2, .vocab_size = 512, .hidden_size = 32, .intermediate_size = 40, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 1, .head_dim = 8, .max_position = 1024, .rope_theta = 1000000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 0, .qkv_bias = 1, .bos_token_id = -1, .eos_token_id = -1,
};

/* A CPU context with room for both the training forward and the engine. */
static void make_ctx(ops_ctx *ctx, const model_config *c, int max_tokens, const gen_config *gc) {
    size_t a = model_scratch_bytes(c, max_tokens), b = gen_scratch_bytes(c, gc, DK_DEVICE_CPU);
    if (ops_ctx_init(ctx, DK_DEVICE_CPU, 0, a > b ? a : b)) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
}

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

/* A CPU context, a model with random weights (std 0.3: logits of std ~3)
 * and an engine over it. */
typedef struct {
    ops_ctx ctx;
    model m;
    gen_engine *e;
} rig;

static void rig_open(rig *r, const model_config *cfg, const gen_config *gc, int max_tokens, uint64_t seed) {
    make_ctx(&r->ctx, cfg, max_tokens, gc);
    must(model_create(&r->m, cfg, &r->ctx, max_tokens, 0), "model_create");
    model_init_random(&r->m, seed, 0.3f);
    must(gen_create(&r->e, &r->m, gc), "gen_create");
}

static void rig_close(rig *r) {
    gen_free(r->e);
    model_free(&r->m);
    ops_ctx_free(&r->ctx);
}

static gen_seq *new_prompt(gen_engine *e, uint64_t seed, int len, int V) {
    gen_seq *s = gen_seq_new(e, seed);
    int32_t *p = dk_malloc((size_t)len * sizeof(int32_t));
    for (int i = 0; i < len; i++) p[i] = (int32_t)((seed * 131 + (uint64_t)i * 17 + 5) % (uint64_t)V);
    must(gen_seq_append(e, s, p, len), "append prompt");
    free(p);
    return s;
}

/* ---- 1. Hugging Face logits ---------------------------------------------------- */

static float *ref_tensor(const st_reader *r, const char *name, size_t *n) {
    const st_tensor *t = safetensors_find(r, name);
    if (!t) {
        fprintf(stderr, "FAIL: reference tensor '%s' missing\n", name);
        exit(1);
    }
    float *out = dk_malloc(t->numel * sizeof(float) + 1);
    safetensors_tensor_to_f32(t, out);
    if (n) *n = t->numel;
    return out;
}

static void test_hf(const char *family) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", family);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    model_config cfg;
    must(model_config_from_hf(dir, &cfg), dir);
    st_reader ref;
    must(safetensors_open(&ref, path), path);
    size_t T, n_cu;
    float *tok = ref_tensor(&ref, "tokens", &T), *cu = ref_tensor(&ref, "cu_seqlens", &n_cu);
    float *pos = ref_tensor(&ref, "positions", NULL), *logits = ref_tensor(&ref, "logits", NULL);
    const int V = cfg.vocab_size;

    gen_config gc = {.page_size = 3, .n_pages = 64, .max_batch = 4, .max_step_tokens = 64, .max_context = 64};
    ops_ctx ctx;
    make_ctx(&ctx, &cfg, 8, &gc);
    model m;
    must(model_create(&m, &cfg, &ctx, 8, 0), "model_create");
    must(model_load_hf(&m, dir), dir);
    gen_engine *e;
    must(gen_create(&e, &m, &gc), "gen_create");

    float *out = dk_malloc((size_t)V * sizeof(float));
    double step_diff = 0.0, prefill_diff = 0.0;
    int rows = 0;
    for (size_t s = 0; s + 1 < n_cu; s++) {
        int a = (int)cu[s], b = (int)cu[s + 1];
        if ((int)pos[a] != 0) {
            fprintf(stderr, "FAIL %s: reference sequence %zu does not start at position 0\n", family, s);
            exit(1);
        }
        gen_seq *inc = gen_seq_new(e, 1), *whole = gen_seq_new(e, 2);
        for (int t = a; t < b; t++) {
            int32_t id = (int32_t)tok[t];
            must(gen_seq_append(e, inc, &id, 1), "append");
            must(gen_seq_append(e, whole, &id, 1), "append");
            must(gen_logits(e, inc, out), "gen_logits");
            step_diff = fmax(step_diff, max_abs_diff(out, logits + (size_t)t * V, (size_t)V));
            rows++;
        }
        must(gen_logits(e, whole, out), "gen_logits");
        prefill_diff = fmax(prefill_diff, max_abs_diff(out, logits + (size_t)(b - 1) * V, (size_t)V));
        gen_seq_free(e, inc);
        gen_seq_free(e, whole);
    }
    printf("  %-6s vs transformers: %d prefixes token by token max|diff| %.2e; whole-sequence prefill %.2e\n",
           family, rows, step_diff, prefill_diff);
    CHECK(step_diff <= 1e-4, "%s: decode-step logits differ from HF by %.3e", family, step_diff);
    CHECK(prefill_diff <= 1e-4, "%s: prefill logits differ from HF by %.3e", family, prefill_diff);
    CHECK(gen_free_pages(e) == 64, "%s: pages leaked: %d of 64 free", family, gen_free_pages(e));
    free(out), free(tok), free(cu), free(pos), free(logits);
    gen_free(e);
    model_free(&m);
    safetensors_close(&ref);
    ops_ctx_free(&ctx);
}

/* ---- 2. recorded logprobs vs the training forward ------------------------------- */

/* Runs model_forward over each sequence with targets at the sampled tokens
 * and compares logprobs; returns the max abs difference, *mean the mean. */
static double compare_logprobs(model *m, gen_seq **seqs, int n, float temperature, double *mean, int *count) {
    double worst = 0.0, sum = 0.0;
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        gen_seq *s = seqs[i];
        const int T = s->n_tokens;
        int32_t *targets = dk_malloc((size_t)T * sizeof(int32_t));
        int32_t cu[2] = {0, T};
        for (int t = 0; t < T; t++) targets[t] = t + 1 < T && s->sampled[t + 1] ? s->tokens[t + 1] : -1;
        model_batch b = {.T = T, .n_seqs = 1, .tokens = s->tokens, .cu_seqlens = cu, .targets = targets};
        must(model_forward(m, &b, temperature > 0.0f ? 1.0f / temperature : 1.0f), "model_forward");
        float *lp = dk_malloc((size_t)T * sizeof(float));
        ops_download(m->ctx, lp, m->logprob, (size_t)T * sizeof(float));
        for (int t = 0; t + 1 < T; t++) {
            if (!s->sampled[t + 1]) continue;
            double d = fabs((double)lp[t] - s->logprobs[t + 1]);
            worst = fmax(worst, d);
            sum += d;
            cnt++;
        }
        free(lp);
        free(targets);
    }
    *mean = cnt ? sum / cnt : 0.0;
    *count = cnt;
    return worst;
}

static void test_logprobs(const model_config *cfg, const char *name) {
    gen_config gc = {.page_size = 4, .n_pages = 600, .max_batch = 8, .max_step_tokens = 512, .max_context = 512};
    rig rg;
    rig_open(&rg, cfg, &gc, 512, 5);
    gen_engine *e = rg.e;
    model *m = &rg.m;
    /* Decode steps of 1..7 tokens (fused q|k|v projection), a first prefill
     * step of 381 tokens (separate projections). */
    enum { N = 7 };
    const int lens[N] = {1, 3, 9, 16, 17, 300, 35};
    for (int greedy = 0; greedy < 2; greedy++) {
        gen_seq *seqs[N];
        for (int i = 0; i < N; i++) seqs[i] = new_prompt(e, 100 + (uint64_t)i, lens[i], cfg->vocab_size);
        gen_params p = {.temperature = greedy ? 0.0f : 0.8f, .top_p = greedy ? 1.0f : 0.9f, .max_new_tokens = 20};
        must(gen_run(e, seqs, N, &p), "gen_run");
        double mean;
        int cnt;
        double worst = compare_logprobs(m, seqs, N, p.temperature, &mean, &cnt);
        printf("  %s %-7s rollout logprobs vs training forward: %d tokens, mean|diff| %.2e max|diff| %.2e\n", name,
               greedy ? "greedy" : "sampled", cnt, mean, worst);
        CHECK(cnt == N * 20, "expected %d sampled tokens, got %d", N * 20, cnt);
        CHECK(worst <= 2e-5, "%s: recorded logprobs differ from the training forward by %.3e", name, worst);
        for (int i = 0; i < N; i++) gen_seq_free(e, seqs[i]);
    }
    rig_close(&rg);
}

/* Decode steps planned for graphs (cuda_graphs = 1) widen their block
 * tables to GEN_GRAPH_PAGE_BUCKET pages; on the CPU that is all that
 * changes, and the padding must not change a single token or logprob. */
static void test_graph_shapes(const model_config *cfg) {
    enum { N = 5, NEW = 40 };
    const int lens[N] = {1, 7, 30, 64, 3};
    int32_t *tok[2][N];
    float *lp[2][N];
    for (int mode = 0; mode < 2; mode++) {
        gen_config gc = {.page_size = 2, .n_pages = 400, .max_batch = 8, .max_step_tokens = 256,
                         .max_context = 256, .cuda_graphs = mode};
        rig rg;
        rig_open(&rg, cfg, &gc, 256, 9);
        gen_engine *e = rg.e;
        gen_seq *seqs[N];
        for (int i = 0; i < N; i++) seqs[i] = new_prompt(e, 40 + (uint64_t)i, lens[i], cfg->vocab_size);
        gen_params p = {.temperature = 0.9f, .top_p = 0.95f, .max_new_tokens = NEW};
        must(gen_run(e, seqs, N, &p), "gen_run");
        for (int i = 0; i < N; i++) {
            tok[mode][i] = dk_malloc((size_t)seqs[i]->n_tokens * sizeof(int32_t));
            lp[mode][i] = dk_malloc((size_t)seqs[i]->n_tokens * sizeof(float));
            memcpy(tok[mode][i], seqs[i]->tokens, (size_t)seqs[i]->n_tokens * sizeof(int32_t));
            memcpy(lp[mode][i], seqs[i]->logprobs, (size_t)seqs[i]->n_tokens * sizeof(float));
            CHECK(seqs[i]->n_tokens == lens[i] + NEW, "graph shapes: sequence %d has %d tokens", i, seqs[i]->n_tokens);
            gen_seq_free(e, seqs[i]);
        }
        rig_close(&rg);
    }
    int same = 1;
    for (int i = 0; i < N; i++) {
        same &= !memcmp(tok[0][i], tok[1][i], (size_t)(lens[i] + NEW) * sizeof(int32_t));
        same &= !memcmp(lp[0][i], lp[1][i], (size_t)(lens[i] + NEW) * sizeof(float));
        free(tok[0][i]), free(tok[1][i]), free(lp[0][i]), free(lp[1][i]);
    }
    printf("  decode steps with block tables widened for graphs: tokens and logprobs %s\n",
           same ? "bit-identical" : "DIFFER");
    CHECK(same, "widened block tables changed the generation");
}

/* Decode steps queued while the step before runs (the default) against
 * every step waited for (sync_steps = 1): the same tokens over two turns,
 * and the same logprobs to 2e-5 (a step ahead holds rows of ended
 * sequences, so steps run at other batch sizes: fp32 sums in another
 * order), with sequences ending at unforeseeable points (a stop check:
 * the rows of the step already queued for them are dropped, and the cache
 * keeps the key and value that step wrote for the last token), more
 * sequences than the batch holds, and after the second turn the continued
 * conversation's next-token logits equal a fresh prefill's. */
static int stop_by_id(void *user, const gen_seq *s) {
    (void)user;
    return s->n_tokens - s->turn_start >= 2 + s->id % 7;
}

static void test_run_ahead(const model_config *cfg) {
    enum { N = 7, TURNS = 2 };
    const int lens[N] = {5, 1, 12, 3, 30, 8, 2};
    int32_t *tok[2][N];
    float *lp[2][N];
    int ntok[2][N];
    gen_stats st[2];
    double diff = 0.0;
    for (int mode = 0; mode < 2; mode++) {
        gen_config gc = {.page_size = 4, .n_pages = 200, .max_batch = 4, .max_step_tokens = 64, .max_context = 128,
                         .cuda_graphs = 1, .sync_steps = mode};
        rig rg;
        rig_open(&rg, cfg, &gc, 64, 9);
        gen_engine *e = rg.e;
        const int V = cfg->vocab_size;
        gen_seq *seqs[N];
        for (int i = 0; i < N; i++) seqs[i] = new_prompt(e, 70 + (uint64_t)i, lens[i], V);
        gen_params p = {.temperature = 0.9f, .top_p = 1.0f, .max_new_tokens = 10, .stop_fn = stop_by_id};
        int32_t feedback[6];
        for (int i = 0; i < 6; i++) feedback[i] = (int32_t)((i * 53 + 7) % V);
        for (int turn = 0; turn < TURNS; turn++) {
            if (turn) {
                for (int i = 0; i < N; i++) must(gen_seq_append(e, seqs[i], feedback, 1 + i % 6), "append feedback");
                p.max_new_tokens = 14;
            }
            must(gen_run(e, seqs, N, &p), "gen_run");
        }
        for (int i = 0; i < N; i++) {
            ntok[mode][i] = seqs[i]->n_tokens;
            tok[mode][i] = dk_malloc((size_t)seqs[i]->n_tokens * sizeof(int32_t));
            lp[mode][i] = dk_malloc((size_t)seqs[i]->n_tokens * sizeof(float));
            memcpy(tok[mode][i], seqs[i]->tokens, (size_t)seqs[i]->n_tokens * sizeof(int32_t));
            memcpy(lp[mode][i], seqs[i]->logprobs, (size_t)seqs[i]->n_tokens * sizeof(float));
        }
        st[mode] = *gen_get_stats(e);
        if (mode == 0) {
            /* A sequence whose last token is cached: it ended on its stop
             * check, and that token's key and value came from a step ahead. */
            int a = -1;
            for (int i = 0; i < N && a < 0; i++)
                if (seqs[i]->n_cached == seqs[i]->n_tokens) a = i;
            CHECK(a >= 0, "no sequence ended with its last token cached by a step ahead");
            if (a < 0) a = 0;
            must(gen_seq_append(e, seqs[a], feedback, 3), "append feedback");
            float *cont = dk_malloc((size_t)V * sizeof(float)), *fresh = dk_malloc((size_t)V * sizeof(float));
            must(gen_logits(e, seqs[a], cont), "gen_logits continued");
            gen_seq *f = gen_seq_new(e, 3);
            must(gen_seq_append(e, f, seqs[a]->tokens, seqs[a]->n_tokens), "append history");
            must(gen_logits(e, f, fresh), "gen_logits fresh");
            diff = max_abs_diff(cont, fresh, (size_t)V);
            free(cont), free(fresh);
        }
        rig_close(&rg);
    }
    int same = 1;
    double lpd = 0.0;
    for (int i = 0; i < N; i++) {
        same &= ntok[0][i] == ntok[1][i];
        if (ntok[0][i] == ntok[1][i]) {
            same &= !memcmp(tok[0][i], tok[1][i], (size_t)ntok[0][i] * sizeof(int32_t));
            lpd = fmax(lpd, max_abs_diff(lp[0][i], lp[1][i], (size_t)ntok[0][i]));
        }
        free(tok[0][i]), free(tok[1][i]), free(lp[0][i]), free(lp[1][i]);
    }
    printf("  steps queued ahead: %ld of %ld steps (%ld rows dropped), against every step waited for: tokens %s, "
           "logprobs max|diff| %.2e; continued logits vs fresh prefill max|diff| %.2e\n",
           st[0].ahead_steps, st[0].steps, st[0].ahead_dropped, same ? "identical" : "DIFFER", lpd, diff);
    CHECK(same, "queueing steps ahead changed the tokens");
    CHECK(lpd <= 2e-5, "queueing steps ahead changed the logprobs by %.3e", lpd);
    CHECK(st[0].ahead_steps >= st[0].steps / 3 && st[0].ahead_dropped > 0,
          "queued ahead %ld of %ld steps, %ld rows dropped: the path was not exercised", st[0].ahead_steps,
          st[0].steps, st[0].ahead_dropped);
    CHECK(st[1].ahead_steps == 0 && st[1].ahead_dropped == 0, "sync_steps = 1 still queued %ld steps ahead",
          st[1].ahead_steps);
    CHECK(diff <= 2e-5, "after a step ahead's cached token the continued logits differ by %.3e", diff);
}

/* ---- 3. multi-turn continuation ---------------------------------------------------- */

static void test_continuation(const model_config *cfg, int paged_prefill) {
    gen_config gc = {.page_size = 4, .n_pages = 120, .max_batch = 4, .max_step_tokens = 16, .max_context = 128,
                     .paged_prefill = paged_prefill};
    rig rg;
    rig_open(&rg, cfg, &gc, 16, 9);
    gen_engine *e = rg.e;
    const int V = cfg->vocab_size;
    gen_seq *a = new_prompt(e, 1, 21, V), *b = new_prompt(e, 2, 6, V); /* 21 > max_step_tokens: chunked */
    gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 9};
    gen_seq *both[2] = {a, b};
    must(gen_run(e, both, 2, &p), "gen_run turn 1");
    int32_t feedback[11];
    for (int i = 0; i < 11; i++) feedback[i] = (int32_t)((i * 37 + 3) % V);
    must(gen_seq_append(e, a, feedback, 11), "append feedback");
    must(gen_seq_append(e, b, feedback, 4), "append feedback");
    long pre0 = gen_get_stats(e)->prefill_tokens;
    must(gen_run(e, both, 2, &p), "gen_run turn 2");
    long prefilled = gen_get_stats(e)->prefill_tokens - pre0;
    must(gen_seq_append(e, a, feedback, 5), "append feedback");

    float *cont = dk_malloc((size_t)V * sizeof(float)), *fresh = dk_malloc((size_t)V * sizeof(float));
    must(gen_logits(e, a, cont), "gen_logits continued");
    gen_seq *f = gen_seq_new(e, 3);
    must(gen_seq_append(e, f, a->tokens, a->n_tokens), "append history");
    must(gen_logits(e, f, fresh), "gen_logits fresh");
    double diff = max_abs_diff(cont, fresh, (size_t)V), scale = max_abs(fresh, (size_t)V);
    printf("  continuation (%s prefill): %d-token history, next-token logits vs fresh prefill max|diff| %.2e "
           "(max|logit| %.1f); turn 2 prefilled %ld tokens for 15 appended\n",
           paged_prefill ? "paged" : "causal", a->n_tokens, diff, scale, prefilled);
    CHECK(diff <= 2e-5, "continued logits differ from a fresh prefill by %.3e", diff);
    /* Turn 2 processes each sequence's uncached last token of turn 1 plus the
     * feedback; the first of those rows is where its first new token comes
     * from, so the prefilled count is exactly the feedback. */
    CHECK(prefilled == 15, "turn 2 prefilled %ld tokens, expected the 15 appended", prefilled);

    /* Sampling after the continuation matches sampling after the fresh
     * prefill: same seed, same positions, same tokens. */
    gen_seq *g = gen_seq_new(e, a->seed);
    must(gen_seq_append(e, g, a->tokens, a->n_tokens), "append history");
    gen_seq *pair[2] = {a, g};
    must(gen_run(e, pair, 2, &p), "gen_run turn 3");
    int same = a->n_tokens == g->n_tokens && !memcmp(a->tokens, g->tokens, (size_t)a->n_tokens * sizeof(int32_t));
    printf("  turn 3 after continuation vs after fresh prefill: tokens %s\n", same ? "identical" : "DIFFERENT");
    CHECK(same, "a continued conversation sampled other tokens than its fresh copy");
    free(cont), free(fresh);
    rig_close(&rg);
}

/* ---- 4. memory pressure ---------------------------------------------------------- */

typedef struct {
    int32_t tokens[128];
    int n;
    gen_stop stop;
} seq_copy;

static void run_set(const model_config *cfg, model *m, int n_pages, int max_batch, int only, seq_copy *out,
                    gen_stats *stats) {
    gen_config gc = {.page_size = 4, .n_pages = n_pages, .max_batch = max_batch, .max_step_tokens = 24,
                     .max_context = 64};
    gen_engine *e;
    must(gen_create(&e, m, &gc), "gen_create");
    enum { N = 12 };
    gen_seq *seqs[N];
    int n = 0;
    for (int i = 0; i < N; i++)
        if (only < 0 || only == i) seqs[n++] = new_prompt(e, 40 + (uint64_t)i, 3 + (i * 7) % 19, cfg->vocab_size);
    gen_params p = {.temperature = 1.0f, .top_p = 0.95f, .top_k = 50, .max_new_tokens = 30};
    must(gen_run(e, seqs, n, &p), "gen_run");
    for (int i = 0; i < n; i++) {
        seq_copy *c = &out[only < 0 ? i : only];
        c->n = seqs[i]->n_tokens;
        memcpy(c->tokens, seqs[i]->tokens, (size_t)c->n * sizeof(int32_t));
        c->stop = seqs[i]->stop;
    }
    if (stats) *stats = *gen_get_stats(e);
    for (int i = 0; i < n; i++) gen_seq_free(e, seqs[i]);
    CHECK(gen_free_pages(e) == n_pages, "pages leaked: %d of %d free after freeing every sequence", gen_free_pages(e),
          n_pages);
    gen_free(e);
}

static void test_memory_pressure(const model_config *cfg) {
    ops_ctx ctx;
    gen_config gc = {.max_step_tokens = 24};
    make_ctx(&ctx, cfg, 24, &gc);
    model m;
    must(model_create(&m, cfg, &ctx, 24, 0), "model_create");
    model_init_random(&m, 11, 0.3f);
    enum { N = 12 };
    seq_copy tight[N], roomy[N], alone[N];
    gen_stats st;
    run_set(cfg, &m, 40, 8, -1, tight, &st); /* 16 pages per full-length sequence */
    run_set(cfg, &m, 400, 12, -1, roomy, NULL);
    for (int i = 0; i < N; i++) run_set(cfg, &m, 16, 1, i, alone, NULL);
    int finished = 0, same_roomy = 0, same_alone = 0;
    for (int i = 0; i < N; i++) {
        finished += tight[i].stop == GEN_STOP_BUDGET;
        same_roomy += tight[i].n == roomy[i].n && !memcmp(tight[i].tokens, roomy[i].tokens, (size_t)tight[i].n * 4);
        same_alone += alone[i].n == roomy[i].n && !memcmp(alone[i].tokens, roomy[i].tokens, (size_t)alone[i].n * 4);
    }
    printf("  memory pressure: 12 sequences, 40 pages: %d finished their budget; %ld steps, %ld preemptions, %ld "
           "recomputed tokens; same tokens as a roomy cache %d/12, as one at a time %d/12\n",
           finished, st.steps, st.preemptions, st.recomputed_tokens, same_roomy, same_alone);
    CHECK(finished == N, "only %d of %d sequences finished under memory pressure", finished, N);
    CHECK(st.preemptions > 0, "the tight cache never preempted: the test does not exercise pressure");
    CHECK(same_roomy == N && same_alone == N, "tokens depend on the batch or on preemption");
    model_free(&m);
    ops_ctx_free(&ctx);
}

/* ---- 5. stops and errors ---------------------------------------------------------- */

/* Prints text with control bytes escaped, for one-line reports. */
static void print_escaped(const char *label, const char *t) {
    printf("%s\"", label);
    for (; *t; t++) {
        if (*t == '\n') printf("\\n");
        else if ((unsigned char)*t < 0x20) printf("\\x%02x", (unsigned char)*t);
        else putchar(*t);
    }
    printf("\"");
}

typedef struct {
    tokenizer *tok;
    const char *stop;
    int calls;
} stop_strings;

/* The stop-string check an RL loop would pass: decode the turn, search. */
static int stop_on_string(void *user, const gen_seq *s) {
    stop_strings *ss = user;
    ss->calls++;
    char *text;
    size_t len;
    if (tokenizer_decode(ss->tok, s->tokens + s->turn_start, s->n_tokens - s->turn_start, 0, &text, &len)) return 0;
    int hit = strstr(text, ss->stop) != NULL;
    free(text);
    return hit;
}

static int stop_after_five(void *user, const gen_seq *s) { return s->n_tokens - s->turn_start >= 5; }

static void test_stops(const model_config *cfg) {
    gen_config gc = {.page_size = 8, .n_pages = 64, .max_batch = 4, .max_step_tokens = 64, .max_context = 100};
    rig rg;
    rig_open(&rg, cfg, &gc, 64, 13);
    gen_engine *e = rg.e;
    model *m = &rg.m;
    const int V = cfg->vocab_size;

    /* A reference greedy turn, then the same turn with its 6th token as a stop token. */
    gen_seq *r = new_prompt(e, 1, 7, V);
    gen_params p = {.temperature = 0.0f, .top_p = 1.0f, .max_new_tokens = 12};
    must(gen_run(e, &r, 1, &p), "gen_run");
    CHECK(r->stop == GEN_STOP_BUDGET && r->n_tokens - r->turn_start == 12, "budget stop: %s after %d tokens",
          gen_stop_name(r->stop), r->n_tokens - r->turn_start);
    int32_t stop_tok = r->tokens[r->turn_start + 5];
    int first = 0;
    while (r->tokens[r->turn_start + first] != stop_tok) first++;
    gen_seq *s = new_prompt(e, 1, 7, V);
    gen_params ps = p;
    int32_t stops[2] = {V - 1 == stop_tok ? 0 : V - 1, stop_tok};
    ps.stop_tokens = stops;
    ps.n_stop_tokens = 2;
    must(gen_run(e, &s, 1, &ps), "gen_run stop token");
    int n_new = s->n_tokens - s->turn_start;
    printf("  stop token %d: turn of %d tokens (%s), first occurrence at %d\n", stop_tok, n_new, gen_stop_name(s->stop),
           first + 1);
    CHECK(s->stop == GEN_STOP_TOKEN && n_new == first + 1 && s->tokens[s->n_tokens - 1] == stop_tok,
          "stop token: %s after %d tokens", gen_stop_name(s->stop), n_new);

    /* Stop check after five tokens. */
    gen_seq *c = new_prompt(e, 1, 7, V);
    gen_params pc = p;
    pc.stop_fn = stop_after_five;
    must(gen_run(e, &c, 1, &pc), "gen_run stop check");
    CHECK(c->stop == GEN_STOP_CHECK && c->n_tokens - c->turn_start == 5, "stop check: %s after %d tokens",
          gen_stop_name(c->stop), c->n_tokens - c->turn_start);

    /* Stop strings through the tokenizer: the decoded text of the reference
     * turn's tokens 3..4 is the stop string. */
    tokenizer *tk;
    must(tokenizer_load("tests/fixtures/tokenizers/bpe/tokenizer.json", &tk), "tokenizer");
    char *piece;
    must(tokenizer_decode(tk, r->tokens + r->turn_start + 3, 2, 0, &piece, NULL), "decode");
    stop_strings ss = {.tok = tk, .stop = piece};
    gen_seq *t = new_prompt(e, 1, 7, V);
    gen_params pt = p;
    pt.stop_fn = stop_on_string;
    pt.stop_user = &ss;
    must(gen_run(e, &t, 1, &pt), "gen_run stop string");
    char *text;
    must(tokenizer_decode(tk, t->tokens + t->turn_start, t->n_tokens - t->turn_start, 0, &text, NULL), "decode");
    int n_t = t->n_tokens - t->turn_start;
    print_escaped("  stop string ", piece);
    printf(": turn of %d tokens (%s), ", n_t, gen_stop_name(t->stop));
    print_escaped("text ", text);
    printf("\n");
    CHECK(t->stop == GEN_STOP_CHECK && n_t <= 5 && strstr(text, piece), "stop string: %s after %d tokens",
          gen_stop_name(t->stop), n_t);
    free(text), free(piece);
    tokenizer_free(tk);

    /* Context limit: the run's limit and the engine's. */
    gen_seq *x = new_prompt(e, 1, 7, V);
    gen_params px = p;
    px.max_context = 10;
    must(gen_run(e, &x, 1, &px), "gen_run context");
    CHECK(x->stop == GEN_STOP_CONTEXT && x->n_tokens == 10, "context stop: %s at %d tokens", gen_stop_name(x->stop),
          x->n_tokens);
    must(gen_run(e, &x, 1, &px), "gen_run at the limit");
    CHECK(x->stop == GEN_STOP_CONTEXT && x->n_tokens == 10, "a sequence at the limit must stop at once");
    gen_seq *y = new_prompt(e, 1, 95, V);
    gen_params py = p;
    py.max_new_tokens = 50;
    must(gen_run(e, &y, 1, &py), "gen_run engine context");
    CHECK(y->stop == GEN_STOP_CONTEXT && y->n_tokens == 100, "engine context stop: %s at %d tokens",
          gen_stop_name(y->stop), y->n_tokens);

    /* Bad arguments fail with a message and change nothing. */
    gen_seq *empty = gen_seq_new(e, 1);
    CHECK(gen_run(e, &empty, 1, &p) == DK_ERR_USAGE && strstr(dk_error(), "no tokens"), "empty sequence accepted");
    int32_t bad = V;
    CHECK(gen_seq_append(e, empty, &bad, 1) == DK_ERR_USAGE && strstr(dk_error(), "vocabulary"),
          "out-of-vocabulary token accepted");
    gen_params pb = p;
    pb.top_p = 0.0f;
    CHECK(gen_run(e, &r, 1, &pb) == DK_ERR_USAGE && strstr(dk_error(), "top_p"), "top_p 0 accepted");
    gen_seq *twice[2] = {r, r};
    CHECK(gen_run(e, twice, 2, &p) == DK_ERR_USAGE && strstr(dk_error(), "twice"), "duplicate sequence accepted");
    gen_engine *e2;
    gen_config small = {.page_size = 8, .n_pages = 3, .max_context = 100};
    CHECK(gen_create(&e2, m, &small) == DK_ERR_USAGE && strstr(dk_error(), "cannot hold"),
          "a cache smaller than one sequence was accepted");
    printf("  errors: %s\n", dk_error());
    rig_close(&rg);
}

int main(void) {
    test_hf("qwen3");
    test_hf("qwen2");
    test_hf("llama");
    test_logprobs(&qwen3_cfg, "qwen3");
    test_logprobs(&qwen2_cfg, "qwen2");
    test_graph_shapes(&qwen3_cfg);
    test_run_ahead(&qwen3_cfg);
    test_run_ahead(&qwen2_cfg);
    test_continuation(&qwen3_cfg, 0);
    test_continuation(&qwen2_cfg, 1);
    test_memory_pressure(&qwen3_cfg);
    test_stops(&qwen3_cfg);
    return test_finish("test_gen_engine");
}
