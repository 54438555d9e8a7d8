/* bench_generate.c: the generation engine on a Qwen3-1.7B-shaped model with
 * random bf16 weights (hidden 2048, 28 layers, 16 heads, 8 KV heads, head
 * dim 128, intermediate 6144, vocabulary 151936, tied embeddings), on one GPU:
 *
 * 1. batch 64, prompt 512, 256 new tokens (temperature 1, no stop): tokens/s
 *    of the whole generate (prefill + decode, what Hugging Face generate is
 *    timed on), given --hf-tps its ratio to HF generate (what
 *    tools/bench/bench_generate_hf.py printed on the same machine;
 *    tools/gpu-check.sh runs it and passes its figures) and, given
 *    --hf-static-tps, to the static-cache torch.compile'd generate it times
 *    (the stronger anchor: plain generate is bound by its host loop at
 *    batch 64 and swings between runs), and the decode phase against
 *    the memory roofline: every step must read all weights (3.44 GB) and every
 *    live sequence's cached K/V, at the copy bandwidth measured first
 *    (bench_bandwidth.h; --bw sets another).
 * 2. batch 1, 1k-token context: per-token latency against the same roofline.
 * Each of the two runs BENCH_RUNS times (the same lengths, prompts of
 * their own); its figures are the medians, printed with their spread
 * (min-max).
 * 3. the launch question: for one decode step at batch 1 and 64, the host
 *    time to queue the step's kernels, the time of the step when the host
 *    waits for it, and the per-step time when 20 steps are queued back to
 *    back. If queueing takes as long as the step, launch overhead dominates.
 *    Then each op of the step timed alone (50 calls back to back), with its
 *    calls per step and effective bandwidth: where the step's time goes.
 * 4. a 3-turn conversation batch (32 conversations: 512-token prompt, turns
 *    of 128 tokens, 128-token feedback appended after each): the time to
 *    prefill an appended turn against re-prefilling the whole history (on
 *    an engine without prefix sharing, which would otherwise hand the
 *    re-prefill the pages the conversations hold).
 *
 * Decode steps replay captured CUDA graphs (gen_config.cuda_graphs), as the
 * trainer's rollouts do by default; --no-graphs launches every kernel. The
 * launch probe and op table launch their kernels either way. The decode
 * kernels that support it start as programmatic dependent launches
 * (cuda_common.cuh), and sections 1 and 2 then run again on a fresh engine
 * with ordinary launches, so one run shows what that gains; --no-pdl uses
 * ordinary launches throughout. They run once more with every step waited
 * for before the next is queued (gen_config.sync_steps), against the
 * engine's default of queueing a decode step while the one before runs.
 *
 * 5. the decode step's critical path at batch 1: the layers' kernels replayed
 *    as one graph with each op left out in turn (what it adds to the step
 *    once kernels overlap), and with the attention kernel's plans pinned.
 *
 * The recipe's shapes (the RL batch with prefix sharing, 32k context, 8B and
 * 14B) are tools/bench/bench_generate_recipe.c.
 *
 * --skinny-use N runs everything with ops_tuning.skinny_use = N (ops.h):
 * 2 puts the 9..64-row products on the wgmma kernel, to weigh it against
 * the default on the whole generate; --swiglu-fuse -1 likewise runs the
 * decode MLP's gate|up and SwiGLU as two ops.
 *
 * Usage: bench_generate [--hf-tps X] [--hf-static-tps X] [--bw BYTES_PER_S] [--quick] [--no-graphs] [--no-pdl]
 *        [--skinny-use -1|0|1|2] [--swiglu-fuse 0|-1] [--chain] [--ops 1.7b|8b|14b BATCH CONTEXT]
 * (--chain: section 5 alone; --ops: one decode step of that model shape at
 * that batch and context, alone: its time (above 8 rows also with other
 * product kernels, and with ops_tuning.pdl_rows 8), the per-op table of section 3
 * and the left-out chain of section 5, for the recipe's shapes; with
 * --table-only the op table alone, a short run for a profiler) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/gen_forward.h"
#include "model/generate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tools/bench/bench_bandwidth.h"
#include "tools/bench/bench_shapes.h"
#include "tools/bench/bench_weights.h"
#include "tools/bench/bench_stats.h"


static void must(dk_status s, const char *what) { bench_must("bench_generate", s, what); }

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) { return bench_next_u64(&rng); }

static double weight_bytes(const model *m) {
    const param_layout *pl = &m->layout;
    return 2.0 * ((double)pl->embed_size + (double)m->cfg.n_layers * pl->layer_size + pl->final_norm_size +
                  pl->lm_head_size);
}

/* Bytes of K and V one cached token holds over all layers (bf16). */
static double kv_token_bytes(const model_config *c) { return 2.0 * 2.0 * c->n_layers * c->n_kv_heads * c->head_dim; }

static gen_seq *random_seq(gen_engine *e, uint64_t seed, int len, int V) {
    gen_seq *s = gen_seq_new(e, seed);
    int32_t *t = dk_malloc((size_t)len * sizeof(int32_t));
    for (int i = 0; i < len; i++) t[i] = (int32_t)(next_u64() % (uint64_t)V);
    must(gen_seq_append(e, s, t, len), "append");
    free(t);
    return s;
}

/* ---- 3. launch overhead of one decode step --------------------------------------- */

/* One decode step at batch B over contexts of ctx_len tokens, set up for
 * gen_forward_run: its cache, buffers and step description. */
typedef struct {
    kv_cache kv;
    gen_forward f;
    gen_step st;
    int32_t *d_i, *d_out;
    sample_params *d_p;
} decode_step;

