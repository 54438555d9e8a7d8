/* test_cuda_model.c: the whole decoder on the CUDA backend against the CPU
 * backend, for two tiny configurations that between them use every op of
 * the training forward and backward:
 *   - Qwen3-style: per-head q/k RMSNorm, untied lm head, GQA 4:2, D = 64;
 *   - Qwen2-style: q/k/v biases, tied embeddings, GQA 2:1, D = 64;
 * on one packed batch of four sequences (one of a single token), some
 * targets masked, at temperature 0.8, with the RL-style loss
 *   L = sum_t u_t * logprob_t + w_t * entropy_t.
 * The CUDA model is initialised (model_init_random, then norm weights and
 * biases perturbed so their gradients are not trivial), and its bf16 weights
 * are copied exactly into the CPU model, so both compute from the same
 * parameter values; the difference is the CUDA backend's bf16 activations
 * and its summation orders.
 *
 * Checks and tolerances (measured on an H200: logprob <= 0.06, entropy
 * <= 0.032, gradients 1.0e-2 .. 2.8e-2 relative L2 with cosine >= 0.9997):
 *   - per-token logprob and entropy: |cuda - cpu| <= 0.15 (logits here have
 *     a spread of a few units; bf16 activations through two layers and the
 *     lm head move a logprob of ~-6 by up to ~1%); a wrong rotation, mask or
 *     scale moves them by O(1);
 *   - every parameter gradient: relative L2 error |g - g_cpu| / |g_cpu|
 *     <= 0.06 and cosine similarity >= 0.998 per tensor (bf16 rounding of
 *     the activations and of the backward's act buffers gives 1-3e-2; a
 *     wrong or missing term gives O(1));
 *   - determinism: a second identical forward + backward gives bit-identical
 *     gradients, logprobs and entropies, and so do models with per-layer
 *     recomputation (recompute = layer, and layer keeping the attention
 *     outputs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tests/check.h"

#define LOGPROB_TOL 0.15
#define GRAD_REL_TOL 0.06
#define GRAD_COS_MIN 0.998

static const model_config cfg_qwen3 = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 384, .hidden_size = 128, .intermediate_size = 256, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .max_position = 512, .rope_theta = 1000000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 0, .qkv_bias = 0, .o_bias = 0, .qk_norm = 1,
    .bos_token_id = -1, .eos_token_id = -1,
};

static const model_config cfg_qwen2 = {
    .arch = DK_ARCH_QWEN2, .vocab_size = 300, .hidden_size = 128, .intermediate_size = 352, .n_layers = 2,
    .n_heads = 2, .n_kv_heads = 1, .head_dim = 64, .max_position = 512, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qkv_bias = 1, .o_bias = 0, .qk_norm = 0,
    .bos_token_id = -1, .eos_token_id = -1,
};

enum { T = 203, N_SEQS = 4 };
static const int32_t cu_seqlens[N_SEQS + 1] = {0, 90, 91, 160, T};

static uint32_t lcg = 2024;
static float uniform_pm1(void) {
    lcg = lcg * 1664525u + 1013904223u;
    return (float)((lcg >> 8) % 2001) / 1000.0f - 1.0f;
}

/* Every parameter buffer of a model with its element count. */
typedef struct {
    void *p[64];
    float *g[64];
    size_t n[64];
    char name[64][48];
    int count;
} buffer_list;

static void list_buffers(model *m, buffer_list *b) {
    const param_layout *pl = &m->layout;
    b->count = 0;
#define ADD(ptr, grad, len, label)                                             \
    do {                                                                       \
        b->p[b->count] = (ptr);                                                \
        b->g[b->count] = (grad);                                               \
        b->n[b->count] = (len);                                                \
        snprintf(b->name[b->count], sizeof b->name[0], "%s", label);           \
        b->count++;                                                            \
    } while (0)
    ADD(m->params.embed, (float *)m->grads.embed, pl->embed_size, "embed");
    ADD(m->params.final_norm, (float *)m->grads.final_norm, pl->final_norm_size, "final_norm");
    if (pl->lm_head_size) ADD(m->params.lm_head, (float *)m->grads.lm_head, pl->lm_head_size, "lm_head");
    const size_t A = ops_act_size(m->ctx);
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            if (!pl->size[t]) continue;
            char label[48];
            snprintf(label, sizeof label, "layer %d %s", l, param_layer_tensor_name((dk_layer_tensor)t));
            ADD((char *)m->params.layers[l] + pl->off[t] * A, (float *)m->grads.layers[l] + pl->off[t], pl->size[t],
                label);
        }
