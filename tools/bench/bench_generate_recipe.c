/* bench_generate_recipe.c: the generation engine at the RL recipe's scale on
 * one GPU, random bf16 weights (Qwen3 shapes), beside bench_generate.c (the
 * 1.7B shape at 512 + 256 tokens, launch costs, per-op times):
 *
 * 1. the RL shape: 16 tasks x 16 samples, one 2k-token prompt per task, 1k
 *    new tokens each (temperature 1, no stop), all 256 decoded together; run
 *    with prefix sharing and without, and with sharing but the shared pages
 *    read once per sequence instead of once per group (gen_config.
 *    group_reads -1), and the ratios printed (the 1.7B shape unless
 *    --rl-model says 8b or 14b; give those a smaller --rl-gb);
 * 2. the same conversations with a second turn appended (512 tokens of
 *    feedback per sample, 1k new tokens);
 * 3. one sequence decoding at 32k context (a 32,256-token prompt, 256 new);
 * 4. the 8B and 14B shapes at batch 64 (prompt 512, 256 new tokens).
 *
 * Each prints tokens/s of the whole run (prefill and decode, as Hugging Face
 * generate is timed), the decode phase's share of the memory roofline, and
 * the prefill tokens sharing saved. The roofline: every decode step must
 * read all weights once and every live sequence's cached K/V (its whole
 * context), at the device's copy bandwidth, measured first (cudaMemcpy
 * device to device, read + write bytes; --bw overrides it). With grouped
 * reads a step reads each group's shared pages once, so it can beat that
 * roofline: the share of the unique bytes (shared pages counted once a
 * step) is printed beside it. --hf-tps and --hf-static-tps take the anchors that
 * tools/bench/bench_generate_hf.py prints for the same shape (its --batch
 * 256 --prompt 2048 --new 1024 for the RL shape) and print our ratio to both.
 *
 * Memory plan (one H200, 141 GB): the weights (3.4 / 16.4 / 29.5 GB for
 * 1.7B / 8B / 14B) are the engine's own bf16 copy, without gradients; the KV
 * budget is stated per case: 96 GB for the RL shape (837k tokens of the
 * 1.7B: all 256 conversations at 3k tokens unshared, 786k, fit; the second
 * turn without sharing does not, and preempts; on a card too small for it,
 * what the weights leave less 16 GB, said in the output), 8 GB for 32k context, 24 GB
 * for 8B and 14B at batch 64 (163k and 147k tokens against 49k needed).
 *
 * Usage: bench_generate_recipe [--bw BYTES_PER_S] [--hf-tps X] [--hf-static-tps X] [--rl-gb GB]
 *        [--rl-model 1.7b|8b|14b] [--quick] [--only rl|long|big] [--no-graphs]
 * (--quick: a quarter of the RL shape's tasks and a 8k context instead of 32k, for a smoke run) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "tools/bench/bench_bandwidth.h"
#include "tools/bench/bench_shapes.h"
#include "tools/bench/bench_weights.h"

static void must(dk_status s, const char *what) { bench_must("bench_generate_recipe", s, what); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* ---- the model: bf16 weights the engine reads, nothing for training ---------------- */

/* ---- measurements ---------------------------------------------------------------- */

static void random_tokens(int32_t *t, int n, int V) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(bench_next_u64(&rng) % (uint64_t)V);
}

/* One timed turn of a set of conversations: the prefill and first token
 * (max_new_tokens 1), then the remaining new - 1 tokens, timed apart. */
typedef struct {
    double prefill_s, decode_s, tps, roof_share, unique_share;
    long saved, prefilled, preemptions, steps;
} turn_result;