static void decode_step_init(decode_step *d, model *m, int B, int ctx_len) {
    const int P = 16, pages_per = (ctx_len + 1 + P - 1) / P;
    must(kv_cache_create(&d->kv, m->ctx, &m->cfg, P, B * pages_per), "kv cache");
    gen_forward_init(&d->f, m, &d->kv, B, B);
    int32_t *tok = dk_malloc((size_t)B * 4), *pos = dk_malloc((size_t)B * 4), *slot = dk_malloc((size_t)B * 4);
    int32_t *cu = dk_malloc((size_t)(B + 1) * 4), *lens = dk_malloc((size_t)B * 4), *rows = dk_malloc((size_t)B * 4);
    int32_t *bt = dk_malloc((size_t)B * pages_per * 4);
    sample_params *prm = dk_calloc((size_t)B, sizeof(sample_params));
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        tok[b] = (int32_t)(next_u64() % (uint64_t)m->cfg.vocab_size);
        pos[b] = ctx_len;
        for (int p = 0; p < pages_per; p++) bt[b * pages_per + p] = b * pages_per + p;
        slot[b] = bt[b * pages_per + ctx_len / P] * P + ctx_len % P;
        cu[b + 1] = b + 1;
        lens[b] = ctx_len + 1;
        rows[b] = b;
        prm[b] = (sample_params){.temperature = 1.0f, .top_p = 1.0f, .seed = 1, .counter = (uint64_t)b};
    }
    gen_step st = {.T = B, .n_seqs = B, .n_rows = B, .max_pages = pages_per, .fresh = 0, .gather = 0, .sample = 1};
    /* A decode step of several tokens regroups the fused q|k|v output. */
    const int G = m->cfg.n_heads / m->cfg.n_kv_heads;
    int32_t *qkv_rows = dk_malloc((size_t)B * (G + 2) * 4);
    const int n_qkv = gen_forward_qkv_rows(&m->cfg, B, qkv_rows);
    d->d_i = ops_alloc(m->ctx, (size_t)(6 * B + 1 + B * pages_per + n_qkv) * 4);
    d->d_p = ops_alloc(m->ctx, (size_t)B * sizeof(sample_params));
    int32_t *w = d->d_i;
    ops_upload(m->ctx, w, tok, (size_t)B * 4), st.tokens = w, w += B;
    ops_upload(m->ctx, w, pos, (size_t)B * 4), st.pos = w, w += B;
    ops_upload(m->ctx, w, slot, (size_t)B * 4), st.slots = w, w += B;
    ops_upload(m->ctx, w, cu, (size_t)(B + 1) * 4), st.cu_q = w, w += B + 1;
    ops_upload(m->ctx, w, lens, (size_t)B * 4), st.ctx_lens = w, w += B;
    ops_upload(m->ctx, w, rows, (size_t)B * 4), st.rows = w, w += B;
    ops_upload(m->ctx, w, bt, (size_t)B * pages_per * 4), st.block_table = w, w += B * pages_per;
    if (n_qkv > 0) ops_upload(m->ctx, w, qkv_rows, (size_t)n_qkv * 4), st.qkv_rows = w;
    ops_upload(m->ctx, d->d_p, prm, (size_t)B * sizeof(sample_params));
    st.params = d->d_p;
    d->d_out = ops_alloc(m->ctx, (size_t)2 * B * 4);
    st.out_tokens = d->d_out;
    st.out_logprobs = (float *)(d->d_out + B);
    d->st = st;
    ops_sync(m->ctx);
    free(tok), free(pos), free(slot), free(cu), free(lens), free(rows), free(bt), free(prm), free(qkv_rows);
}

static void decode_step_free(decode_step *d, model *m) {
    ops_free(m->ctx, d->d_i), ops_free(m->ctx, d->d_p), ops_free(m->ctx, d->d_out);
    gen_forward_free(&d->f);
    kv_cache_free(&d->kv);
}

static void launch_probe(model *m, int B, int ctx_len, double *enqueue_ms, double *serial_ms, double *pipelined_ms) {
    decode_step d;
    decode_step_init(&d, m, B, ctx_len);
    for (int i = 0; i < 3; i++) gen_forward_run(&d.f, &d.st);
    ops_sync(m->ctx);
    const int N = 20;
    double enq = 0.0, ser = 0.0;
    for (int i = 0; i < N; i++) {
        double t0 = dk_now();
        gen_forward_run(&d.f, &d.st);
        double t1 = dk_now();
        ops_sync(m->ctx);
        double t2 = dk_now();
        enq += t1 - t0, ser += t2 - t0;
    }
    double t0 = dk_now();
    for (int i = 0; i < N; i++) gen_forward_run(&d.f, &d.st);
    ops_sync(m->ctx);
    *pipelined_ms = (dk_now() - t0) / N * 1e3;
    *enqueue_ms = enq / N * 1e3;
    *serial_ms = ser / N * 1e3;
    decode_step_free(&d, m);
}

/* ---- per-op times of one decode step ----------------------------------------------- */

/* Each op of a decode step at batch B (context ctx_len) run 50 times back to
 * back: the time per call, its count per step and the bytes it must move.
 * A kernel shorter than a launch shows the launch rate instead. */