#undef ADD
}

/* Host copy of every gradient, concatenated in list order. */
static float *grads_host(model *m, const buffer_list *b, size_t *total) {
    size_t n = 0;
    for (int i = 0; i < b->count; i++) n += b->n[i];
    float *h = dk_malloc(n * sizeof(float)), *q = h;
    for (int i = 0; i < b->count; i++) {
        ops_download(m->ctx, q, b->g[i], b->n[i] * sizeof(float));
        q += b->n[i];
    }
    *total = n;
    return h;
}

typedef struct {
    float lp[T], ent[T];
    float *grads;
    size_t n_grads;
} pass_result;

static int32_t tokens[T], targets[T];
static float dlp[T], dent[T];

static void forward_backward(model *m, const buffer_list *b, pass_result *r) {
    model_batch batch = {.T = T, .n_seqs = N_SEQS, .tokens = tokens, .cu_seqlens = cu_seqlens, .targets = targets};
    if (model_forward(m, &batch, 1.0f / 0.8f) != DK_OK) {
        printf("FAIL model_forward: %s\n", dk_error());
        exit(1);
    }
    ops_download(m->ctx, r->lp, m->logprob, sizeof r->lp);
    ops_download(m->ctx, r->ent, m->entropy, sizeof r->ent);
    ops_upload(m->ctx, m->dlogprob, dlp, sizeof dlp);
    ops_upload(m->ctx, m->dentropy, dent, sizeof dent);
    model_zero_grad(m);
    model_backward(m, m->dlogprob, m->dentropy);
    r->grads = grads_host(m, b, &r->n_grads);
}

