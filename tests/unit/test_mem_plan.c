/* test_mem_plan.c: the per-GPU memory plan (trainer/mem_plan.h) against
 * independent references:
 *
 * 1. Hand-computed shards. A Qwen3-style shape small enough to add up by
 *    hand: vocab 11, hidden 5, intermediate 6, 2 layers, 2 heads of 2, 1 kv
 *    head, untied. One layer is attn_norm 5 + wq 4x5 + wk 2x5 + wv 2x5 +
 *    q_norm 2 + k_norm 2 + wo 5x4 + mlp_norm 5 + gate_up 12x5 + down 5x6 =
 *    164 elements; the units are embedding 55, two layers of 164, final norm
 *    5, lm head 55: 443 parameters. A rank's slice (dist/shard.h, padded):
 *      world 1: 55 + 2*164 + 5 + 55           = 443
 *      world 2: 28 + 2*82  + 3 + 28           = 223
 *      world 3: 19 + 2*55  + 2 + 19           = 150
 *    and tied (no lm head) at world 3: 131. The largest padded unit is a
 *    layer: 164 at world 2, 165 at world 3; every unit gathered whole (the
 *    inference copy) is 56 + 328 + 6 + 56 = 446 at world 2 and
 *    57 + 330 + 6 + 57 = 450 at world 3. The train phase's gathered
 *    working set (trainer/zero.c: the embedding, final norm and lm head
 *    plus two layer slots, bf16 weights and fp32 gradients) is every unit
 *    at 2 layers; at 3 layers and world 2 it is 56 + 6 + 56 + 2*164 = 446
 *    of the 610 padded elements. bf16 weights, fp32 master, m, v and
 *    gradients; nothing is gathered at world 1.
 * 2. What model_create allocates on the CPU backend (model_device_bytes):
 *    parameters + gradients + activations of the plan equal it exactly, for
 *    Qwen3, Qwen2 (biases, tied) and Llama (o bias) shapes, every recompute
 *    mode and several token counts; the KL reference row equals a second
 *    model created with recompute none.
 * 3. What gen_forward_init allocates (its own byte count) for steps below,
 *    at and above the fused q|k|v limit, with one and several rows.
 * 4. The rank's batch: RL at world 3 of batch_size 8 gives 3 conversations
 *    and micro-batches of 3 x max_length tokens (micro_batch.h), or
 *    micro_batch_tokens where set; KV tokens are whole pages of what the
 *    rollout phase leaves, 2 x layers x kv heads x head_dim x 2 bytes each.
 * 5. FITS at exactly total + margin bytes, DOES NOT FIT one byte below; a
 *    rollout phase whose cache cannot hold one conversation does not fit;
 *    the start-of-run check passes and refuses (naming the GPU) likewise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "model/gen_forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/fixture_models.h"
#include "trainer/mem_plan.h"

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

/* Defaults plus overrides (no file). */
static void load(dk_config *cfg, const char **ov, int n) {
    must(config_load(cfg, NULL, n, (char **)ov), "config_load");
}

/* The same, and the model it describes. */
static void load_model(dk_config *cfg, model_config *mc, const char **ov, int n) {
    load(cfg, ov, n);
    must(config_model(cfg, mc), "config_model");
}

#define SMALL_SHAPE                                                                                          \
    "model.vocab_size=11", "model.hidden_size=5", "model.intermediate_size=6", "model.n_layers=2",          \
        "model.n_heads=2", "model.n_kv_heads=1", "model.head_dim=2", "model.max_position=64"