static void op_table(model *m, int B, int ctx_len, double measured_ms) {
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    const int C = c->hidden_size, I = c->intermediate_size, D = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    const int Q = Hq * D, KV = Hkv * D, V = c->vocab_size, L = c->n_layers;
    const int P = 16, pages_per = (ctx_len + P - 1) / P;
    const void *head = m->params.lm_head ? m->params.lm_head : m->params.embed; /* tied or not */
    kv_cache kv;
    must(kv_cache_create(&kv, ctx, c, P, B * pages_per), "kv cache");
    const size_t A = 2;
    void *x = ops_alloc(ctx, (size_t)B * C * A), *ln = ops_alloc(ctx, (size_t)B * C * A);
    void *fused = ops_alloc(ctx, (size_t)B * (Q + 2 * KV) * A), *qkv = ops_alloc(ctx, (size_t)B * (Q + 2 * KV) * A);
    void *qk = ops_alloc(ctx, (size_t)B * (Q + KV) * A), *att = ops_alloc(ctx, (size_t)B * Q * A);
    void *gu = ops_alloc(ctx, (size_t)B * 2 * I * A), *h = ops_alloc(ctx, (size_t)B * I * A);
    float *rstd = ops_alloc(ctx, (size_t)B * Hq * 4), *logits = ops_alloc(ctx, (size_t)B * V * 4);
    const size_t ni = (size_t)(7 * B + 1 + B * pages_per);
    int32_t *hi = dk_malloc(ni * 4);
    int32_t *pos = hi, *slot = pos + B, *cu = slot + B, *lens = cu + B + 1, *tok = lens + B;
    int32_t *out = tok + B, *bt = out + 2 * B;
    cu[0] = 0;
    for (int b = 0; b < B; b++) {
        pos[b] = ctx_len - 1, lens[b] = ctx_len, cu[b + 1] = b + 1, tok[b] = b;
        for (int p = 0; p < pages_per; p++) bt[b * pages_per + p] = b * pages_per + p;
        slot[b] = bt[b * pages_per + (ctx_len - 1) / P] * P + (ctx_len - 1) % P;
    }
    int32_t *di = ops_alloc(ctx, ni * 4);
    ops_upload(ctx, di, hi, ni * 4);
    int32_t *d_pos = di + (pos - hi), *d_slot = di + (slot - hi), *d_cu = di + (cu - hi);
    int32_t *d_lens = di + (lens - hi), *d_tok = di + (tok - hi), *d_out = di + (out - hi), *d_bt = di + (bt - hi);
    sample_params *prm = dk_calloc((size_t)B, sizeof(sample_params));
    for (int b = 0; b < B; b++) prm[b] = (sample_params){.temperature = 1.0f, .top_p = 1.0f, .seed = 3, .counter = 1};
    sample_params *d_prm = ops_alloc(ctx, (size_t)B * sizeof(sample_params));
    ops_upload(ctx, d_prm, prm, (size_t)B * sizeof(sample_params));
    ops_sync(ctx);
#define WL(t) param_layer_ptr(&m->params, &m->layout, 0, t)
    const int N = 50;
    double total = 0.0;
    printf("  %-30s %9s %6s %9s %10s\n", "op (batch, shape)", "us/call", "calls", "ms/step", "GB/s");
#define TIME(name, calls, bytes, stmt)                                                                     \
    do {                                                                                                   \
        stmt;                                                                                              \
        ops_sync(ctx);                                                                                     \
        double t0_ = dk_now();                                                                             \
        for (int it_ = 0; it_ < N; it_++) stmt;                                                            \
        ops_sync(ctx);                                                                                     \
        double us_ = (dk_now() - t0_) / N * 1e6;                                                           \
        total += us_ * (calls) / 1e3;                                                                      \
        printf("  %-30s %9.1f %6d %9.3f %10.0f\n", name, us_, (int)(calls), us_ * (calls) / 1e3,          \
               (double)(bytes) / us_ / 1e3);                                                               \
    } while (0)
    const double wqkv = 2.0 * (Q + 2.0 * KV) * C;
    TIME("embedding", 1, 2.0 * B * C, ops_embedding_forward(ctx, x, d_tok, m->params.embed, B, C));
    /* The step's norms ride on the products after them: q|k|v, gate|up and
     * the lm head (the rows in parentheses time the parts alone). */
    TIME("(rmsnorm [B, C] alone)", 0, 4.0 * B * C, ops_rmsnorm_forward(ctx, ln, rstd, x, WL(P_ATTN_NORM), B, C, 1e-6f));
    TIME("rmsnorm + matmul q|k|v", L, wqkv,
         ops_rmsnorm_matmul(ctx, fused, 0, ln, x, WL(P_ATTN_NORM), WL(P_WQ), B, Q + 2 * KV, C, 1e-6f, 1.0f, 0.0f));
    TIME("(matmul q|k|v alone)", 0, wqkv, ops_matmul(ctx, fused, 0, ln, WL(P_WQ), B, Q + 2 * KV, C, 0, 1, 1.0f, 0.0f));
    if (B > 1) {
        TIME("(matmul q alone)", 0, 2.0 * Q * C, ops_matmul(ctx, qkv, 0, ln, WL(P_WQ), B, Q, C, 0, 1, 1.0f, 0.0f));
        TIME("(matmul k alone)", 0, 2.0 * KV * C, ops_matmul(ctx, qkv, 0, ln, WL(P_WK), B, KV, C, 0, 1, 1.0f, 0.0f));
    }
    TIME("qkv_to_cache (norm, rope, kv)", L, 2.0 * B * (2 * Q + 4 * KV),
         ops_qkv_to_cache(ctx, qk, kv.k[0], kv.v[0], fused, WL(P_Q_NORM), WL(P_K_NORM), d_pos, d_slot, B, Hq, Hkv, D,
                          1e-6f, 1e6f));
    /* The step's attention call, timed under each pinned choice below. */
#define PAGED_ATTENTION()                                                                                     \
    ops_paged_attention(ctx, att, qk, kv.k[0], kv.v[0], d_bt, pages_per, d_lens, d_cu, B, B, Hq, Hkv, D, P, \
                        0.0883883f, NULL)
    TIME("paged_attention", L, 4.0 * B * ctx_len * KV, PAGED_ATTENTION());
    if (B > 8) { /* the warp kernel's CTA widths, pinned (the op above plans its own) */
        static const int widths[] = {4, 8, 16};
        for (int i = 0; i < 3; i++) {
            char name[40];
            snprintf(name, sizeof name, "(paged_attention, %d warps)", widths[i]);
            ctx->tuning.decode_warps = widths[i];
            TIME(name, 0, 4.0 * B * ctx_len * KV, PAGED_ATTENTION());
        }
        ctx->tuning.decode_warps = 0;
    }
    /* The warp kernel's ways of loading rows (paged_decode.cuh; the op
     * chooses per call): direct, next rows in registers, a shared ring. */
    static const int load_modes[] = {-1, 1, 2};
    static const char *const load_names[] = {"(paged_attention, direct loads)", "(paged_attention, next in regs)",
                                             "(paged_attention, shared ring)"};
    for (int i = 0; i < 3; i++) {
        ctx->tuning.decode_prefetch = load_modes[i];
        TIME(load_names[i], 0, 4.0 * B * ctx_len * KV, PAGED_ATTENTION());
    }
    ctx->tuning.decode_prefetch = 0;
    /* Its splits merged in a cluster or by a second kernel (the op
     * chooses). */
    for (int mg = 1; mg <= 2; mg++) {
        ctx->tuning.decode_merge = mg;
        TIME(mg == 1 ? "(paged_attention, cluster merge)" : "(paged_attention, merge kernel)", 0,
             4.0 * B * ctx_len * KV, PAGED_ATTENTION());
    }
    ctx->tuning.decode_merge = 0;
    /* The tensor-core kernel the op picks for continuation prefills, on the
     * same decode step, for comparison with the warp kernel chosen above. */
    ctx->tuning.paged_kernel = OPS_PAGED_MMA;
    TIME("(paged_attention, mma kernel)", 0, 4.0 * B * ctx_len * KV, PAGED_ATTENTION());
    ctx->tuning.paged_kernel = OPS_PAGED_AUTO;
    TIME("matmul o (+residual)", L, 2.0 * C * Q, ops_matmul(ctx, x, 0, att, WL(P_WO), B, C, Q, 0, 1, 1.0f, 1.0f));
    TIME("rmsnorm + gate|up + swiglu", L, 4.0 * I * C,
         ops_rmsnorm_matmul_swiglu(ctx, h, gu, ln, x, WL(P_MLP_NORM), WL(P_W_GATE_UP), B, I, C, 1e-6f));
    TIME("(matmul gate|up alone)", 0, 4.0 * I * C,
         ops_matmul(ctx, gu, 0, ln, WL(P_W_GATE_UP), B, 2 * I, C, 0, 1, 1.0f, 0.0f));
    TIME("(swiglu alone)", 0, 6.0 * B * I, ops_swiglu_forward(ctx, h, gu, B, I));
    TIME("matmul down (+residual)", L, 2.0 * C * I,
         ops_matmul(ctx, x, 0, h, WL(P_W_DOWN), B, C, I, 0, 1, 1.0f, 1.0f));
    if (B > 8) { /* the skinny kernel (matmul_skinny.cu) against cuBLASLt on each product */
        static const int splits[] = {1, 2, 4, 8};
        for (int i = 0; i < 4; i++) {
            char name[40];
            snprintf(name, sizeof name, "(matmul down, %d splits)", splits[i]);
            ctx->tuning.skinny_splits = splits[i];
            TIME(name, 0, 2.0 * C * I, ops_matmul(ctx, x, 0, h, WL(P_W_DOWN), B, C, I, 0, 1, 1.0f, 1.0f));
        }
        ctx->tuning.skinny_splits = 0;
        const int keep = ctx->tuning.skinny_use;
        for (int use = -1; use <= 2; use++) {
            if (use == 0) continue;
            ctx->tuning.skinny_use = use;
            const char *k = use == 2 ? "wgmma" : use == 1 ? "skinny" : "cuBLASLt";
            char name[4][48];
            snprintf(name[0], 48, "(q|k|v, %s)", k), snprintf(name[1], 48, "(o, %s)", k);
            snprintf(name[2], 48, "(gate|up, %s)", k), snprintf(name[3], 48, "(down, %s)", k);
            TIME(name[0], 0, wqkv, ops_matmul(ctx, fused, 0, ln, WL(P_WQ), B, Q + 2 * KV, C, 0, 1, 1.0f, 0.0f));
            TIME(name[1], 0, 2.0 * C * Q, ops_matmul(ctx, x, 0, att, WL(P_WO), B, C, Q, 0, 1, 1.0f, 1.0f));
            TIME(name[2], 0, 4.0 * I * C, ops_matmul(ctx, gu, 0, ln, WL(P_W_GATE_UP), B, 2 * I, C, 0, 1, 1.0f, 0.0f));
            TIME(name[3], 0, 2.0 * C * I, ops_matmul(ctx, x, 0, h, WL(P_W_DOWN), B, C, I, 0, 1, 1.0f, 1.0f));
        }
        ctx->tuning.skinny_use = 1;
        TIME("(lm head, skinny)", 0, 2.0 * V * C, ops_matmul(ctx, logits, 1, ln, head, B, V, C, 0, 1, 1.0f, 0.0f));
        ctx->tuning.skinny_use = 2;
        TIME("(lm head, wgmma)", 0, 2.0 * V * C, ops_matmul(ctx, logits, 1, ln, head, B, V, C, 0, 1, 1.0f, 0.0f));
        ctx->tuning.skinny_use = keep;
    }
    TIME("rmsnorm + lm head (fp32 out)", 1, 2.0 * V * C,
         ops_rmsnorm_matmul(ctx, logits, 1, ln, x, m->params.final_norm, head, B, V, C, 1e-6f, 1.0f, 0.0f));
    TIME("(matmul lm head alone)", 0, 2.0 * V * C, ops_matmul(ctx, logits, 1, ln, head, B, V, C, 0, 1, 1.0f, 0.0f));
    TIME("sample", 1, 8.0 * B * V, ops_sample(ctx, d_out, (float *)(d_out + B), logits, d_prm, B, V));
#undef TIME
#undef WL
#undef PAGED_ATTENTION
    if (measured_ms > 0.0) printf("  sum of the ops %.3f ms per step; a step measured %.3f ms\n", total, measured_ms);
    else printf("  sum of the ops %.3f ms per step\n", total);
    void *bufs[] = {x, ln, fused, qkv, qk, att, gu, h, rstd, logits, di, d_prm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_free(ctx, bufs[i]);
    free(hi), free(prm);
    kv_cache_free(&kv);
}

/* ---- 5. the decode step's critical path ------------------------------------------ */

/* The layers of a decode step (gen_forward's path for few tokens), each op
 * optionally left out: what an op adds to a step is the step
 * time lost without it, which a per-op time taken alone does not show once
 * kernels overlap (programmatic dependent launch). The numbers the ops then
 * compute are not used. */
enum { CH_QKV, CH_TO_CACHE, CH_ATTN, CH_O, CH_GATE_UP, CH_DOWN, CH_OPS };
static const char *const ch_names[CH_OPS] = {"rmsnorm + q|k|v", "qkv_to_cache", "paged_attention",
                                             "matmul o", "rmsnorm + gate|up + swiglu", "matmul down"};
typedef struct {
    model *m;
    decode_step *d;
    unsigned skip; /* bit i: leave out op i */
} chain;

static void chain_run(void *user) {
    chain *ch = user;
    model *m = ch->m;
    const model_config *c = &m->cfg;
    ops_ctx *ctx = m->ctx;
    gen_forward *f = &ch->d->f;
    const gen_step *st = &ch->d->st;
    const int T = st->T, C = c->hidden_size, I = c->intermediate_size, D = c->head_dim, Hq = c->n_heads;
    const int Hkv = c->n_kv_heads, Q = Hq * D, KV = Hkv * D;
    const float eps = c->rms_eps;
    for (int l = 0; l < c->n_layers; l++) {
#define W(t) param_layer_ptr(&m->params, &m->layout, l, t)
        if (!(ch->skip & 1u << CH_QKV))
            ops_rmsnorm_matmul(ctx, f->qkv, 0, f->ln, f->x, W(P_ATTN_NORM), W(P_WQ), T, Q + 2 * KV, C, eps, 1.0f, 0.0f);
        if (!(ch->skip & 1u << CH_TO_CACHE))
            ops_qkv_to_cache(ctx, f->qk, f->kv->k[l], f->kv->v[l], f->qkv, W(P_Q_NORM), W(P_K_NORM), st->pos,
                             st->slots, T, Hq, Hkv, D, eps, c->rope_theta);
        if (!(ch->skip & 1u << CH_ATTN))
            ops_paged_attention(ctx, f->att, f->qk, f->kv->k[l], f->kv->v[l], st->block_table, st->max_pages,
                                st->ctx_lens, st->cu_q, st->n_seqs, T, Hq, Hkv, D, f->kv->page_size,
                                1.0f / sqrtf((float)D), &st->groups);
        if (!(ch->skip & 1u << CH_O)) ops_matmul(ctx, f->x, 0, f->att, W(P_WO), T, C, Q, 0, 1, 1.0f, 1.0f);
        if (!(ch->skip & 1u << CH_GATE_UP))
            ops_rmsnorm_matmul_swiglu(ctx, f->h, f->gu, f->ln, f->x, W(P_MLP_NORM), W(P_W_GATE_UP), T, I, C, eps);
        if (!(ch->skip & 1u << CH_DOWN)) ops_matmul(ctx, f->x, 0, f->h, W(P_W_DOWN), T, C, I, 0, 1, 1.0f, 1.0f);
#undef W
    }
}

/* The chain's time per step (ms), replayed as one CUDA graph. */
static double chain_time(chain *ch) {
    ops_ctx *ctx = ch->m->ctx;
    ops_graph *g = ops_graph_capture(ctx, chain_run, ch);
    if (!g) DK_ABORT("bench_generate: graph capture failed: %s", dk_error());
    for (int i = 0; i < 3; i++) ops_graph_launch(ctx, g);
    ops_sync(ctx);
    const int N = 30;
    double t0 = dk_now();
    for (int i = 0; i < N; i++) ops_graph_launch(ctx, g);
    ops_sync(ctx);
    double ms = (dk_now() - t0) / N * 1e3;
    ops_graph_free(ctx, g);
    return ms;
}

static void chain_table(model *m, int B, int ctx_len) {
    ops_ctx *ctx = m->ctx;
    decode_step d;
    decode_step_init(&d, m, B, ctx_len);
    /* Real activations: one step's forward fills x; the chain then runs on
     * its (unchanging) contents. */
    gen_forward_run(&d.f, &d.st);
    chain ch = {.m = m, .d = &d};
    const double all = chain_time(&ch);
    printf("  %d layers, every op: %.3f ms (%.1f us a layer)\n", m->cfg.n_layers, all, all / m->cfg.n_layers * 1e3);
    printf("  %-30s %9s %12s\n", "left out", "ms", "us a layer");
    for (int i = 0; i < CH_OPS; i++) {
        ch.skip = 1u << i;
        const double t = chain_time(&ch);
        printf("  %-30s %9.3f %12.1f\n", ch_names[i], t, (all - t) / m->cfg.n_layers * 1e3);
    }
    ch.skip = 0;
    static const int plans[][2] = {{16, 16}, {8, 16}, {4, 16}, {16, 8}, {8, 8}, {4, 8}, {8, 4}};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        ctx->tuning.decode_warps = plans[i][0], ctx->tuning.decode_splits = plans[i][1];
        const double t = chain_time(&ch);
        printf("  paged_attention pinned to %d warps a CTA, %2d splits: %.3f ms (%.1f us a layer)\n", plans[i][0],
               plans[i][1], t, t / m->cfg.n_layers * 1e3);
    }
    ctx->tuning.decode_warps = 0, ctx->tuning.decode_splits = 0;
    /* The warp kernel's ways of loading rows, each pinned (the op chooses
     * per call). */
    static const int chain_modes[] = {-1, 1, 2};
    static const char *const chain_names[] = {"direct loads", "next rows in registers", "a shared-memory ring"};
    for (int i = 0; i < 3; i++) {
        ctx->tuning.decode_prefetch = chain_modes[i];
        const double t = chain_time(&ch);
        printf("  paged_attention, %-22s %.3f ms (%.1f us a layer)\n", chain_names[i], t,
               t / m->cfg.n_layers * 1e3);
    }
    ctx->tuning.decode_prefetch = 0;
    /* Its splits merged in a cluster (as many as fit together) or by a
     * second kernel (as many as fill the GPU), each pinned; then the second
     * way at a few pinned split counts (16 warps a CTA). */
    for (int mg = 1; mg <= 2; mg++) {
        ctx->tuning.decode_merge = mg;
        const double t = chain_time(&ch);
        printf("  paged_attention, splits merged %-10s %.3f ms (%.1f us a layer)\n",
               mg == 1 ? "in a cluster" : "by a kernel", t, t / m->cfg.n_layers * 1e3);
    }
    static const int gsplits[] = {16, 24, 32};
    ctx->tuning.decode_merge = 2, ctx->tuning.decode_warps = 16;
    for (int i = 0; i < (B <= 8 ? 3 : 0); i++) { /* a batch past that fills the GPU unsplit */
        ctx->tuning.decode_splits = gsplits[i];
        const double t = chain_time(&ch);
        printf("  paged_attention, 16 warps, %2d splits merged by a kernel %.3f ms (%.1f us a layer)\n", gsplits[i],
               t, t / m->cfg.n_layers * 1e3);
    }
    ctx->tuning.decode_merge = 0, ctx->tuning.decode_warps = 0, ctx->tuning.decode_splits = 0;
    /* The few-row products' grids (gemv_common.cuh): what fits the machine
     * (the choice), a block for every column group, half of what fits. */
    static const int shares[] = {0, -1, 2};
    static const char *const share_names[] = {"what fits", "a block a group", "half of what fits"};
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
        ctx->tuning.gemv_residency = shares[i];
        const double t = chain_time(&ch);
        printf("  products' grid %-18s %.3f ms (%.1f us a layer)\n", share_names[i], t, t / m->cfg.n_layers * 1e3);
    }
    ctx->tuning.gemv_residency = 0;
    decode_step_free(&d, m);
}

