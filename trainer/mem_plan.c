/* mem_plan.c: the per-GPU memory plan of mem_plan.h, item by item. The
 * activation and generation rows restate the allocations of model_create
 * (model/model.c) and gen_forward_init (model/gen_forward.c) buffer by
 * buffer; tests/unit/test_mem_plan.c holds them equal to what those
 * functions allocate on the CPU backend, so a buffer added there and not here
 * fails a test. */
#include "trainer/mem_plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "dist/shard.h"
#include "kernels/ops_cuda.h"
#include "model/gen_forward.h"
#include "model/generate.h"
#include "model/kv_cache.h"
#include "trainer/micro_batch.h"
#include "trainer/rollout_session.h"

/* cuBLASLt's workspace, as kernels/memory.cu allocates it with the context
 * (tests/gpu/test_cuda_mem_plan.c checks the context's blaslt_ws_size). */
#define MEM_PLAN_BLASLT_BYTES ((size_t)32 << 20)

/* One decoder layer's activation set (model.c's acts_alloc). */
static size_t layer_acts_bytes(const model_config *c, size_t T, model_recompute rc, size_t A) {
    const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    const size_t F = sizeof(float);
    size_t b = T * C * A + T * Q * A + T * KV * A;                    /* ln1, q_raw, k_raw */
    if (c->qk_norm) b += T * Q * A + T * KV * A + T * (size_t)(c->n_heads + c->n_kv_heads) * F; /* q, k, rstds */
    b += T * KV * A;                                                  /* v */
    if (rc != MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION) b += T * Q * A + T * (size_t)c->n_heads * F; /* att, lse */
    b += 2 * T * C * A + T * 3 * I * A + 2 * T * F;                   /* x_mid, ln2, gu, h, rstd1, rstd2 */
    return b;
}

size_t mem_plan_model_acts(const model_config *c, int max_tokens, model_recompute rc, size_t A) {
    const size_t T = max_tokens > 0 ? (size_t)max_tokens : 0, L = (size_t)c->n_layers;
    const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    const size_t F = sizeof(float);
    size_t b = (L + 1) * T * C * A;                                    /* residual stream */
    b += (rc == MODEL_RECOMPUTE_NONE ? L : 1) * layer_acts_bytes(c, T, rc, A);
    if (rc == MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION) b += L * (T * Q * A + T * (size_t)c->n_heads * F);
    b += T * C * A + 6 * T * F;           /* final_h; final_rstd, logprob, entropy, lmhead_lse, dlogprob, dentropy */
    const size_t mlp = 3 * I, attn = 3 * Q + 3 * KV;
    b += 2 * T * C * A + T * (mlp > attn ? mlp : attn) * A;           /* d_res, d_ln, d_work */
    b += 3 * T * sizeof(int32_t) + (T + 1) * sizeof(int32_t);         /* tokens, pos, targets, cu_seqlens */
    return b;
}

size_t mem_plan_gen_acts(const model_config *c, int max_tokens, int max_rows, size_t A) {
    const size_t T = max_tokens > 0 ? (size_t)max_tokens : 0, R = max_rows > 0 ? (size_t)max_rows : 0;
    const size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    const size_t TF = T < GEN_FUSED_QKV_TOKENS ? T : GEN_FUSED_QKV_TOKENS;
    size_t b = 2 * T * C * A + T * (Q + 2 * KV) * A;                  /* x, ln, qkv */
    if (TF > 1) b += TF * (Q + 2 * KV) * A;                           /* qkv_fused */
    b += T * (Q + KV) * A + T * Q * A + T * 3 * I * A;                /* qk, att, gu, h */
    b += 2 * T * (size_t)c->n_heads * sizeof(float);                  /* rstd, lse */
    b += 2 * R * C * A + R * (size_t)c->vocab_size * sizeof(float);   /* xs, lnf, logits */
    return b;
}

/* Sums over the flat parameter units at world size w (shard.h). */
typedef struct {
    size_t shard;   /* elements a rank owns */
    size_t padded;  /* elements of every unit gathered whole, padding included */
    size_t largest; /* the largest padded unit */
    size_t working; /* what zero.c keeps gathered in the train phase: the
                     * embedding, final norm and lm head for the whole step,
                     * and two layer slots */
} unit_sums;

static unit_sums units_at(const model_config *mc, int w) {
    param_layout pl;
    param_layout_init(&pl, mc);
    const size_t n[4] = {pl.embed_size, pl.layer_size, pl.final_norm_size, pl.lm_head_size};
    const size_t count[4] = {1, (size_t)mc->n_layers, 1, 1};
    unit_sums u = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (!n[i]) continue; /* the lm head of a tied model */
        u.shard += count[i] * shard_len(n[i], w);
        u.padded += count[i] * shard_padded(n[i], w);
        if (shard_padded(n[i], w) > u.largest) u.largest = shard_padded(n[i], w);
        u.working += (i == 1 ? 2 : 1) * shard_padded(n[i], w);
    }
    return u;
}