static void test_shards(void) {
    const struct {
        int world, tied;
        size_t shard, largest, padded;
    } want[] = {
        {1, 0, 443, 0, 0},
        {2, 0, 223, 164, 446},
        {3, 0, 150, 165, 450},
        {3, 1, 131, 165, 57 + 330 + 6},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *ov[] = {SMALL_SHAPE, "run.mode=rl", "data.max_length=16", "train.batch_size=6", "rl.n_samples=2",
                            want[i].tied ? "model.tie_embeddings=true" : "model.tie_embeddings=false"};
        dk_config cfg;
        model_config mc;
        load_model(&cfg, &mc, ov, sizeof ov / sizeof ov[0]);
        CHECK(model_config_n_params(&mc) == (want[i].tied ? 388u : 443u), "%zu parameters",
              model_config_n_params(&mc));
        mem_plan p;
        must(mem_plan_make(&p, &cfg, &mc, want[i].world, DK_DEVICE_CUDA, (size_t)80e9, 0), "mem_plan_make");
        const size_t s = want[i].shard, w = want[i].world;
        for (int ph = 0; ph < MEM_PHASES; ph++) {
            CHECK(p.bytes[MEM_PARAMS][ph] == 2 * s, "world %zu: parameter shard %zu bytes, want %zu", w,
                  p.bytes[MEM_PARAMS][ph], 2 * s);
            CHECK(p.bytes[MEM_MASTER][ph] == 4 * s && p.bytes[MEM_ADAM_M][ph] == 4 * s &&
                      p.bytes[MEM_ADAM_V][ph] == 4 * s && p.bytes[MEM_GRADS][ph] == 4 * s,
                  "world %zu: master %zu, m %zu, v %zu, grads %zu bytes, want %zu each", w, p.bytes[MEM_MASTER][ph],
                  p.bytes[MEM_ADAM_M][ph], p.bytes[MEM_ADAM_V][ph], p.bytes[MEM_GRADS][ph], 4 * s);
        }
        /* Two layers: the ends and two layer slots are every unit. */
        CHECK(p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN] == 2 * want[i].padded &&
                  p.bytes[MEM_GATHER_GRADS][MEM_TRAIN] == 4 * want[i].padded,
              "world %zu: gathered %zu + %zu bytes, want %zu + %zu", w, p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN],
              p.bytes[MEM_GATHER_GRADS][MEM_TRAIN], 2 * want[i].padded, 4 * want[i].padded);
        CHECK(p.bytes[MEM_GATHER_PARAMS][MEM_ROLLOUT] == 0 && p.bytes[MEM_GATHER_GRADS][MEM_ROLLOUT] == 0,
              "world %zu: gather buffers in the rollout phase", w);
        CHECK(p.bytes[MEM_INFER_COPY][MEM_ROLLOUT] == 2 * want[i].padded && p.bytes[MEM_INFER_COPY][MEM_TRAIN] == 0,
              "world %zu: inference copy %zu bytes, want %zu (rollout only)", w, p.bytes[MEM_INFER_COPY][MEM_ROLLOUT],
              2 * want[i].padded);
        /* A replica (world 1) keeps its activations through the rollout
         * phase; a sharded run frees them for it. */
        CHECK(p.bytes[MEM_ACTIVATIONS][MEM_ROLLOUT] == (w == 1 ? p.bytes[MEM_ACTIVATIONS][MEM_TRAIN] : 0) &&
                  p.bytes[MEM_KV_CACHE][MEM_TRAIN] == 0,
              "world %zu: activations %zu bytes in the rollout phase, KV cache %zu in the train phase", w,
              p.bytes[MEM_ACTIVATIONS][MEM_ROLLOUT], p.bytes[MEM_KV_CACHE][MEM_TRAIN]);
        if (w != 1) continue;
        /* Sharded at world 1 (DK_ZERO=1): whole units, but gathered like any
         * world's: the working set, the inference copy, activations in the
         * train phase only; the KL reference one act shard. */
        cfg.rl.kl_coef = 0.1;
        must(mem_plan_make_ex(&p, &cfg, &mc, 1, 1, DK_DEVICE_CUDA, (size_t)80e9, 0), "mem_plan_make_ex");
        const size_t n = want[i].shard;
        CHECK(p.sharded && p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN] == 2 * n && p.bytes[MEM_GATHER_GRADS][MEM_TRAIN] == 4 * n &&
                  p.bytes[MEM_INFER_COPY][MEM_ROLLOUT] == 2 * n && p.bytes[MEM_ACTIVATIONS][MEM_ROLLOUT] == 0 &&
                  p.bytes[MEM_REFERENCE][MEM_TRAIN] == 2 * n && p.bytes[MEM_REFERENCE][MEM_ROLLOUT] == 2 * n,
              "sharded world 1: gathered %zu + %zu, inference copy %zu, rollout activations %zu, reference %zu "
              "bytes; want %zu + %zu, %zu, 0, %zu",
              p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN], p.bytes[MEM_GATHER_GRADS][MEM_TRAIN],
              p.bytes[MEM_INFER_COPY][MEM_ROLLOUT], p.bytes[MEM_ACTIVATIONS][MEM_ROLLOUT],
              p.bytes[MEM_REFERENCE][MEM_TRAIN], 2 * n, 4 * n, 2 * n, 2 * n);
    }
    {   /* Three layers: only two layer slots are gathered. */
        const char *ov[] = {SMALL_SHAPE, "model.n_layers=3", "run.mode=sft", "data.max_length=16",
                            "train.batch_size=4", "model.tie_embeddings=false"};
        dk_config cfg;
        model_config mc;
        load_model(&cfg, &mc, ov, sizeof ov / sizeof ov[0]);
        mem_plan p;
        must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, (size_t)80e9, 0), "mem_plan_make");
        CHECK(p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN] == 2 * 446 && p.bytes[MEM_GATHER_GRADS][MEM_TRAIN] == 4 * 446,
              "3 layers, world 2: gathered %zu + %zu bytes, want %d + %d", p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN],
              p.bytes[MEM_GATHER_GRADS][MEM_TRAIN], 2 * 446, 4 * 446);
    }
    /* SFT has no rollout phase; eval no optimizer state and no train phase. */
    const char *sft[] = {SMALL_SHAPE,          "run.mode=sft",         "data.max_length=16",
                         "train.batch_size=4", "train.recompute=none", "train.keep_logits=false"};
    const char *eval[] = {SMALL_SHAPE, "run.mode=eval", "data.max_length=16", "train.batch_size=4"};
    dk_config cfg;
    model_config mc;
    mem_plan p;
    load_model(&cfg, &mc, sft, sizeof sft / sizeof sft[0]);
    must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, (size_t)80e9, 0), "mem_plan_make sft");
    CHECK(p.has_phase[MEM_TRAIN] && !p.has_phase[MEM_ROLLOUT] && p.total[MEM_ROLLOUT] == 0 &&
              p.bytes[MEM_INFER_COPY][MEM_ROLLOUT] == 0,
          "sft: train phase only");
    CHECK(p.train_tokens == 2 * 16, "sft at world 2: %d tokens per micro-batch, want 2 sequences of 16",
          p.train_tokens);
    load(&cfg, eval, sizeof eval / sizeof eval[0]);
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, (size_t)80e9, 0), "mem_plan_make eval");
    CHECK(!p.has_phase[MEM_TRAIN] && p.has_phase[MEM_ROLLOUT] && p.bytes[MEM_ADAM_M][MEM_ROLLOUT] == 0 &&
              p.bytes[MEM_MASTER][MEM_ROLLOUT] == 0 && p.bytes[MEM_GRADS][MEM_ROLLOUT] == 4 * 443 &&
              p.bytes[MEM_ACTIVATIONS][MEM_ROLLOUT] == mem_plan_model_acts(&mc, 16, MODEL_RECOMPUTE_NONE, 2),
          "eval: rollout phase with model_create's gradients and activations for one sequence, no optimizer");
    CHECK(mem_plan_make(&p, &cfg, &mc, 0, DK_DEVICE_CUDA, (size_t)80e9, 0) == DK_ERR_USAGE, "world 0 accepted");
}