static turn_result timed_turn(gen_engine *e, bench_model *bm, gen_seq **s, int n, int new_tokens, double bw) {
    const gen_stats st0 = *gen_get_stats(e);
    gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 1};
    ops_sync(bm->m.ctx);
    const double t0 = dk_now();
    must(gen_run(e, s, n, &p), "prefill");
    const double t1 = dk_now();
    /* Decode roofline: step k (1 .. new-1) reads the weights and every
     * sequence's K/V of its context at that step. */
    double ctx_sum = 0.0;
    for (int i = 0; i < n; i++) ctx_sum += s[i]->n_tokens;
    double bytes = 0.0;
    for (int k = 0; k < new_tokens - 1; k++) bytes += bm->weight_bytes + (ctx_sum + (double)n * k) * bm->kv_token_bytes;
    p.max_new_tokens = new_tokens - 1;
    const long skipped0 = gen_get_stats(e)->group_skipped;
    must(gen_run(e, s, n, &p), "decode");
    const double t2 = dk_now();
    const gen_stats *st = gen_get_stats(e);
    /* Grouped reads (gen_config.group_reads) read a group's shared pages
     * once: the bytes a step must read are then fewer. */
    const double unique = bytes - (double)(st->group_skipped - skipped0) * bm->kv_token_bytes;
    turn_result r = {
        .prefill_s = t1 - t0, .decode_s = t2 - t1, .tps = (double)n * new_tokens / (t2 - t0),
        .roof_share = bytes / bw / (t2 - t1), .unique_share = unique / bw / (t2 - t1),
        .saved = st->shared_tokens - st0.shared_tokens,
        .prefilled = st->prefill_tokens - st0.prefill_tokens, .preemptions = st->preemptions - st0.preemptions,
        .steps = st->steps - st0.steps,
    };
    return r;
}

static void print_turn(const char *label, const turn_result *r, int n, int new_tokens) {
    printf("  %-34s %8.0f tokens/s | prefill %.2f s, decode %.2f s (%.2f ms/step of %d) | decode %.0f%% of roofline",
           label, r->tps, r->prefill_s, r->decode_s, r->decode_s / (new_tokens - 1) * 1e3, n, 100.0 * r->roof_share);
    if (r->unique_share < r->roof_share) printf(" (%.0f%% of the unique bytes)", 100.0 * r->unique_share);
    printf(" | prefilled %ld, saved %ld | %ld preemptions, %ld steps\n", r->prefilled, r->saved, r->preemptions,
           r->steps);
}

/* A short run at the case's batch: plans, graphs and the allocator warm. */
static void warm_up(gen_engine *e, int n, int len, int V) {
    gen_seq **w = dk_calloc((size_t)n, sizeof *w);
    int32_t *t = dk_malloc((size_t)len * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        w[i] = gen_seq_new(e, 9000 + (uint64_t)i);
        random_tokens(t, len, V);
        must(gen_seq_append(e, w[i], t, len), "append");
    }
    gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 8};
    must(gen_run(e, w, n, &p), "warm-up");
    for (int i = 0; i < n; i++) gen_seq_free(e, w[i]);
    free(w), free(t);
}

/* ---- 1 and 2: the RL shape ----------------------------------------------------------- */

typedef struct {
    turn_result turn[2];
} rl_result;