/* The most sequences a rank holds: RL splits the step's tasks over the
 * ranks (rl_gather_task_range), each with its n_samples rollouts; SFT its
 * sequences. */
static int rank_seqs(const dk_config *cfg, int world) {
    const int B = cfg->train.batch_size;
    if (cfg->run.mode != DK_MODE_RL || cfg->rl.n_samples < 1) return (B + world - 1) / world;
    const int S = cfg->rl.n_samples, tasks = B / S;
    return (tasks + world - 1) / world * S;
}

/* The rank's micro-batch in tokens: trainer/micro_batch.h over the rank's
 * share of the step's sequences (all of them at world 1). */
static dk_status rank_train_tokens(const dk_config *cfg, int world, int *out) {
    const int B = cfg->train.batch_size, per_rank = rank_seqs(cfg, world);
    long tokens;
    if (cfg->run.mode == DK_MODE_EVAL) tokens = cfg->data.max_length; /* eval_run: one sequence */
    else tokens = micro_plan_make(cfg, per_rank, cfg->run.mode == DK_MODE_RL ? cfg->rl.mini_batches : 1).max_tokens;
    if (tokens > INT_MAX)
        return dk_fail(DK_ERR_USAGE,
                       "memory plan: a micro-batch of %ld tokens per rank ([train] batch_size %d / world %d / "
                       "grad_accum %d x [data] max_length %d) is more than a batch can hold; set [train] "
                       "micro_batch_tokens",
                       tokens, B, world, cfg->train.grad_accum, cfg->data.max_length);
    *out = (int)tokens;
    return DK_OK;
}

static void put(mem_plan *p, mem_row r, size_t bytes, int train, int rollout) {
    p->bytes[r][MEM_TRAIN] = train && p->has_phase[MEM_TRAIN] ? bytes : 0;
    p->bytes[r][MEM_ROLLOUT] = rollout && p->has_phase[MEM_ROLLOUT] ? bytes : 0;
}

dk_status mem_plan_make(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, dk_device device,
                        size_t gpu_bytes, int train_tokens) {
    return mem_plan_make_ex(p, cfg, mc, world, world > 1, device, gpu_bytes, train_tokens);
}

/* recompute = auto: the plans of the faster modes, kept where one fits
 * without costing the KV cache (mem_plan.h). */
static dk_status plan_auto(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                           dk_device device, size_t gpu_bytes, int train_tokens) {
    dk_config c = *cfg; /* read-only: its strings stay cfg's */
    mem_plan floor;
    c.train.recompute = MODEL_RECOMPUTE_LAYER;
    DK_TRY(mem_plan_make_ex(&floor, &c, mc, world, sharded, device, gpu_bytes, train_tokens));
    const long want_kv = floor.kv_tokens < floor.kv_need_all ? floor.kv_tokens : floor.kv_need_all;
    static const model_recompute faster[2] = {MODEL_RECOMPUTE_NONE, MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION};
    char why[sizeof p->recompute_why] = "";
    for (int i = 0; i < 2; i++) {
        c.train.recompute = faster[i];
        DK_TRY(mem_plan_make_ex(p, &c, mc, world, sharded, device, gpu_bytes, train_tokens));
        const int kv_ok = !p->has_phase[MEM_ROLLOUT] || p->kv_tokens >= want_kv;
        if (p->fits && kv_ok) {
            p->recompute_auto = 1;
            snprintf(p->recompute_why, sizeof p->recompute_why, "%s", why[0] ? why : "the fastest mode fits");
            return DK_OK;
        }
        const size_t n = strlen(why);
        if (!p->fits)
            snprintf(why + n, sizeof why - n, "%s%s does not fit (peak %.2f GB)", n ? "; " : "",
                     model_recompute_names[faster[i]], (double)p->peak / 1e9);
        else
            snprintf(why + n, sizeof why - n, "%s%s leaves a KV cache of %ld tokens (layer: %ld)", n ? "; " : "",
                     model_recompute_names[faster[i]], p->kv_tokens, floor.kv_tokens);
    }
    *p = floor;
    p->recompute_auto = 1;
    snprintf(p->recompute_why, sizeof p->recompute_why, "%s", why);
    return DK_OK;
}

static dk_status plan_one(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                          dk_device device, size_t gpu_bytes, int train_tokens, int keep_logits);