/* model_create on the CPU backend against the plan's rows. */
static void test_model_create(void) {
    const dk_arch archs[] = {DK_ARCH_QWEN3, DK_ARCH_QWEN2, DK_ARCH_LLAMA};
    const char *rc_names[] = {"none", "layer", "layer_keep_attention"};
    const int tokens[] = {1, 7, 96};
    for (int a = 0; a < 3; a++) {
        model_config mc = fixture_model_config(archs[a]);
        for (int rc = 0; rc < 3; rc++) {
            for (int ti = 0; ti < 3; ti++) {
                const int T = tokens[ti];
                ops_ctx ctx;
                must(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&mc, T)), "ops_ctx_init");
                model m;
                must(model_create(&m, &mc, &ctx, T, (model_recompute)rc), "model_create");
                const size_t n = model_config_n_params(&mc), got = model_device_bytes(&m);
                const size_t acts = mem_plan_model_acts(&mc, T, (model_recompute)rc, sizeof(float));
                CHECK(n * 4 + n * 4 + acts == got,
                      "%s, recompute %s, %d tokens: plan %zu + %zu + %zu bytes, model_create %zu",
                      model_arch_name(mc.arch), rc_names[rc], T, n * 4, n * 4, acts, got);
                /* The same through the whole plan, world 1, fp32 act. */
                dk_config cfg;
                const char *ov[] = {SMALL_SHAPE, "run.mode=rl", "rl.kl_coef=0.1", "train.batch_size=4",
                                    "rl.n_samples=2", "data.max_length=16"}; /* the shape planned is mc's */
                load(&cfg, ov, sizeof ov / sizeof ov[0]);
                cfg.train.recompute = (model_recompute)rc;
                mem_plan p;
                must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CPU, (size_t)1e12, T), "mem_plan_make cpu");
                CHECK(p.bytes[MEM_PARAMS][MEM_TRAIN] + p.bytes[MEM_GRADS][MEM_TRAIN] +
                              p.bytes[MEM_ACTIVATIONS][MEM_TRAIN] ==
                          got,
                      "%s, recompute %s, %d tokens: plan rows %zu, model_create %zu", model_arch_name(mc.arch),
                      rc_names[rc], T,
                      p.bytes[MEM_PARAMS][MEM_TRAIN] + p.bytes[MEM_GRADS][MEM_TRAIN] +
                          p.bytes[MEM_ACTIVATIONS][MEM_TRAIN],
                      got);
                CHECK(p.bytes[MEM_MASTER][MEM_TRAIN] == 0 && p.bytes[MEM_BLASLT][MEM_TRAIN] == 0 &&
                          p.bytes[MEM_CONTEXT][MEM_TRAIN] == 0,
                      "cpu: fp32 weights need no master, and there is no cuBLASLt or CUDA context");
                /* rl_run's KL reference: model_create with recompute none. */
                model ref;
                must(model_create(&ref, &mc, &ctx, T, MODEL_RECOMPUTE_NONE), "model_create ref");
                CHECK(p.bytes[MEM_REFERENCE][MEM_TRAIN] == model_device_bytes(&ref) &&
                          p.bytes[MEM_REFERENCE][MEM_ROLLOUT] == model_device_bytes(&ref),
                      "%s: reference row %zu, model_create %zu", model_arch_name(mc.arch),
                      p.bytes[MEM_REFERENCE][MEM_TRAIN], model_device_bytes(&ref));
                model_free(&ref);
                model_free(&m);
                ops_ctx_free(&ctx);
            }
        }
    }
}