static rl_result rl_case(bench_model *bm, int tasks, int samples, size_t kv_bytes, int sharing, int grouped,
                         int graphs, double bw) {
    enum { PROMPT = 2048, NEW = 1024, FEEDBACK = 512 };
    const int n = tasks * samples, V = bm->m.cfg.vocab_size;
    gen_config gc = {.page_size = 16, .cache_bytes = kv_bytes, .max_batch = n, .max_step_tokens = 8192,
                     .max_context = 2 * (PROMPT + NEW), .cuda_graphs = graphs, .prefix_sharing = sharing,
                     .group_reads = grouped};
    gen_engine *e;
    must(gen_create(&e, &bm->m, &gc), "gen_create");
    warm_up(e, n, 64, V);
    /* The same prompts and feedback with sharing on and off. */
    uint64_t saved_rng = rng;
    rng = 12345;
    gen_seq **s = dk_calloc((size_t)n, sizeof *s);
    int32_t *t = dk_malloc((size_t)PROMPT * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        if (i % samples == 0) random_tokens(t, PROMPT, V);
        s[i] = gen_seq_new(e, 100 + (uint64_t)i);
        must(gen_seq_append(e, s[i], t, PROMPT), "append prompt");
    }
    rl_result r;
    r.turn[0] = timed_turn(e, bm, s, n, NEW, bw);
    for (int i = 0; i < n; i++) {
        random_tokens(t, FEEDBACK, V);
        must(gen_seq_append(e, s[i], t, FEEDBACK), "append feedback");
    }
    r.turn[1] = timed_turn(e, bm, s, n, NEW, bw);
    rng = saved_rng;
    must(gen_check_pages(e), "page bookkeeping");
    for (int i = 0; i < n; i++) gen_seq_free(e, s[i]);
    free(s), free(t);
    gen_free(e);
    return r;
}

static void bench_rl(bench_model *bm, int tasks, size_t kv_bytes, int graphs, double bw, double hf, double hf_static) {
    enum { SAMPLES = 16 };
    printf("\n[RL shape: %d tasks x %d samples, 2048-token prompts, 1024 new tokens; then a second turn: 512 tokens "
           "of feedback, 1024 new; KV budget %.0f GB, %zu tokens]\n",
           tasks, SAMPLES, kv_bytes / 1e9, (size_t)(kv_bytes / bm->kv_token_bytes));
    const rl_result on = rl_case(bm, tasks, SAMPLES, kv_bytes, 1, 1, graphs, bw);
    const rl_result flat = rl_case(bm, tasks, SAMPLES, kv_bytes, 1, -1, graphs, bw);
    const rl_result off = rl_case(bm, tasks, SAMPLES, kv_bytes, -1, -1, graphs, bw);
    const int n = tasks * SAMPLES;
    print_turn("turn 1, sharing on", &on.turn[0], n, 1024);
    print_turn("turn 1, sharing on, reads per seq", &flat.turn[0], n, 1024);
    print_turn("turn 1, sharing off", &off.turn[0], n, 1024);
    print_turn("turn 2, sharing on", &on.turn[1], n, 1024);
    print_turn("turn 2, sharing on, reads per seq", &flat.turn[1], n, 1024);
    print_turn("turn 2, sharing off", &off.turn[1], n, 1024);
    printf("  grouped reads / reads per sequence (tokens/s, both with sharing): turn 1 %.2fx, turn 2 %.2fx\n",
           on.turn[0].tps / flat.turn[0].tps, on.turn[1].tps / flat.turn[1].tps);
    /* Both runs sample the same number of tokens: the tokens/s ratio of the
     * two turns together is the inverse ratio of their times. */
    const double t_on = on.turn[0].prefill_s + on.turn[0].decode_s + on.turn[1].prefill_s + on.turn[1].decode_s;
    const double t_off = off.turn[0].prefill_s + off.turn[0].decode_s + off.turn[1].prefill_s + off.turn[1].decode_s;
    printf("  with / without sharing (tokens/s): turn 1 %.2fx, turn 2 %.2fx, both turns %.2fx\n",
           on.turn[0].tps / off.turn[0].tps, on.turn[1].tps / off.turn[1].tps, t_off / t_on);
    if (hf > 0.0)
        printf("  turn 1 with sharing = %.2fx HF generate (%.0f tokens/s, --hf-tps)\n", on.turn[0].tps / hf, hf);
    if (hf_static > 0.0)
        printf("  turn 1 with sharing = %.2fx HF static cache + torch.compile (%.0f tokens/s, --hf-static-tps)\n",
               on.turn[0].tps / hf_static, hf_static);
}

/* ---- 3: one sequence at 32k context --------------------------------------------------- */