dk_status mem_plan_make_ex(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                           dk_device device, size_t gpu_bytes, int train_tokens) {
    if (cfg->train.recompute == DK_RECOMPUTE_AUTO)
        return plan_auto(p, cfg, mc, world, sharded, device, gpu_bytes, train_tokens);
    DK_TRY(plan_one(p, cfg, mc, world, sharded, device, gpu_bytes, train_tokens, 0));
    /* Kept lm-head logits (model_keep_logits): where the plan fits with them
     * and they cost the rollouts no KV cache below every conversation at
     * full length (or what the cache held without them, if less). The CPU
     * backend gains nothing from them: its backward copies what it would
     * otherwise compute at the same cost order. */
    if (!cfg->train.keep_logits || device == DK_DEVICE_CPU || !p->has_phase[MEM_TRAIN] || !p->fits) return DK_OK;
    mem_plan k;
    DK_TRY(plan_one(&k, cfg, mc, world, sharded, device, gpu_bytes, train_tokens, 1));
    const long want_kv = p->kv_tokens < p->kv_need_all ? p->kv_tokens : p->kv_need_all;
    if (k.fits && (!k.has_phase[MEM_ROLLOUT] || k.kv_tokens >= want_kv)) *p = k;
    return DK_OK;
}

static dk_status plan_one(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                          dk_device device, size_t gpu_bytes, int train_tokens, int keep_logits) {
    memset(p, 0, sizeof *p);
    if (world < 1) return dk_fail(DK_ERR_USAGE, "memory plan: world size %d, must be at least 1", world);
    DK_TRY(model_config_validate(mc));
    const int rl = cfg->run.mode == DK_MODE_RL, eval = cfg->run.mode == DK_MODE_EVAL;
    p->world = world;
    p->sharded = sharded = sharded || world > 1;
    p->device = device;
    p->act_size = device == DK_DEVICE_CPU ? sizeof(float) : 2;
    p->gpu_bytes = gpu_bytes;
    p->margin_bytes = (size_t)(cfg->dist.margin_gb * 1e9);
    p->mode = cfg->run.mode;
    p->has_phase[MEM_TRAIN] = !eval;
    p->has_phase[MEM_ROLLOUT] = rl || eval;
    p->recompute = (model_recompute)cfg->train.recompute;
    p->max_length = cfg->data.max_length;
    p->n_params = model_config_n_params(mc);
    if (train_tokens > 0) p->train_tokens = train_tokens;
    else DK_TRY(rank_train_tokens(cfg, world, &p->train_tokens));

    const size_t A = p->act_size, F = sizeof(float);
    const unit_sums u = units_at(mc, world);
    p->largest_unit = u.largest;
    const int has_optim = !eval, gathers = sharded, cuda = device != DK_DEVICE_CPU;

    /* What every phase keeps. */
    put(p, MEM_PARAMS, u.shard * A, 1, 1);
    put(p, MEM_MASTER, has_optim && A != F ? u.shard * F : 0, 1, 1);
    put(p, MEM_ADAM_M, has_optim ? u.shard * F : 0, 1, 1);
    put(p, MEM_ADAM_V, has_optim ? u.shard * F : 0, 1, 1);
    put(p, MEM_GRADS, u.shard * F, 1, 1); /* model_create allocates them in every mode */
    put(p, MEM_BLASLT, cuda ? MEM_PLAN_BLASLT_BYTES : 0, 1, 1);
    put(p, MEM_CONTEXT, cuda ? MEM_PLAN_CONTEXT_BYTES : 0, 1, 1);

    /* The train phase: gather buffers and the model's activations. A
     * sharded RL run frees both for the rollout phase
     * (run_setup_train_release); a replica keeps its activations, whose
     * model owns the weights the engine reads. Eval never trains, but
     * model_create plans the activations all the same. */
    put(p, MEM_GATHER_PARAMS, gathers ? u.working * A : 0, 1, 0);
    put(p, MEM_GATHER_GRADS, gathers ? u.working * F : 0, 1, 0);
    put(p, MEM_ACTIVATIONS, mem_plan_model_acts(mc, p->train_tokens, p->recompute, A), 1, eval || !sharded);
    p->keep_logits = keep_logits;
    put(p, MEM_KEEP_LOGITS, keep_logits ? model_keep_logits_bytes(mc, p->train_tokens) : 0, 1, eval || !sharded);
    if (rl && cfg->rl.kl_coef > 0) {
        if (sharded) /* zero_keep_reference: act shards of its own */
            put(p, MEM_REFERENCE, u.shard * A, 1, 1);
        else /* rl_run: model_create(&ref, ..., recompute none) */
            put(p, MEM_REFERENCE,
                p->n_params * (A + F) + mem_plan_model_acts(mc, p->train_tokens, MODEL_RECOMPUTE_NONE, A), 1, 1);
    }

    /* The engine as rollout_session_init configures it for the rank's
     * conversations; its ops share the context's scratch with the model's. */
    gen_config gc;
    size_t scratch = model_scratch_bytes(mc, p->train_tokens);
    if (rl || eval) {
        p->rollout_seqs = rank_seqs(cfg, world);
        rollout_session_gen_config(cfg, mc, p->rollout_seqs, &gc);
        p->step_tokens = gc.max_step_tokens;
        if (gc.max_batch > gc.max_step_tokens)
            return dk_fail(DK_ERR_USAGE,
                           "memory plan: %d conversations per rank ([train] batch_size %d / world %d) exceed the "
                           "generation step of %d tokens (the smaller of [data] max_length and 4096)",
                           gc.max_batch, cfg->train.batch_size, world, gc.max_step_tokens);
        size_t gen_scratch = gen_scratch_bytes(mc, &gc, device);
        if (gen_scratch > scratch) scratch = gen_scratch;
    }
    if (cuda && scratch < CUDA_MIN_SCRATCH) scratch = CUDA_MIN_SCRATCH; /* kernels/memory.cu's floor */
    put(p, MEM_SCRATCH, scratch, 1, 1);

    if (rl || eval) {
        put(p, MEM_INFER_COPY, gathers ? u.padded * A : 0, 0, 1);
        put(p, MEM_GEN_ACTS, mem_plan_gen_acts(mc, gc.max_step_tokens, gc.max_batch, A), 0, 1);
        const size_t page = kv_cache_page_bytes(mc, gc.page_size, A);
        p->kv_token_bytes = kv_cache_page_bytes(mc, 1, A);
        p->kv_need_one = (long)((gc.max_context + gc.page_size - 1) / gc.page_size) * gc.page_size;
        p->kv_need_all = p->kv_need_one * p->rollout_seqs;
        /* Sized last, as gen_create sizes it when rollout_session_begin
         * creates the engine: whole pages of the CPU's cache_bytes
         * (rollout_session_gen_config), or on CUDA of rl.kv_cache_fraction
         * of what the rest of the phase leaves free. */
        size_t others = 0;
        for (int r = 0; r < MEM_ROWS; r++) others += p->bytes[r][MEM_ROLLOUT];
        const size_t free_b = gpu_bytes > others ? gpu_bytes - others : 0;
        const size_t budget =
            !cuda && gc.cache_bytes ? gc.cache_bytes : (size_t)(cfg->rl.kv_cache_fraction * (double)free_b);
        size_t pages = budget / page;
        put(p, MEM_KV_CACHE, pages * page, 0, 1);
        p->kv_tokens = (long)(pages * (size_t)gc.page_size);
    }

    for (int ph = 0; ph < MEM_PHASES; ph++) {
        for (int r = 0; r < MEM_ROWS; r++) p->total[ph] += p->bytes[r][ph];
        if (p->has_phase[ph] && (p->peak == 0 || p->total[ph] > p->peak)) {
            p->peak = p->total[ph];
            p->peak_phase = (mem_phase)ph;
        }
    }
    p->fits = p->peak + p->margin_bytes <= gpu_bytes && (!p->has_phase[MEM_ROLLOUT] || p->kv_tokens >= p->kv_need_one);
    return DK_OK;
}