/* gen_forward_init's own count against the plan's generation row. */
static void test_gen_forward(void) {
    const dk_arch archs[] = {DK_ARCH_QWEN3, DK_ARCH_QWEN2};
    const int steps[][2] = {{1, 1}, {5, 3}, {GEN_FUSED_QKV_TOKENS, 8}, {GEN_FUSED_QKV_TOKENS + 40, 8}};
    for (int a = 0; a < 2; a++) {
        model_config mc = fixture_model_config(archs[a]);
        mc.max_position = 1024;
        ops_ctx ctx;
        must(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&mc, 8)), "ops_ctx_init");
        model m;
        must(model_create(&m, &mc, &ctx, 8, MODEL_RECOMPUTE_NONE), "model_create");
        kv_cache kv;
        must(kv_cache_create(&kv, &ctx, &mc, 4, 8), "kv_cache_create");
        CHECK(kv.bytes == 8 * kv_cache_page_bytes(&mc, 4, sizeof(float)) &&
                  kv_cache_page_bytes(&mc, 1, 2) == 2 * (size_t)mc.n_layers * mc.n_kv_heads * mc.head_dim * 2,
              "%s: KV page bytes", model_arch_name(mc.arch));
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            gen_forward f;
            gen_forward_init(&f, &m, &kv, steps[i][0], steps[i][1]);
            const size_t plan = mem_plan_gen_acts(&mc, steps[i][0], steps[i][1], sizeof(float));
            CHECK(plan == f.bytes, "%s, %d tokens, %d rows: plan %zu bytes, gen_forward_init %zu",
                  model_arch_name(mc.arch), steps[i][0], steps[i][1], plan, f.bytes);
            gen_forward_free(&f);
        }
        kv_cache_free(&kv);
        model_free(&m);
        ops_ctx_free(&ctx);
    }
}