static void bench_long(bench_model *bm, int context, int graphs, double bw) {
    const int NEW = 256, PROMPT = context - NEW;
    const size_t kv_bytes = (size_t)8e9;
    gen_config gc = {.page_size = 16, .cache_bytes = kv_bytes, .max_batch = 4, .max_step_tokens = 8192,
                     .max_context = context, .cuda_graphs = graphs};
    gen_engine *e;
    must(gen_create(&e, &bm->m, &gc), "gen_create");
    warm_up(e, 1, 64, bm->m.cfg.vocab_size);
    gen_seq *s = gen_seq_new(e, 7);
    int32_t *t = dk_malloc((size_t)PROMPT * sizeof(int32_t));
    random_tokens(t, PROMPT, bm->m.cfg.vocab_size);
    must(gen_seq_append(e, s, t, PROMPT), "append");
    const turn_result r = timed_turn(e, bm, &s, 1, NEW, bw);
    const double per = r.decode_s / (NEW - 1);
    const double roof = (bm->weight_bytes + (PROMPT + NEW / 2.0) * bm->kv_token_bytes) / bw;
    printf("\n[one sequence at %d context: prompt %d, %d new tokens; KV budget %.1f GB]\n", context, PROMPT, NEW,
           kv_bytes / 1e9);
    printf("  prefill %.2f s (%.0f tokens/s, chunks of 8192); decode %.3f ms/token against a roofline of %.3f ms "
           "(weights %.2f GB + KV %.2f GB): %.2fx the roofline, %.0f%% of it\n",
           r.prefill_s, PROMPT / r.prefill_s, per * 1e3, roof * 1e3, bm->weight_bytes / 1e9,
           (PROMPT + NEW / 2.0) * bm->kv_token_bytes / 1e9, per / roof, 100.0 * roof / per);
    gen_seq_free(e, s);
    free(t);
    gen_free(e);
}

/* ---- 4: batch 64 on the big shapes ------------------------------------------------------ */