static void run_config(const char *label, const model_config *cfg) {
    printf("== %s\n", label);
    for (int t = 0; t < T; t++) {
        tokens[t] = (int32_t)((uniform_pm1() + 1.0f) * 0.5f * (cfg->vocab_size - 1));
        dlp[t] = uniform_pm1();
        dent[t] = uniform_pm1();
    }
    for (int s = 0; s < N_SEQS; s++)
        for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; t++)
            targets[t] = t + 1 < cu_seqlens[s + 1] ? tokens[t + 1] : -1;
    for (int t = 5; t < T; t += 17) targets[t] = -1; /* masked tokens inside sequences */
    for (int t = 0; t < T; t++)
        if (targets[t] < 0) dlp[t] = dent[t] = 0.0f;

    size_t scratch = model_scratch_bytes(cfg, T);
    ops_ctx cpu, gpu;
    model mc, mg, mr, mk;
    if (ops_ctx_init(&cpu, DK_DEVICE_CPU, 0, scratch) || ops_ctx_init(&gpu, DK_DEVICE_CUDA, 0, scratch) ||
        model_create(&mc, cfg, &cpu, T, 0) || model_create(&mg, cfg, &gpu, T, 0) ||
        model_create(&mr, cfg, &gpu, T, MODEL_RECOMPUTE_LAYER) ||
        model_create(&mk, cfg, &gpu, T, MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION)) {
        printf("FAIL setup: %s\n", dk_error());
        exit(1);
    }
    model_init_random(&mg, 77, 0.1f);
    buffer_list bc, bg, br, bk;
    list_buffers(&mc, &bc);
    list_buffers(&mg, &bg);
    list_buffers(&mr, &br);
    list_buffers(&mk, &bk);
    /* Perturb norm weights and biases on the CUDA model, then copy its exact
     * bf16 values to the CPU model and to the recomputing CUDA models. */
    for (int i = 0; i < bg.count; i++) {
        float *h = dk_malloc(bg.n[i] * sizeof(float));
        ops_download_act(&gpu, h, bg.p[i], bg.n[i]);
        int vector = strstr(bg.name[i], "norm") || strstr(bg.name[i], " b");
        if (vector)
            for (size_t k = 0; k < bg.n[i]; k++) h[k] += 0.3f * uniform_pm1();
        ops_upload_act(&gpu, bg.p[i], h, bg.n[i]);
        ops_download_act(&gpu, h, bg.p[i], bg.n[i]); /* the bf16 values */
        ops_upload_act(&cpu, bc.p[i], h, bc.n[i]);
        ops_upload_act(&gpu, br.p[i], h, br.n[i]);
        ops_upload_act(&gpu, bk.p[i], h, bk.n[i]);
        ops_sync(&gpu);
        free(h);
    }

    pass_result rc, rg, rg2, rr, rk;
    forward_backward(&mc, &bc, &rc);
    forward_backward(&mg, &bg, &rg);
    forward_backward(&mg, &bg, &rg2);
    forward_backward(&mr, &br, &rr);
    forward_backward(&mk, &bk, &rk);

    double dlp_max = 0.0, dent_max = 0.0, dlp_mean = 0.0;
    for (int t = 0; t < T; t++) {
        dlp_max = fmax(dlp_max, fabs((double)rg.lp[t] - rc.lp[t]));
        dent_max = fmax(dent_max, fabs((double)rg.ent[t] - rc.ent[t]));
        dlp_mean += fabs((double)rg.lp[t] - rc.lp[t]) / T;
        if (targets[t] < 0) CHECK(rg.lp[t] == 0.0f, "%s: masked token %d has logprob %g", label, t, rg.lp[t]);
    }
    printf("  logprob max |cuda - cpu| %.3g (mean %.3g), entropy max %.3g (tolerance %g)\n", dlp_max, dlp_mean,
           dent_max, LOGPROB_TOL);
    CHECK(dlp_max <= LOGPROB_TOL && dent_max <= LOGPROB_TOL, "%s: logprob diff %.3g, entropy diff %.3g", label,
          dlp_max, dent_max);

    double worst = 0.0;
    size_t off = 0;
    for (int i = 0; i < bg.count; i++) {
        const float *a = rg.grads + off, *c = rc.grads + off;
        double num = 0.0, den = 0.0, dot = 0.0, na = 0.0;
        for (size_t k = 0; k < bg.n[i]; k++) {
            double d = (double)a[k] - c[k];
            num += d * d;
            den += (double)c[k] * c[k];
            dot += (double)a[k] * c[k];
            na += (double)a[k] * a[k];
        }
        double rel = sqrt(num) / (sqrt(den) > 0 ? sqrt(den) : 1.0);
        double cosv = dot / (sqrt(na * den) > 0 ? sqrt(na * den) : 1.0);
        printf("  %-20s n=%7zu |g_cpu| %.3e  rel L2 %.2e  cos %.6f%s\n", bg.name[i], bg.n[i], sqrt(den), rel, cosv,
               rel <= GRAD_REL_TOL && cosv >= GRAD_COS_MIN && den > 0 ? "" : "  FAIL");
        CHECK(rel <= GRAD_REL_TOL && cosv >= GRAD_COS_MIN && den > 0,
              "%s: gradient of %s: relative L2 error %.3g, cosine %.6f (|g_cpu| = %.3g)", label, bg.name[i], rel, cosv,
              sqrt(den));
        worst = fmax(worst, rel);
        off += bg.n[i];
    }
    printf("  worst gradient relative L2 error %.3g (tolerance %g, cosine >= %g)\n", worst, GRAD_REL_TOL,
           GRAD_COS_MIN);

    int same = memcmp(rg.grads, rg2.grads, rg.n_grads * sizeof(float)) == 0 &&
               memcmp(rg.lp, rg2.lp, sizeof rg.lp) == 0 && memcmp(rg.ent, rg2.ent, sizeof rg.ent) == 0;
    int same_r = memcmp(rg.grads, rr.grads, rg.n_grads * sizeof(float)) == 0 &&
                 memcmp(rg.lp, rr.lp, sizeof rg.lp) == 0;
    int same_k = memcmp(rg.grads, rk.grads, rg.n_grads * sizeof(float)) == 0 &&
                 memcmp(rg.lp, rk.lp, sizeof rg.lp) == 0;
    printf("  repeat bit-identical: %s; recompute = layer bit-identical: %s; layer keeping attention: %s\n",
           same ? "yes" : "NO", same_r ? "yes" : "NO", same_k ? "yes" : "NO");
    CHECK(same, "%s: two identical CUDA passes differ", label);
    CHECK(same_r, "%s: recompute = layer differs from recompute = none", label);
    CHECK(same_k, "%s: recompute = layer_keep_attention differs from recompute = none", label);

    free(rc.grads), free(rg.grads), free(rg2.grads), free(rr.grads), free(rk.grads);
    model_free(&mk);
    model_free(&mr);
    model_free(&mg);
    model_free(&mc);
    ops_ctx_free(&gpu);
    ops_ctx_free(&cpu);
}

int main(void) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("no CUDA GPU or no CUDA op table in this build: skipped\n");
        return 77;
    }
    run_config("qwen3-style (q/k norm, untied)", &cfg_qwen3);
    run_config("qwen2-style (qkv bias, tied)", &cfg_qwen2);
    if (failures) {
        printf("test_cuda_model: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_cuda_model: ok\n");
    return 0;
}