static void test_rank_batch_and_fit(void) {
    const char *ov[] = {SMALL_SHAPE, "run.mode=rl", "data.max_length=16", "train.batch_size=8", "rl.n_samples=2",
                        "train.recompute=none", "train.keep_logits=false"};
    dk_config cfg;
    model_config mc;
    load_model(&cfg, &mc, ov, sizeof ov / sizeof ov[0]);
    mem_plan p;
    must(mem_plan_make(&p, &cfg, &mc, 3, DK_DEVICE_CUDA, (size_t)10e9, 0), "mem_plan_make");
    /* 4 tasks of 2 samples over 3 ranks: the first takes 2 tasks, 4 rollouts. */
    CHECK(p.rollout_seqs == 4 && p.train_tokens == 4 * 16, "world 3 of 8: %d conversations, %d tokens; want 4, 64",
          p.rollout_seqs, p.train_tokens);
    /* 2 x 2 layers x 1 kv head x head_dim 2 x 2 bytes */
    CHECK(p.kv_token_bytes == 16, "KV bytes per token %zu, want 16", p.kv_token_bytes);
    CHECK(p.kv_need_one == 16 && p.kv_need_all == 64, "KV need %ld / %ld tokens, want 16 / 64", p.kv_need_one,
          p.kv_need_all);
    /* The cache is whole 16-token pages of rl.kv_cache_fraction (0.5 by
     * default) of what the rest of the phase leaves free, as gen_create
     * sizes it from the free memory it is given. */
    const size_t page = 16 * 16, others = p.total[MEM_ROLLOUT] - p.bytes[MEM_KV_CACHE][MEM_ROLLOUT];
    const size_t share = (size_t)(cfg.rl.kv_cache_fraction * (double)(p.gpu_bytes - others));
    CHECK(cfg.rl.kv_cache_fraction == 0.5 && p.bytes[MEM_KV_CACHE][MEM_ROLLOUT] == share / page * page &&
              p.kv_tokens == (long)(share / page * 16),
          "KV cache %zu bytes (%ld tokens), want %zu", p.bytes[MEM_KV_CACHE][MEM_ROLLOUT], p.kv_tokens,
          share / page * page);
    cfg.train.micro_batch_tokens = 40;
    must(mem_plan_make(&p, &cfg, &mc, 3, DK_DEVICE_CUDA, (size_t)10e9, 0), "mem_plan_make");
    CHECK(p.train_tokens == 40, "micro_batch_tokens 40: planned %d", p.train_tokens);

    /* FITS exactly at total + margin; one byte less does not. SFT: one phase. */
    const char *sft[] = {SMALL_SHAPE,          "run.mode=sft",         "data.max_length=16",
                         "train.batch_size=4", "train.recompute=none", "train.keep_logits=false"};
    load(&cfg, sft, sizeof sft / sizeof sft[0]);
    must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    const size_t need = p.total[MEM_TRAIN] + p.margin_bytes;
    CHECK(p.peak == p.total[MEM_TRAIN] && p.fits, "sft: peak %zu, fits %d", p.peak, p.fits);
    must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, need, 0), "mem_plan_make");
    CHECK(p.fits, "does not fit in exactly total + margin = %zu bytes", need);
    must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, need - 1, 0), "mem_plan_make");
    CHECK(!p.fits, "fits in one byte less than total + margin");

    /* RL: a cache that cannot hold one conversation is not a fit, although
     * both phases are. No margin and kv_cache_fraction 0.5: the cache gets
     * half of what is free, so one page needs twice its bytes free. */
    load(&cfg, ov, sizeof ov / sizeof ov[0]);
    cfg.dist.margin_gb = 0;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    const size_t base = p.total[MEM_ROLLOUT] - p.bytes[MEM_KV_CACHE][MEM_ROLLOUT];
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, base + 2 * 16 * 16 - 1, 0), "mem_plan_make");
    CHECK(!p.fits && p.kv_tokens == 0, "fits with %ld KV tokens, one conversation needs 16", p.kv_tokens);
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, base + 2 * 16 * 16, 0), "mem_plan_make");
    CHECK(p.fits == (p.total[MEM_TRAIN] <= p.gpu_bytes) && p.kv_tokens == 16, "one page of cache: fits %d, %ld tokens",
          p.fits, p.kv_tokens);
}