static void bench_batch64(bench_model *bm, const char *name, int graphs, double bw) {
    enum { B = 64, PROMPT = 512, NEW = 256 };
    const size_t kv_bytes = (size_t)24e9;
    gen_config gc = {.page_size = 16, .cache_bytes = kv_bytes, .max_batch = B, .max_step_tokens = 8192,
                     .max_context = 2048, .cuda_graphs = graphs};
    gen_engine *e;
    must(gen_create(&e, &bm->m, &gc), "gen_create");
    warm_up(e, B, PROMPT, bm->m.cfg.vocab_size);
    gen_seq *s[B];
    int32_t t[PROMPT];
    for (int i = 0; i < B; i++) {
        s[i] = gen_seq_new(e, 100 + (uint64_t)i);
        random_tokens(t, PROMPT, bm->m.cfg.vocab_size);
        must(gen_seq_append(e, s[i], t, PROMPT), "append");
    }
    const turn_result r = timed_turn(e, bm, s, B, NEW, bw);
    printf("\n[%s shape, batch 64, prompt 512, 256 new tokens; %.1f GB of bf16 weights, KV budget %.0f GB]\n", name,
           bm->weight_bytes / 1e9, kv_bytes / 1e9);
    print_turn("batch 64", &r, B, NEW);
    for (int i = 0; i < B; i++) gen_seq_free(e, s[i]);
    gen_free(e);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    double bw = 0.0, hf = 0.0, hf_static = 0.0, rl_gb = 0.0; /* 0: the plan's 96 GB, fitted below */
    int quick = 0, graphs = 1;
    const char *only = NULL, *rl_model = "1.7b";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bw") && i + 1 < argc) bw = atof(argv[++i]);
        else if (!strcmp(argv[i], "--hf-tps") && i + 1 < argc) hf = atof(argv[++i]);
        else if (!strcmp(argv[i], "--hf-static-tps") && i + 1 < argc) hf_static = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rl-gb") && i + 1 < argc) {
            rl_gb = atof(argv[++i]);
            if (!(rl_gb > 0.0)) {
                fprintf(stderr, "bench_generate_recipe: --rl-gb %s: expected a positive number of GB\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--rl-model") && i + 1 < argc) rl_model = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-graphs")) graphs = 0;
        else {
            fprintf(stderr, "usage: bench_generate_recipe [--bw BYTES_PER_S] [--hf-tps X] [--hf-static-tps X] "
                            "[--rl-gb GB] [--rl-model 1.7b|8b|14b] [--quick] [--only rl|long|big] [--no-graphs]\n");
            return 2;
        }
    }
    if (only && strcmp(only, "rl") && strcmp(only, "long") && strcmp(only, "big")) {
        fprintf(stderr, "bench_generate_recipe: --only %s: expected rl, long or big\n", only);
        return 2;
    }
    const model_config *rl_cfg = bench_shape_named(rl_model);
    if (!rl_cfg) {
        fprintf(stderr, "bench_generate_recipe: --rl-model %s: expected 1.7b, 8b or 14b\n", rl_model);
        return 2;
    }
    if (bw < 0.0 || hf < 0.0 || hf_static < 0.0) {
        fprintf(stderr, "bench_generate_recipe: --bw, --hf-tps and --hf-static-tps must be positive\n");
        return 2;
    }
    if (device_count() == 0 || !ops_cuda_available()) {
        fprintf(stderr, "bench_generate_recipe: needs a CUDA GPU and a build with the CUDA op table\n");
        return 1;
    }
    char desc[256];
    device_describe(0, desc, sizeof desc);
    printf("device: %s\n", desc);
    ops_ctx ctx;
    must(ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, (size_t)256 << 20), "ctx");
    bw = bench_roofline_bandwidth(&ctx, bw);

    if (!only || strcmp(only, "big")) {
        bench_model bm;
        if (!only || !strcmp(only, "rl")) {
            bench_model_open(&bm, rl_cfg, &ctx, "bench_generate_recipe");
            printf("model: Qwen3-%s shape, %.2f GB of bf16 weights\n", rl_model, bm.weight_bytes / 1e9);
            if (rl_gb == 0.0) {
                /* The plan's 96 GB is for a 141 GB H200; on a smaller card keep
                 * what the weights leave (they are allocated: free memory is
                 * net of them), less 16 GB for activations and the allocator,
                 * so the case still runs (with more preemption). */
                const double fit = device_free_bytes(0) / 1e9 - 16.0;
                rl_gb = fit < 96.0 ? fit : 96.0;
                if (rl_gb < 96.0) printf("KV budget fitted to this card: %.0f GB (the plan's 96 GB does not fit)\n", rl_gb);
                if (!(rl_gb > 1.0)) {
                    fprintf(stderr, "bench_generate_recipe: too little device memory for the RL shape's KV cache\n");
                    return 1;
                }
            }
            bench_rl(&bm, quick ? 4 : 16, (size_t)(rl_gb * 1e9), graphs, bw, hf, hf_static);
            bench_model_close(&bm);
        }
        if (!only || !strcmp(only, "long")) {
            bench_model_open(&bm, &qwen3_1_7b, &ctx, "bench_generate_recipe");
            printf("model: Qwen3-1.7B shape, %.2f GB of bf16 weights\n", bm.weight_bytes / 1e9);
            bench_long(&bm, quick ? 8192 : 32768, graphs, bw);
            bench_model_close(&bm);
        }
    }
    if (!only || !strcmp(only, "big")) {
        static const model_config *const big[2] = {&qwen3_8b, &qwen3_14b};
        static const char *const names[2] = {"Qwen3-8B", "Qwen3-14B"};
        for (int i = 0; i < 2; i++) {
            bench_model bm;
            bench_model_open(&bm, big[i], &ctx, "bench_generate_recipe");
            bench_batch64(&bm, names[i], graphs, bw);
            bench_model_close(&bm);
        }
    }
    ops_ctx_free(&ctx);
    return 0;
}