const char *mem_plan_row_name(mem_row r) {
    static const char *names[MEM_ROWS] = {
        [MEM_PARAMS] = "parameter shard",
        [MEM_MASTER] = "fp32 master shard",
        [MEM_ADAM_M] = "AdamW m shard (fp32)",
        [MEM_ADAM_V] = "AdamW v shard (fp32)",
        [MEM_GRADS] = "gradient shard (fp32)",
        [MEM_GATHER_PARAMS] = "gathered parameters (ends + 2 layers)",
        [MEM_GATHER_GRADS] = "gathered gradients (same, fp32)",
        [MEM_ACTIVATIONS] = "activations",
        [MEM_KEEP_LOGITS] = "kept lm-head logits (fp32)",
        [MEM_SCRATCH] = "ops scratch (lm-head chunk)",
        [MEM_BLASLT] = "cuBLASLt workspace",
        [MEM_REFERENCE] = "KL reference policy",
        [MEM_INFER_COPY] = "inference copy of the weights",
        [MEM_GEN_ACTS] = "generation step buffers",
        [MEM_KV_CACHE] = "KV cache (share of what is free)",
        [MEM_CONTEXT] = "CUDA context and NCCL (estimate)",
    };
    return r >= 0 && r < MEM_ROWS ? names[r] : "?";
}