/* The check a CUDA run makes at start: refuses, naming the GPU, below the
 * plan's need; passes at it. */
static void test_check(void) {
    const char *ov[] = {SMALL_SHAPE,          "run.mode=sft",         "run.device=cuda",         "data.max_length=16",
                        "train.batch_size=4", "train.recompute=none", "train.keep_logits=false"};
    dk_config cfg;
    model_config mc;
    load_model(&cfg, &mc, ov, sizeof ov / sizeof ov[0]);
    mem_plan p;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 64), "mem_plan_make");
    const size_t need = p.total[MEM_TRAIN] + p.margin_bytes;
    CHECK(mem_plan_check(&cfg, &mc, 1, 64, need, "gpu 3") == DK_OK, "refused at exactly its need: %s", dk_error());
    printf("(a refused plan prints its table to stderr:)\n");
    fflush(stdout);
    dk_status st = mem_plan_check(&cfg, &mc, 1, 64, need - 1, "gpu 3");
    CHECK(st == DK_ERR_USAGE && strstr(dk_error(), "does not fit gpu 3"), "one byte short: status %d, %s", st,
          dk_error());
}

/* recompute = auto against the plans of the fixed modes: on a GPU of each
 * mode's exact need (total + margin) it picks that mode, the fastest that
 * fits (none, then layer_keep_attention, then layer), and layer, not
 * fitting, below layer's need; in RL without sharding (activations stay
 * through the rollouts) it passes over a mode that fits but leaves the KV
 * cache fewer tokens than layer would; a fixed mode is planned as set. */