/* ---- 1 and 2: the engine's throughput and latency ---------------------------------- */

/* Runs of each timed section of bench_engine; a figure is their median,
 * printed with its spread (min-max), as runs on a shared GPU vary. */
#define BENCH_RUNS 3

/* "median (min-max)" of v in fmt, as a value to print. */
typedef struct {
    char s[112];
} spread_text;
static spread_text spread_of(const double *v, int n, const char *fmt) {
    double lo = v[0], hi = v[0];
    for (int i = 1; i < n; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
    char a[32], b[32], c[32];
    snprintf(a, sizeof a, fmt, bench_median(v, n));
    snprintf(b, sizeof b, fmt, lo);
    snprintf(c, sizeof c, fmt, hi);
    spread_text t;
    snprintf(t.s, sizeof t.s, "%s (%s-%s)", a, b, c);
    return t;
}

/* Sections 1 and 2 on engine e; tag names the launch mode in the headers. */
static void bench_engine(gen_engine *e, ops_ctx *ctx, int V, double W, double KVT, double bw, double hf_tps,
                         double hf_static_tps, int quick, const char *tag) {
    /* Warm-up: builds every matmul plan and decode graph the runs below use. */
    {
        gen_seq *w[64];
        for (int i = 0; i < 64; i++) w[i] = random_seq(e, 9000 + (uint64_t)i, 512, V);
        gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 4};
        must(gen_run(e, w, 64, &p), "warm-up");
        for (int i = 0; i < 64; i++) gen_seq_free(e, w[i]);
        gen_seq *one = random_seq(e, 1, 1024, V);
        p.max_new_tokens = 4;
        must(gen_run(e, &one, 1, &p), "warm-up");
        /* and a run that starts with a decode step, as the timed one does */
        must(gen_run(e, &one, 1, &p), "warm-up");
        gen_seq_free(e, one);
    }

    /* 1. batch 64, prompt 512, 256 new tokens: BENCH_RUNS runs of the same
     * work (prompts of their own, so none finds another run's pages), each
     * figure the median with its spread. */
    {
        enum { B = 64, PROMPT = 512, NEW = 256 };
        double tps[BENCH_RUNS], pre_tps[BENCH_RUNS], step_ms[BENCH_RUNS], roof_pct[BENCH_RUNS];
        int ok = 1;
        double bytes = 0.0; /* decode roofline: step k (1..NEW-1) reads the weights and B sequences' K/V of PROMPT + k tokens */
        for (int k = 1; k < NEW; k++) bytes += W + (double)B * (PROMPT + k) * KVT;
        const double roof = bytes / bw;
        for (int r = 0; r < BENCH_RUNS; r++) {
            gen_seq *s[B];
            for (int i = 0; i < B; i++) s[i] = random_seq(e, 100 + 1000 * (uint64_t)r + (uint64_t)i, PROMPT, V);
            gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 1};
            ops_sync(ctx);
            double a = dk_now();
            must(gen_run(e, s, B, &p), "prefill");
            double b = dk_now();
            p.max_new_tokens = NEW - 1;
            long steps0 = gen_get_stats(e)->steps;
            must(gen_run(e, s, B, &p), "decode");
            double d = dk_now();
            long steps = gen_get_stats(e)->steps - steps0;
            for (int i = 0; i < B; i++) ok &= s[i]->n_tokens == PROMPT + NEW;
            tps[r] = B * NEW / (d - a), pre_tps[r] = B * PROMPT / (b - a);
            step_ms[r] = (d - b) / (double)steps * 1e3, roof_pct[r] = 100.0 * roof / (d - b);
            for (int i = 0; i < B; i++) gen_seq_free(e, s[i]);
        }
        const double med = bench_median(tps, BENCH_RUNS);
        printf("\n[batch 64, prompt 512, 256 new tokens%s, %d runs: median (min-max)]%s\n", tag, BENCH_RUNS,
               ok ? "" : "  (WARNING: some sequences stopped early)");
        printf("  prefill %s tokens/s; decode %s ms/step\n", spread_of(pre_tps, BENCH_RUNS, "%.0f").s,
               spread_of(step_ms, BENCH_RUNS, "%.2f").s);
        /* No built-in HF figure: plain generate at batch 64 is bound by its
         * host loop and measured 723 to 2,438 tokens/s on these machines, so
         * a constant would say nothing about this run. */
        if (hf_tps > 0.0)
            printf("  generate: %s tokens/s = %.1fx HF generate (%.0f tokens/s, --hf-tps)\n",
                   spread_of(tps, BENCH_RUNS, "%.0f").s, med / hf_tps, hf_tps);
        else
            printf("  generate: %s tokens/s (no HF anchor given: --hf-tps and --hf-static-tps take "
                   "tools/bench/bench_generate_hf.py's figures)\n",
                   spread_of(tps, BENCH_RUNS, "%.0f").s);
        if (hf_static_tps > 0.0)
            printf("  generate: %.2fx HF static cache + torch.compile(reduce-overhead) (%.0f tokens/s, "
                   "--hf-static-tps)\n",
                   med / hf_static_tps, hf_static_tps);
        printf("  decode memory roofline: %.2f GB read per step on average (%.2f weights + %.2f KV), %.2f ms/step at "
               "%.2f TB/s: %s%% of roofline\n",
               bytes / (NEW - 1) / 1e9, W / 1e9, (bytes / (NEW - 1) - W) / 1e9, roof / (NEW - 1) * 1e3, bw / 1e12,
               spread_of(roof_pct, BENCH_RUNS, "%.1f").s);
    }

    /* 2. batch 1, 1k context: BENCH_RUNS runs, the median with its spread. */
    {
        const int CTX = 1024, NEW = quick ? 32 : 128;
        const double roof = (W + (CTX + NEW / 2.0) * KVT) / bw;
        double per[BENCH_RUNS], ratio[BENCH_RUNS], wait = 0.0, work = 0.0;
        long ahead = 0, caps = 0;
        for (int r = 0; r < BENCH_RUNS; r++) {
            gen_seq *s = random_seq(e, 7 + (uint64_t)r, CTX, V);
            gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = 1};
            must(gen_run(e, &s, 1, &p), "prefill");
            p.max_new_tokens = NEW;
            const gen_stats st0 = *gen_get_stats(e);
            double a = dk_now();
            must(gen_run(e, &s, 1, &p), "decode");
            per[r] = (dk_now() - a) / NEW * 1e3;
            ratio[r] = per[r] * 1e-3 / roof;
            const gen_stats *st1 = gen_get_stats(e);
            if (r == BENCH_RUNS - 1) { /* the host's share, from the last run */
                wait = (st1->wait_s - st0.wait_s) / NEW, work = per[r] * 1e-3 - wait;
                ahead = st1->ahead_steps - st0.ahead_steps, caps = st1->graph_captures - st0.graph_captures;
            }
            gen_seq_free(e, s);
        }
        printf("\n[batch 1, 1k context%s, %d runs: median (min-max)]\n  %s ms/token; roofline %.3f ms (weights %.2f GB "
               "+ KV %.3f GB): %sx the roofline\n",
               tag, BENCH_RUNS, spread_of(per, BENCH_RUNS, "%.3f").s, roof * 1e3, W / 1e9, (CTX + NEW / 2.0) * KVT / 1e9,
               spread_of(ratio, BENCH_RUNS, "%.2f").s);
        printf("  the host waited %.3f ms a token for the GPU and worked %.1f us a token; %ld of %d steps queued "
               "while the step before ran; %ld graphs captured in the run (last run)\n",
               wait * 1e3, work * 1e6, ahead, NEW, caps);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a fatal error keeps the lines printed before it */
    double hf_tps = 0.0, hf_static_tps = 0.0, bw = 0.0; /* 0: measured on this device */
    int quick = 0, graphs = 1, pdl = 1, chain_only = 0, table_only = 0, ops_batch = 0, ops_ctx_len = 0;
    int skinny_use = 0, swiglu_fuse = 0;
    const char *ops_model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hf-tps") && i + 1 < argc) hf_tps = atof(argv[++i]);
        else if (!strcmp(argv[i], "--hf-static-tps") && i + 1 < argc) hf_static_tps = atof(argv[++i]);
        else if (!strcmp(argv[i], "--bw") && i + 1 < argc) {
            bw = atof(argv[++i]);
            if (!(bw > 0.0)) {
                fprintf(stderr, "bench_generate: --bw %s: expected a positive number of bytes per second\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-graphs")) graphs = 0;
        else if (!strcmp(argv[i], "--no-pdl")) pdl = 0;
        else if (!strcmp(argv[i], "--skinny-use") && i + 1 < argc) {
            char *end = NULL;
            skinny_use = (int)strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || skinny_use < -1 || skinny_use > 2) {
                fprintf(stderr, "bench_generate: --skinny-use %s: expected -1, 0, 1 or 2\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--swiglu-fuse") && i + 1 < argc) {
            char *end = NULL;
            swiglu_fuse = (int)strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || (swiglu_fuse != 0 && swiglu_fuse != -1)) {
                fprintf(stderr, "bench_generate: --swiglu-fuse %s: expected 0 or -1\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--chain")) chain_only = 1;
        else if (!strcmp(argv[i], "--table-only")) table_only = 1;
        else if (!strcmp(argv[i], "--ops") && i + 3 < argc) {
            ops_model = argv[++i];
            ops_batch = atoi(argv[++i]), ops_ctx_len = atoi(argv[++i]);
            if (!bench_shape_named(ops_model)) {
                fprintf(stderr, "bench_generate: --ops %s: expected the model 1.7b, 8b or 14b\n", ops_model);
                return 2;
            }
            if (ops_batch < 1 || ops_batch > 256 || ops_ctx_len < 2) {
                fprintf(stderr, "bench_generate: --ops %s %d %d: expected a batch of 1..256 and a context >= 2\n",
                        ops_model, ops_batch, ops_ctx_len);
                return 2;
            }
        }
        else {
            fprintf(stderr,
                    "usage: bench_generate [--hf-tps X] [--hf-static-tps X] [--bw BYTES_PER_S] [--quick] [--no-graphs] "
                    "[--no-pdl] [--skinny-use -1|0|1|2] [--swiglu-fuse 0|-1] [--chain] [--ops 1.7b|8b|14b BATCH CONTEXT [--table-only]]\n");
            return 2;
        }
    }
    if (table_only && !ops_model) {
        fprintf(stderr, "bench_generate: --table-only goes with --ops\n");
        return 2;
    }
    if (device_count() == 0 || !ops_cuda_available()) {
        fprintf(stderr, "bench_generate: needs a CUDA GPU and a build with the CUDA op table\n");
        return 1;
    }
    char desc[256];
    device_describe(0, desc, sizeof desc);
    printf("device: %s\n", desc);
    const model_config *c = &qwen3_1_7b;
    ops_ctx ctx;
    must(ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, (size_t)256 << 20), "ctx");
    ctx.tuning.no_pdl = !pdl;
    ctx.tuning.skinny_use = skinny_use, ctx.tuning.swiglu_fuse = swiglu_fuse;
    if (skinny_use) printf("ops_tuning.skinny_use = %d throughout (--skinny-use)\n", skinny_use);
    if (swiglu_fuse) printf("ops_tuning.swiglu_fuse = %d throughout (--swiglu-fuse)\n", swiglu_fuse);
    bw = bench_roofline_bandwidth(&ctx, bw);
    if (ops_model) {
        bench_model bm;
        bench_model_open(&bm, bench_shape_named(ops_model), &ctx, "bench_generate");
        const double roof = (bm.weight_bytes + bm.kv_token_bytes * ops_batch * ops_ctx_len) / bw * 1e3;
        printf("model: Qwen3-%s shape, %.2f GB of bf16 weights\n", ops_model, bm.weight_bytes / 1e9);
        /* The step as the engine runs it, then (past the few-row products)
         * with the 9..64-row products all on the skinny kernel, all on its
         * wgmma form and all on cuBLASLt (ops_tuning.skinny_use). The op
         * table gets the first. */
        const int uses[5] = {skinny_use, 1, 2, -1, skinny_use};
        static const char *const use_names[5] = {"", ", every product on the skinny kernel",
                                                 ", every product on the wgmma skinny kernel",
                                                 ", no product on the skinny kernel",
                                                 ", gate|up and the SwiGLU as two ops (swiglu_fuse -1)"};
        double serial = 0.0;
        for (int u = 0; u < (table_only ? 0 : ops_batch > 8 ? 5 : 1); u++) {
            double enq, ser, pip;
            ctx.tuning.skinny_use = uses[u];
            ctx.tuning.swiglu_fuse = u == 4 ? -1 : swiglu_fuse;
            launch_probe(&bm.m, ops_batch, ops_ctx_len, &enq, &ser, &pip);
            if (u == 0) serial = ser;
            printf("\n[one decode step, batch %d, context %d%s] waited on %.3f ms, back to back %.3f ms/step; "
                   "roofline %.3f ms (weights + K/V at %.2f TB/s): %.1f%% of it\n",
                   ops_batch, ops_ctx_len, use_names[u], ser, pip, roof, bw / 1e12, 100.0 * roof / pip);
        }
        ctx.tuning.skinny_use = skinny_use, ctx.tuning.swiglu_fuse = swiglu_fuse;
        /* Then with the kernels other than the skinny products starting
         * as programmatic dependent launches only up to 8 rows (ops_tuning.
         * pdl_rows; the default is 64). */
        if (!table_only && pdl && ops_batch > 8) {
            double enq, ser, pip;
            ctx.tuning.pdl_rows = 8;
            launch_probe(&bm.m, ops_batch, ops_ctx_len, &enq, &ser, &pip);
            ctx.tuning.pdl_rows = 0;
            printf("\n[one decode step, batch %d, context %d, programmatic dependent launch up to 8 rows] waited on "
                   "%.3f ms, back to back %.3f ms/step; roofline %.3f ms (weights + K/V at %.2f TB/s): %.1f%% of it\n",
                   ops_batch, ops_ctx_len, ser, pip, roof, bw / 1e12, 100.0 * roof / pip);
        }
        printf("\n[per-op times, batch %d, context %d]\n", ops_batch, ops_ctx_len);
        op_table(&bm.m, ops_batch, ops_ctx_len, serial);
        if (!table_only) {
            printf("\n[the decode step's critical path, batch %d, context %d]\n", ops_batch, ops_ctx_len);
            chain_table(&bm.m, ops_batch, ops_ctx_len);
        }
        bench_model_close(&bm);
        ops_ctx_free(&ctx);
        return 0;
    }
    model m;
    must(model_create(&m, c, &ctx, 8, 0), "model_create");
    double t0 = dk_now();
    bench_random_weights(&m, 88172645463325252ull);
    printf("model: Qwen3-1.7B shape, %.2f GB of bf16 weights (initialised in %.1f s)\n", weight_bytes(&m) / 1e9,
           dk_now() - t0);
    const double W = weight_bytes(&m), KVT = kv_token_bytes(c);
    const int V = c->vocab_size;
    if (chain_only) {
        printf("\n[the decode step's critical path, batch 1, context 1024]\n");
        chain_table(&m, 1, 1024);
        model_free(&m);
        ops_ctx_free(&ctx);
        return 0;
    }

    gen_config gc = {.page_size = 16, .cache_bytes = (size_t)24 << 30, .max_batch = 64, .max_step_tokens = 8192,
                     .max_context = 2048, .cuda_graphs = graphs};
    gen_engine *e;
    must(gen_create(&e, &m, &gc), "gen_create");
    printf("engine: %d pages of 16 tokens (%.1f GB KV cache), max batch 64, prefill chunks of 8192 tokens, "
           "decode graphs %s, programmatic dependent launch %s\n",
           gen_get_config(e)->n_pages, gen_get_config(e)->n_pages * gen_page_bytes(c, &ctx, 16) / 1e9,
           graphs ? "on" : "off (--no-graphs)", pdl ? "on" : "off (--no-pdl)");

    bench_engine(e, &ctx, V, W, KVT, bw, hf_tps, hf_static_tps, quick, "");
    if (pdl) { /* the same runs with ordinary launches, on a fresh engine (its own graphs) */
        ctx.tuning.no_pdl = 1;
        gen_engine *e2;
        must(gen_create(&e2, &m, &gc), "gen_create");
        bench_engine(e2, &ctx, V, W, KVT, bw, hf_tps, hf_static_tps, quick, ", programmatic dependent launch off");
        gen_free(e2);
        ctx.tuning.no_pdl = 0;
    }
    { /* and with every step waited for before the next is queued */
        gen_config gs = gc;
        gs.sync_steps = 1;
        gen_engine *e3;
        must(gen_create(&e3, &m, &gs), "gen_create");
        bench_engine(e3, &ctx, V, W, KVT, bw, hf_tps, hf_static_tps, quick,
                     ", each step waited for before the next is queued");
        gen_free(e3);
    }

    if (graphs) {
        const gen_stats *gs = gen_get_stats(e);
        printf("\n[decode graphs] %ld of %ld engine steps replayed, %ld step shapes captured\n", gs->graph_replays,
               gs->steps, gs->graph_captures);
    }

    /* 3. launch overhead and where a decode step's time goes. */
    {
        printf("\n[launch overhead of one decode step]\n");
        const int Bs[2] = {1, 64}, ctxs[2] = {1024, 640};
        double serial[2];
        for (int i = 0; i < 2; i++) {
            double enq, pip;
            launch_probe(&m, Bs[i], ctxs[i], &enq, &serial[i], &pip);
            printf("  batch %2d, context %4d: queueing the kernels %.3f ms, step waited on %.3f ms, back-to-back "
                   "%.3f ms/step -> %s\n",
                   Bs[i], ctxs[i], enq, serial[i], pip,
                   enq > 0.8 * serial[i] ? "launch-bound (a CUDA graph would help)"
                                         : "GPU-bound (launches are hidden)");
        }
        for (int i = 0; i < 2; i++) {
            printf("\n[per-op times, batch %d, context %d]\n", Bs[i], ctxs[i]);
            op_table(&m, Bs[i], ctxs[i], serial[i]);
        }
    }

    /* 4. multi-turn: appended-turn prefill vs re-prefilling the history, on
     * an engine without prefix sharing: with it, the re-prefilled histories
     * take the pages the conversations already hold and compute only their
     * last partial page (480 tokens of 32 x 783 on an H100), which is not
     * the re-prefill a trainer without a KV cache across turns would pay. */
    {
        enum { B = 32, PROMPT = 512, TURN = 128, FEEDBACK = 128 };
        gen_config gn = gc;
        gn.prefix_sharing = -1;
        gen_engine *e_main = e;
        must(gen_create(&e, &m, &gn), "gen_create");
        gen_seq *s[B];
        for (int i = 0; i < B; i++) s[i] = random_seq(e, 500 + (uint64_t)i, PROMPT, V);
        gen_params p = {.temperature = 1.0f, .top_p = 1.0f, .max_new_tokens = TURN};
        must(gen_run(e, s, B, &p), "turn 1");
        printf("\n[3-turn conversations, batch 32: prompt 512, turns of 128, feedback of 128]\n");
        int32_t fb[FEEDBACK];
        for (int turn = 2; turn <= 3; turn++) {
            for (int i = 0; i < B; i++) {
                for (int j = 0; j < FEEDBACK; j++) fb[j] = (int32_t)(next_u64() % (uint64_t)V);
                must(gen_seq_append(e, s[i], fb, FEEDBACK), "feedback");
            }
            /* Appended turn: prefill the new tokens and sample the first. */
            gen_params one = p;
            one.max_new_tokens = 1;
            long pre0 = gen_get_stats(e)->prefill_tokens;
            double a = dk_now();
            must(gen_run(e, s, B, &one), "appended prefill");
            double t_app = dk_now() - a;
            long pre_app = gen_get_stats(e)->prefill_tokens - pre0;
            /* The same histories prefilled from scratch. */
            gen_seq *f[B];
            for (int i = 0; i < B; i++) {
                f[i] = gen_seq_new(e, s[i]->seed);
                must(gen_seq_append(e, f[i], s[i]->tokens, s[i]->n_tokens - 1), "history");
            }
            pre0 = gen_get_stats(e)->prefill_tokens;
            a = dk_now();
            must(gen_run(e, f, B, &one), "full prefill");
            double t_full = dk_now() - a;
            long pre_full = gen_get_stats(e)->prefill_tokens - pre0;
            printf("  turn %d (history %d tokens): appended prefill %.1f ms (%ld tokens), re-prefill of the whole "
                   "history %.1f ms (%ld tokens): %.1fx faster\n",
                   turn, s[0]->n_tokens - 1, t_app * 1e3, pre_app, t_full * 1e3, pre_full, t_full / t_app);
            for (int i = 0; i < B; i++) gen_seq_free(e, f[i]);
            gen_params rest = p;
            rest.max_new_tokens = TURN - 1;
            must(gen_run(e, s, B, &rest), "turn decode");
        }
        for (int i = 0; i < B; i++) gen_seq_free(e, s[i]);
        gen_free(e);
        e = e_main;
    }

    /* 5. the decode step's critical path. */
    printf("\n[the decode step's critical path, batch 1, context 1024]\n");
    chain_table(&m, 1, 1024);
    gen_free(e);
    model_free(&m);
    ops_ctx_free(&ctx);
    return 0;
}