static void test_recompute_auto(void) {
    const char *sft[] = {SMALL_SHAPE,          "run.mode=sft",         "data.max_length=64",
                         "train.batch_size=4", "train.recompute=auto", "train.keep_logits=false"};
    dk_config cfg;
    model_config mc;
    load_model(&cfg, &mc, sft, sizeof sft / sizeof sft[0]);
    CHECK(cfg.train.recompute == DK_RECOMPUTE_AUTO, "train.recompute=auto read as %d", (int)cfg.train.recompute);
    const model_recompute modes[3] = {MODEL_RECOMPUTE_NONE, MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION,
                                      MODEL_RECOMPUTE_LAYER};
    size_t need[3];
    mem_plan p;
    for (int i = 0; i < 3; i++) {
        dk_config c = cfg;
        c.train.recompute = modes[i];
        must(mem_plan_make(&p, &c, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
        CHECK(!p.recompute_auto && p.recompute == modes[i], "a fixed mode %d planned as %d", (int)modes[i],
              (int)p.recompute);
        need[i] = p.peak + p.margin_bytes;
    }
    CHECK(need[0] > need[1] && need[1] > need[2], "needs none %zu > keep %zu > layer %zu", need[0], need[1], need[2]);
    for (int i = 0; i < 3; i++) {
        must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, need[i], 0), "mem_plan_make auto");
        CHECK(p.recompute_auto && p.recompute == modes[i] && p.fits && p.peak + p.margin_bytes == need[i],
              "auto at %zu bytes picked %d (fits %d), want %d", need[i], (int)p.recompute, p.fits, (int)modes[i]);
        CHECK(i == 0 || strstr(p.recompute_why, "none does not fit"), "auto's reason: '%s'", p.recompute_why);
        must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, need[i] - 1, 0), "mem_plan_make auto");
        const model_recompute next = i < 2 ? modes[i + 1] : MODEL_RECOMPUTE_LAYER;
        CHECK(p.recompute == next && p.fits == (i < 2), "auto one byte below %d's need picked %d (fits %d)",
              (int)modes[i], (int)p.recompute, p.fits);
    }

    /* RL at world 1, not sharded: the activations stay through the rollout
     * phase, so a faster mode's bigger activations shrink the KV cache. */
    const char *rl[] = {SMALL_SHAPE, "run.mode=rl", "data.max_length=64", "train.batch_size=8", "rl.n_samples=2",
                        "train.recompute=auto", "dist.margin_gb=0",
                        "train.keep_logits=false"};
    load_model(&cfg, &mc, rl, sizeof rl / sizeof rl[0]);
    mem_plan fixed[3];
    for (int i = 0; i < 3; i++) {
        dk_config c = cfg;
        c.train.recompute = modes[i];
        must(mem_plan_make(&fixed[i], &c, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    }
    /* A GPU where none's rollout phase leaves its cache 4 pages (64
     * tokens, one conversation) and its train phase fits. */
    const size_t base_none = fixed[0].total[MEM_ROLLOUT] - fixed[0].bytes[MEM_KV_CACHE][MEM_ROLLOUT];
    size_t gpu = base_none + 2 * 4 * 16 * 16;
    if (fixed[0].total[MEM_TRAIN] > gpu) gpu = fixed[0].total[MEM_TRAIN];
    for (int i = 0; i < 3; i++) {
        dk_config c = cfg;
        c.train.recompute = modes[i];
        must(mem_plan_make(&fixed[i], &c, &mc, 1, DK_DEVICE_CUDA, gpu, 0), "mem_plan_make");
    }
    const long want = fixed[2].kv_tokens < fixed[2].kv_need_all ? fixed[2].kv_tokens : fixed[2].kv_need_all;
    CHECK(fixed[0].fits && fixed[0].kv_tokens < want, "the case: none fits with %ld KV tokens, layer has %ld, all "
          "conversations need %ld", fixed[0].kv_tokens, fixed[2].kv_tokens, fixed[2].kv_need_all);
    int expect = 2;
    for (int i = 1; i >= 0; i--)
        if (fixed[i].fits && fixed[i].kv_tokens >= want) expect = i;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, gpu, 0), "mem_plan_make auto");
    printf("recompute auto, rl at world 1 on %zu bytes: KV tokens none %ld, layer_keep_attention %ld, layer %ld; "
           "picked %s (%s)\n", gpu, fixed[0].kv_tokens, fixed[1].kv_tokens, fixed[2].kv_tokens,
           model_recompute_names[p.recompute], p.recompute_why);
    CHECK(p.recompute == modes[expect] && p.recompute != MODEL_RECOMPUTE_NONE &&
              strstr(p.recompute_why, "none leaves a KV cache"),
          "auto with none's cache short picked %d (%s), want %d", (int)p.recompute, p.recompute_why,
          (int)modes[expect]);
    /* With room for every conversation at full length in any mode, none. */
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make auto");
    CHECK(p.recompute == MODEL_RECOMPUTE_NONE && p.kv_tokens >= p.kv_need_all, "auto with ample memory picked %d",
          (int)p.recompute);
    /* Sharded, the activations are gone by the rollouts: the cache is the
     * same in every mode, so the smallest GPU that fits none picks it. */
    dk_config c = cfg;
    c.train.recompute = MODEL_RECOMPUTE_NONE;
    must(mem_plan_make(&p, &c, &mc, 2, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    const size_t sneed = p.peak + p.margin_bytes;
    must(mem_plan_make(&p, &cfg, &mc, 2, DK_DEVICE_CUDA, sneed, 0), "mem_plan_make auto");
    CHECK(p.recompute == MODEL_RECOMPUTE_NONE || !p.fits, "sharded auto at none's need picked %d", (int)p.recompute);
}

/* train.keep_logits: on CUDA the plan keeps the lm head's fp32 logits (a
 * T x V row in the train phase) where it fits with them, and not one byte
 * below; never on the CPU backend or when the key is false; in RL without
 * sharding (the model's buffers stay through the rollouts) never at the
 * cost of KV cache the conversations need. */
static void test_keep_logits(void) {
    const char *sft[] = {SMALL_SHAPE, "run.mode=sft", "data.max_length=16", "train.batch_size=4",
                         "train.recompute=none"};
    dk_config cfg;
    model_config mc;
    load_model(&cfg, &mc, sft, sizeof sft / sizeof sft[0]);
    CHECK(cfg.train.keep_logits, "train.keep_logits defaults to true");
    mem_plan p, off;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    const size_t row = (size_t)p.train_tokens * (size_t)mc.vocab_size * 4;
    CHECK(p.keep_logits && p.bytes[MEM_KEEP_LOGITS][MEM_TRAIN] == row && row == model_keep_logits_bytes(&mc, 64),
          "ample memory: keep %d, row %zu, want %zu (64 tokens x vocab %d x 4)", p.keep_logits,
          p.bytes[MEM_KEEP_LOGITS][MEM_TRAIN], row, mc.vocab_size);
    dk_config c = cfg;
    c.train.keep_logits = false;
    must(mem_plan_make(&off, &c, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    CHECK(!off.keep_logits && off.bytes[MEM_KEEP_LOGITS][MEM_TRAIN] == 0 &&
              off.total[MEM_TRAIN] + row == p.total[MEM_TRAIN],
          "keep_logits=false: keep %d, row %zu, totals %zu + %zu vs %zu", off.keep_logits,
          off.bytes[MEM_KEEP_LOGITS][MEM_TRAIN], off.total[MEM_TRAIN], row, p.total[MEM_TRAIN]);
    const size_t need = off.total[MEM_TRAIN] + off.margin_bytes;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, need + row, 0), "mem_plan_make");
    CHECK(p.keep_logits && p.fits, "at the need with the row: keep %d, fits %d", p.keep_logits, p.fits);
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, need + row - 1, 0), "mem_plan_make");
    CHECK(!p.keep_logits && p.fits, "one byte short of the row: keep %d, fits %d", p.keep_logits, p.fits);
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CPU, (size_t)100e9, 0), "mem_plan_make cpu");
    CHECK(!p.keep_logits, "the CPU backend keeps no logits");

    /* RL at world 1: the row stays through the rollouts, so a GPU whose
     * cache without it holds just every conversation keeps none. */
    const char *rl[] = {SMALL_SHAPE, "run.mode=rl", "data.max_length=64", "train.batch_size=8", "rl.n_samples=2",
                        "train.recompute=none", "dist.margin_gb=0"};
    load_model(&cfg, &mc, rl, sizeof rl / sizeof rl[0]);
    c = cfg;
    c.train.keep_logits = false;
    must(mem_plan_make(&off, &c, &mc, 1, DK_DEVICE_CUDA, (size_t)100e9, 0), "mem_plan_make");
    const size_t rrow = model_keep_logits_bytes(&mc, off.train_tokens);
    const size_t base = off.total[MEM_ROLLOUT] - off.bytes[MEM_KV_CACHE][MEM_ROLLOUT];
    const size_t kv_all = 2 * (size_t)off.kv_need_all * off.kv_token_bytes; /* kv_cache_fraction 0.5 */
    size_t gpu = base + kv_all;
    if (off.total[MEM_TRAIN] + rrow > gpu) gpu = off.total[MEM_TRAIN] + rrow;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, gpu, 0), "mem_plan_make");
    CHECK(!p.keep_logits && p.fits && p.kv_tokens >= p.kv_need_all,
          "rl, cache just holds every conversation: keep %d, fits %d, %ld of %ld KV tokens", p.keep_logits, p.fits,
          p.kv_tokens, p.kv_need_all);
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, gpu + 2 * rrow, 0), "mem_plan_make");
    CHECK(p.keep_logits && p.bytes[MEM_KEEP_LOGITS][MEM_ROLLOUT] == rrow && p.kv_tokens >= p.kv_need_all,
          "rl, room for the row too: keep %d, rollout row %zu (want %zu), %ld of %ld KV tokens", p.keep_logits,
          p.bytes[MEM_KEEP_LOGITS][MEM_ROLLOUT], rrow, p.kv_tokens, p.kv_need_all);
}

int main(void) {
    test_keep_logits();
    test_recompute_auto();
    test_shards();
    test_model_create();
    test_gen_forward();
    test_rank_batch_and_fit();
    test_check();
    return check_report();
}
