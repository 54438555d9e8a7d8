/* test_model_hf.c: the decoder's forward and backward against Hugging Face
 * transformers, on the CPU backend, for the three families the config covers:
 * Qwen3 (q/k norm, head_dim != hidden / heads, untied), Qwen2-style (qkv
 * bias, tied embeddings) and Llama-style (no bias, one kv head).
 *
 * tests/make_model_fixtures.py saved each tiny random model with
 * save_pretrained and, for one packed batch of three sequences, HF's logits,
 * the mean cross-entropy and every parameter's gradient (HF names) in
 * reference.safetensors. Here each checkpoint goes through model_load_hf, and:
 *   - logits (final hidden x lm head) match to 1e-4 absolute,
 *   - the loss -mean(logprob) and per-token logprob / entropy (also at a
 *     temperature) match what HF's logits give,
 *   - the backward of loss = -mean(logprob) over valid targets gives every
 *     HF gradient to a relative error max|a-b| / max|b| <= 1e-3, mapped by
 *     HF name independently of the loader (gate_proj / up_proj are the two
 *     halves of w_gate_up),
 *   - recompute = layer and layer_keep_attention are bit-identical to none,
 *   - a second forward/backward without zeroing doubles the gradients. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"

#define LOGIT_TOL 1e-4
#define LOSS_TOL 1e-5
#define LOGPROB_TOL 1e-4
#define GRAD_REL_TOL 1e-3
#define ACCUM_REL_TOL 1e-6

static int failures;

static void check(int ok, const char *what, const char *fmt, ...) {
    if (!ok) {
        failures++;
        printf("FAIL %s: ", what);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
}

static float *read_ref(const st_reader *r, const char *name, size_t *n) {
    const st_tensor *t = safetensors_find(r, name);
    if (!t) {
        printf("FAIL: reference tensor '%s' missing\n", name);
        exit(1);
    }
    float *out = dk_malloc(t->numel * sizeof(float) + 1);
    safetensors_tensor_to_f32(t, out);
    if (n) *n = t->numel;
    return out;
}

static int32_t *to_i32(const float *x, size_t n) {
    int32_t *out = dk_malloc(n * sizeof(int32_t) + 1);
    for (size_t i = 0; i < n; i++) out[i] = (int32_t)lrintf(x[i]);
    return out;
}

/* Host copy of the model's fp32 gradients, laid out as params.h says. */
typedef struct {
    float *embed, **layers, *final_norm, *lm_head;
} host_grads;

static void grads_download(const model *m, host_grads *g) {
    const param_layout *pl = &m->layout;
    g->embed = dk_malloc(pl->embed_size * sizeof(float));
    ops_download(m->ctx, g->embed, m->grads.embed, pl->embed_size * sizeof(float));
    g->layers = dk_calloc((size_t)m->cfg.n_layers, sizeof(float *));
    for (int l = 0; l < m->cfg.n_layers; l++) {
        g->layers[l] = dk_malloc(pl->layer_size * sizeof(float));
        ops_download(m->ctx, g->layers[l], m->grads.layers[l], pl->layer_size * sizeof(float));
    }
    g->final_norm = dk_malloc(pl->final_norm_size * sizeof(float));
    ops_download(m->ctx, g->final_norm, m->grads.final_norm, pl->final_norm_size * sizeof(float));
    g->lm_head = NULL;
    if (pl->lm_head_size) {
        g->lm_head = dk_malloc(pl->lm_head_size * sizeof(float));
        ops_download(m->ctx, g->lm_head, m->grads.lm_head, pl->lm_head_size * sizeof(float));
    }
}

static void grads_free(host_grads *g, int n_layers) {
    free(g->embed);
    for (int l = 0; l < n_layers; l++) free(g->layers[l]);
    free(g->layers);
    free(g->final_norm);
    free(g->lm_head);
}

/* Where the HF tensor NAME lives in our gradients: a pointer and its element
 * count, or NULL when the name is not one of ours. The mapping is written
 * here from the HF module names, not taken from the loader, so a loader that
 * put a tensor in the wrong place fails this test. */
static float *hf_slice(const model *m, host_grads *g, const char *name, size_t *n) {
    const param_layout *pl = &m->layout;
    const size_t I = (size_t)m->cfg.intermediate_size, C = (size_t)m->cfg.hidden_size;
    if (!strcmp(name, "model.embed_tokens.weight")) return *n = pl->embed_size, g->embed;
    if (!strcmp(name, "model.norm.weight")) return *n = pl->final_norm_size, g->final_norm;
    if (!strcmp(name, "lm_head.weight")) return *n = pl->lm_head_size, g->lm_head;
    int l, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= m->cfg.n_layers)
        return NULL;
    const char *rest = name + used;
    static const struct {
        const char *hf;
        dk_layer_tensor t;
    } map[] = {
        {"input_layernorm.weight", P_ATTN_NORM},      {"self_attn.q_proj.weight", P_WQ},
        {"self_attn.k_proj.weight", P_WK},            {"self_attn.v_proj.weight", P_WV},
        {"self_attn.q_proj.bias", P_BQ},              {"self_attn.k_proj.bias", P_BK},
        {"self_attn.v_proj.bias", P_BV},              {"self_attn.q_norm.weight", P_Q_NORM},
        {"self_attn.k_norm.weight", P_K_NORM},        {"self_attn.o_proj.weight", P_WO},
        {"self_attn.o_proj.bias", P_BO},              {"post_attention_layernorm.weight", P_MLP_NORM},
        {"mlp.down_proj.weight", P_W_DOWN},
    };
    float *base = g->layers[l];
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(rest, map[i].hf)) return *n = pl->size[map[i].t], base + pl->off[map[i].t];
    if (!strcmp(rest, "mlp.gate_proj.weight")) return *n = I * C, base + pl->off[P_W_GATE_UP];
    if (!strcmp(rest, "mlp.up_proj.weight")) return *n = I * C, base + pl->off[P_W_GATE_UP] + I * C;
    return NULL;
}

typedef struct {
    float *logprob, *entropy, *logits;
    host_grads g;
} run_result;

/* Loads the checkpoint into a fresh model, runs forward (inv_temp 1) and the
 * backward of -mean(logprob), and downloads what the checks need. */
static model run_model(const char *dir, const model_config *cfg, ops_ctx *ctx, const model_batch *b,
                       const float *dlogprob_host, int recompute, int keep_logits, run_result *out) {
    model m;
    if (model_create(&m, cfg, ctx, b->T, recompute) || model_load_hf(&m, dir)) {
        printf("FAIL %s: %s\n", dir, dk_error());
        exit(1);
    }
    if (keep_logits) model_keep_logits(&m);
    const int T = b->T, V = cfg->vocab_size, C = cfg->hidden_size;
    if (model_forward(&m, b, 1.0f)) {
        printf("FAIL %s: forward: %s\n", dir, dk_error());
        exit(1);
    }
    out->logprob = dk_malloc((size_t)T * sizeof(float));
    out->entropy = dk_malloc((size_t)T * sizeof(float));
    ops_download(ctx, out->logprob, m.logprob, (size_t)T * sizeof(float));
    ops_download(ctx, out->entropy, m.entropy, (size_t)T * sizeof(float));
    void *logits_dev = ops_alloc(ctx, (size_t)T * V * ops_act_size(ctx));
    ops_matmul(ctx, logits_dev, 0, model_final_hidden(&m), model_lm_head_weight(&m), T, V, C, 0, 1, 1.0f, 0.0f);
    out->logits = dk_malloc((size_t)T * V * sizeof(float));
    ops_download_act(ctx, out->logits, logits_dev, (size_t)T * V);
    ops_free(ctx, logits_dev);

    ops_upload(ctx, m.dlogprob, dlogprob_host, (size_t)T * sizeof(float));
    model_zero_grad(&m);
    model_backward(&m, m.dlogprob, NULL);
    ops_sync(ctx);
    grads_download(&m, &out->g);
    return m;
}

/* The forward outputs of two runs, bit for bit. */
static int same_forward(const run_result *a, const run_result *b, size_t T, size_t V) {
    return !memcmp(a->logprob, b->logprob, T * sizeof(float)) && !memcmp(a->entropy, b->entropy, T * sizeof(float)) &&
           !memcmp(a->logits, b->logits, T * V * sizeof(float));
}

static void run_free(run_result *r, int n_layers) {
    free(r->logprob);
    free(r->entropy);
    free(r->logits);
    grads_free(&r->g, n_layers);
}

/* log softmax of row z[V] * inv_temp at target, and the entropy, in double. */
static void ref_logprob(const float *z, int V, int target, double inv_temp, double *logprob, double *entropy) {
    double mx = -INFINITY, s = 0, e = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, z[v] * inv_temp);
    for (int v = 0; v < V; v++) s += exp(z[v] * inv_temp - mx);
    double lse = mx + log(s);
    for (int v = 0; v < V; v++) {
        double lp = z[v] * inv_temp - lse;
        e -= exp(lp) * lp;
    }
    *logprob = target >= 0 ? z[target] * inv_temp - lse : 0.0;
    *entropy = e;
}

static int grads_equal(const model *m, const host_grads *a, const host_grads *b) {
    const param_layout *pl = &m->layout;
    if (memcmp(a->embed, b->embed, pl->embed_size * sizeof(float))) return 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (memcmp(a->layers[l], b->layers[l], pl->layer_size * sizeof(float))) return 0;
    if (memcmp(a->final_norm, b->final_norm, pl->final_norm_size * sizeof(float))) return 0;
    if (pl->lm_head_size && memcmp(a->lm_head, b->lm_head, pl->lm_head_size * sizeof(float))) return 0;
    return 1;
}

static void test_family(const char *root, const char *name) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", root, name);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);

    model_config cfg;
    if (model_config_from_hf(dir, &cfg)) {
        printf("FAIL %s: %s\n", name, dk_error());
        failures++;
        return;
    }
    printf("== %s: arch=%s V=%d C=%d I=%d L=%d Hq=%d Hkv=%d D=%d theta=%g eps=%g tied=%d qkv_bias=%d qk_norm=%d\n",
           name, model_arch_name(cfg.arch), cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.n_layers,
           cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, (double)cfg.rope_theta, (double)cfg.rms_eps,
           cfg.tie_embeddings, cfg.qkv_bias, cfg.qk_norm);

    st_reader ref;
    if (safetensors_open(&ref, path)) {
        printf("FAIL %s: %s\n", name, dk_error());
        failures++;
        return;
    }
    size_t T, n_cu, n_logits;
    float *f_tokens = read_ref(&ref, "tokens", &T), *f_pos = read_ref(&ref, "positions", NULL);
    float *f_cu = read_ref(&ref, "cu_seqlens", &n_cu), *f_tgt = read_ref(&ref, "targets", NULL);
    float *ref_logits = read_ref(&ref, "logits", &n_logits), *ref_loss = read_ref(&ref, "loss", NULL);
    const int V = cfg.vocab_size;
    if (n_logits != T * (size_t)V) {
        printf("FAIL %s: reference logits hold %zu values, expected T x V = %zu\n", name, n_logits, T * V);
        exit(1);
    }
    int32_t *tokens = to_i32(f_tokens, T), *pos = to_i32(f_pos, T), *cu = to_i32(f_cu, n_cu);
    int32_t *targets = to_i32(f_tgt, T);
    model_batch b = {.T = (int)T, .n_seqs = (int)n_cu - 1, .tokens = tokens, .pos = pos, .cu_seqlens = cu,
                     .targets = targets};
    int n_valid = 0;
    for (size_t t = 0; t < T; t++) n_valid += targets[t] >= 0;
    float *dlogprob = dk_malloc(T * sizeof(float));
    for (size_t t = 0; t < T; t++) dlogprob[t] = targets[t] >= 0 ? -1.0f / (float)n_valid : 0.0f;

    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&cfg, (int)T))) {
        printf("FAIL %s: %s\n", name, dk_error());
        exit(1);
    }

    run_result r0, r1;
    model m = run_model(dir, &cfg, &ctx, &b, dlogprob, 0, 0, &r0);

    /* Logits, loss, per-token logprob and entropy. */
    double logit_diff = 0, lp_diff = 0, ent_diff = 0, loss = 0;
    for (size_t i = 0; i < T * (size_t)V; i++) logit_diff = fmax(logit_diff, fabs(r0.logits[i] - ref_logits[i]));
    for (size_t t = 0; t < T; t++) {
        double lp, ent;
        ref_logprob(ref_logits + t * V, V, targets[t], 1.0, &lp, &ent);
        lp_diff = fmax(lp_diff, fabs(r0.logprob[t] - lp));
        ent_diff = fmax(ent_diff, fabs(r0.entropy[t] - ent));
        if (targets[t] >= 0) loss -= r0.logprob[t];
    }
    loss /= n_valid;
    double loss_diff = fabs(loss - ref_loss[0]);
    printf("  forward: T=%zu seqs=%d valid=%d  max|logits-hf|=%.3g  loss=%.6f hf=%.6f |diff|=%.3g  "
           "max|logprob-hf|=%.3g  max|entropy-hf|=%.3g\n",
           T, b.n_seqs, n_valid, logit_diff, loss, (double)ref_loss[0], loss_diff, lp_diff, ent_diff);
    check(logit_diff <= LOGIT_TOL, name, "logits differ by %g > %g", logit_diff, LOGIT_TOL);
    check(loss_diff <= LOSS_TOL, name, "loss differs by %g > %g", loss_diff, LOSS_TOL);
    check(lp_diff <= LOGPROB_TOL, name, "logprob differs by %g > %g", lp_diff, LOGPROB_TOL);
    check(ent_diff <= LOGPROB_TOL, name, "entropy differs by %g > %g", ent_diff, LOGPROB_TOL);

    /* Gradients, tensor by tensor under HF names. */
    size_t compared = 0;
    double worst = 0;
    const char *worst_name = "";
    printf("  gradients (relative error max|ours-hf| / max|hf|):\n");
    for (int i = 0; i < ref.n_tensors; i++) {
        const st_tensor *t = &ref.tensors[i];
        if (strncmp(t->name, "grad.", 5)) continue;
        const char *hf = t->name + 5;
        size_t n = 0;
        float *ours = hf_slice(&m, &r0.g, hf, &n);
        if (!ours || n != t->numel) {
            check(0, name, "HF gradient %s (%zu values) has no counterpart of that size", hf, t->numel);
            continue;
        }
        float *theirs = dk_malloc(n * sizeof(float));
        safetensors_tensor_to_f32(t, theirs);
        double dmax = 0, bmax = 0;
        for (size_t k = 0; k < n; k++) {
            dmax = fmax(dmax, fabs(ours[k] - theirs[k]));
            bmax = fmax(bmax, fabs(theirs[k]));
        }
        double rel = bmax > 0 ? dmax / bmax : dmax;
        printf("    %-45s %6zu  rel %.3g  (max|hf| %.3g)\n", hf, n, rel, bmax);
        check(bmax > 0, name, "HF gradient %s is all zero: the fixture does not exercise it", hf);
        check(rel <= GRAD_REL_TOL, name, "gradient %s: relative error %g > %g", hf, rel, GRAD_REL_TOL);
        if (rel > worst) worst = rel, worst_name = t->name + 5;
        compared += n;
        free(theirs);
    }
    const param_layout *pl = &m.layout;
    size_t total = pl->embed_size + (size_t)cfg.n_layers * pl->layer_size + pl->final_norm_size + pl->lm_head_size;
    check(compared == total, name, "compared %zu gradient values, the model has %zu", compared, total);
    printf("  gradients: %zu values compared, worst %s rel %.3g\n", compared, worst_name, worst);

    /* Recompute must not change a single bit. */
    model m1 = run_model(dir, &cfg, &ctx, &b, dlogprob, MODEL_RECOMPUTE_LAYER, 0, &r1);
    int same_fwd = same_forward(&r0, &r1, T, V);
    int same_grad = grads_equal(&m, &r0.g, &r1.g);
    printf("  recompute: forward %s, gradients %s; device bytes %zu (off) vs %zu (on)\n",
           same_fwd ? "bit-identical" : "DIFFERENT", same_grad ? "bit-identical" : "DIFFERENT",
           model_device_bytes(&m), model_device_bytes(&m1));
    check(same_fwd && same_grad, name, "recompute = 1 differs from recompute = 0");

    /* Keeping the attention outputs: the backward re-runs every layer but
     * the attention, and must not change a bit either. */
    run_result r2;
    model m2 = run_model(dir, &cfg, &ctx, &b, dlogprob, MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION, 0, &r2);
    int same_fwd2 = same_forward(&r0, &r2, T, V);
    int same_grad2 = grads_equal(&m, &r0.g, &r2.g);
    printf("  recompute keeping attention: forward %s, gradients %s; device bytes %zu\n",
           same_fwd2 ? "bit-identical" : "DIFFERENT", same_grad2 ? "bit-identical" : "DIFFERENT",
           model_device_bytes(&m2));
    check(same_fwd2 && same_grad2, name, "recompute = layer_keep_attention differs from recompute = none");
    check(model_device_bytes(&m1) < model_device_bytes(&m2) && model_device_bytes(&m2) < model_device_bytes(&m), name,
          "recompute keeping attention should need more memory than layer and less than none (%zu, %zu, %zu)",
          model_device_bytes(&m1), model_device_bytes(&m2), model_device_bytes(&m));
    run_free(&r2, cfg.n_layers);
    model_free(&m2);

    /* Logits kept from the forward: the lm head's backward reads them
     * instead of recomputing them, the same numbers in the same order on
     * this backend, so not a bit may change; and a second backward of the
     * same forward (the kept logits are spent) must recompute and match. */
    run_result r3;
    model m3 = run_model(dir, &cfg, &ctx, &b, dlogprob, MODEL_RECOMPUTE_NONE, 1, &r3);
    int same_fwd3 = same_forward(&r0, &r3, T, V), same_grad3 = grads_equal(&m, &r0.g, &r3.g);
    check(model_device_bytes(&m3) == model_device_bytes(&m) + model_keep_logits_bytes(&cfg, T), name,
          "kept logits: device bytes %zu, expected %zu + %zu", model_device_bytes(&m3), model_device_bytes(&m),
          model_keep_logits_bytes(&cfg, T));
    model_zero_grad(&m3);
    model_backward(&m3, m3.dlogprob, NULL);
    ops_sync(&ctx);
    host_grads again;
    grads_download(&m3, &again);
    int same_again = grads_equal(&m, &r0.g, &again);
    printf("  logits kept: forward %s, gradients %s, second backward %s\n", same_fwd3 ? "bit-identical" : "DIFFERENT",
           same_grad3 ? "bit-identical" : "DIFFERENT", same_again ? "bit-identical" : "DIFFERENT");
    check(same_fwd3 && same_grad3 && same_again, name, "kept lm-head logits change the forward or the gradients");
    grads_free(&again, cfg.n_layers);
    run_free(&r3, cfg.n_layers);
    model_free(&m3);

    /* Accumulation: one more forward/backward without zeroing doubles the
     * gradients (checked on the recompute model, whose shared activations
     * are overwritten by the new forward). */
    if (model_forward(&m1, &b, 1.0f)) {
        printf("FAIL %s: forward: %s\n", name, dk_error());
        exit(1);
    }
    ops_upload(&ctx, m1.dlogprob, dlogprob, T * sizeof(float));
    model_backward(&m1, m1.dlogprob, NULL);
    host_grads g2;
    grads_download(&m1, &g2);
    double acc_d = 0, acc_b = 0;
    for (size_t k = 0; k < pl->embed_size; k++) {
        acc_d = fmax(acc_d, fabs(g2.embed[k] - 2.0 * r1.g.embed[k]));
        acc_b = fmax(acc_b, fabs(2.0 * r1.g.embed[k]));
    }
    for (int l = 0; l < cfg.n_layers; l++)
        for (size_t k = 0; k < pl->layer_size; k++) {
            acc_d = fmax(acc_d, fabs(g2.layers[l][k] - 2.0 * r1.g.layers[l][k]));
            acc_b = fmax(acc_b, fabs(2.0 * r1.g.layers[l][k]));
        }
    double acc_rel = acc_b > 0 ? acc_d / acc_b : acc_d;
    printf("  accumulation: two backwards vs 2 x one, rel %.3g\n", acc_rel);
    check(acc_rel <= ACCUM_REL_TOL, name, "accumulated gradients off by %g", acc_rel);
    grads_free(&g2, cfg.n_layers);

    /* Temperature: logprob and entropy of softmax(logits * inv_temp). */
    const float inv_temp = 1.0f / 0.7f;
    if (model_forward(&m, &b, inv_temp)) {
        printf("FAIL %s: forward: %s\n", name, dk_error());
        exit(1);
    }
    float *lp_t = dk_malloc(T * sizeof(float)), *ent_t = dk_malloc(T * sizeof(float));
    ops_download(&ctx, lp_t, m.logprob, T * sizeof(float));
    ops_download(&ctx, ent_t, m.entropy, T * sizeof(float));
    double tlp = 0, tent = 0;
    for (size_t t = 0; t < T; t++) {
        double lp, ent;
        ref_logprob(ref_logits + t * V, V, targets[t], inv_temp, &lp, &ent);
        tlp = fmax(tlp, fabs(lp_t[t] - lp));
        tent = fmax(tent, fabs(ent_t[t] - ent));
    }
    printf("  temperature 0.7: max|logprob-hf|=%.3g  max|entropy-hf|=%.3g\n", tlp, tent);
    check(tlp <= LOGPROB_TOL && tent <= LOGPROB_TOL, name, "tempered logprob/entropy differ by %g / %g", tlp, tent);

    free(lp_t);
    free(ent_t);
    run_free(&r0, cfg.n_layers);
    run_free(&r1, cfg.n_layers);
    model_free(&m);
    model_free(&m1);
    ops_ctx_free(&ctx);
    safetensors_close(&ref);
    free(f_tokens), free(f_pos), free(f_cu), free(f_tgt), free(ref_logits), free(ref_loss);
    free(tokens), free(pos), free(cu), free(targets), free(dlogprob);
}

/* Bad batches fail with a message instead of reaching the ops. */
static void test_bad_batches(const char *root) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/llama", root);
    model_config cfg;
    if (model_config_from_hf(dir, &cfg)) return; /* reported by test_family */
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&cfg, 8))) exit(1);
    model m;
    if (model_create(&m, &cfg, &ctx, 8, 0)) {
        printf("FAIL bad batches: %s\n", dk_error());
        exit(1);
    }
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, cu_ok[2] = {0, 4}, cu_bad[3] = {0, 3, 2}, big[4] = {1, 2, 999, 3};
    struct {
        const char *what;
        model_batch b;
    } cases[] = {
        {"too many tokens", {.T = 9, .n_seqs = 1, .tokens = tok, .cu_seqlens = (int32_t[]){0, 9}}},
        {"cu_seqlens not ending at T", {.T = 3, .n_seqs = 1, .tokens = tok, .cu_seqlens = cu_ok}},
        {"cu_seqlens decreasing", {.T = 2, .n_seqs = 2, .tokens = tok, .cu_seqlens = cu_bad}},
        {"token outside the vocabulary", {.T = 4, .n_seqs = 1, .tokens = big, .cu_seqlens = cu_ok}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dk_status s = model_forward(&m, &cases[i].b, 1.0f);
        printf("  bad batch (%s): %s\n", cases[i].what, s ? dk_error() : "accepted");
        check(s == DK_ERR_USAGE, "bad batch", "%s was accepted", cases[i].what);
    }
    /* Positions default to restarting per sequence: same as giving them. */
    int32_t cu2[3] = {0, 3, 8}, pos2[8] = {0, 1, 2, 0, 1, 2, 3, 4}, tgt[8] = {2, 3, -1, 5, 6, 7, 8, -1};
    model_batch with = {.T = 8, .n_seqs = 2, .tokens = tok, .pos = pos2, .cu_seqlens = cu2, .targets = tgt};
    model_batch without = with;
    without.pos = NULL;
    float a[8], b[8];
    model_init_random(&m, 7, 0.1f);
    if (model_forward(&m, &with, 1.0f)) exit(1);
    ops_download(&ctx, a, m.logprob, sizeof a);
    if (model_forward(&m, &without, 1.0f)) exit(1);
    ops_download(&ctx, b, m.logprob, sizeof b);
    check(!memcmp(a, b, sizeof a), "default positions", "pos = NULL differs from explicit per-sequence positions");
    model_free(&m);
    ops_ctx_free(&ctx);
}

/* model_save_hf writes a checkpoint that model_config_from_hf and
 * model_load_hf read back into the same model: same config, and a forward
 * with bit-identical logprobs (saved as fp32). */
static void test_save_roundtrip(const char *root) {
    char dir[1024], out[] = "/tmp/dk_model_save_XXXXXX";
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/qwen3", root);
    if (!mkdtemp(out)) {
        printf("FAIL save: mkdtemp\n");
        failures++;
        return;
    }
    model_config cfg, cfg2;
    if (model_config_from_hf(dir, &cfg)) return; /* reported by test_family */
    ops_ctx ctx;
    model a, b;
    int32_t tok[6] = {5, 17, 3, 88, 42, 9}, cu[3] = {0, 2, 6}, tgt[6] = {17, -1, 88, 42, 9, -1};
    model_batch batch = {.T = 6, .n_seqs = 2, .tokens = tok, .cu_seqlens = cu, .targets = tgt};
    float la[6], lb[6];
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&cfg, 6)) || model_create(&a, &cfg, &ctx, 6, 0) ||
        model_load_hf(&a, dir) || model_save_hf(&a, out, "fp32") || model_config_from_hf(out, &cfg2) ||
        model_create(&b, &cfg2, &ctx, 6, 0) || model_load_hf(&b, out) || model_forward(&a, &batch, 1.0f)) {
        printf("FAIL save: %s\n", dk_error());
        failures++;
        return;
    }
    ops_download(&ctx, la, a.logprob, sizeof la);
    if (model_forward(&b, &batch, 1.0f)) exit(1);
    ops_download(&ctx, lb, b.logprob, sizeof lb);
    int same_cfg = !memcmp(&cfg, &cfg2, sizeof cfg), same = !memcmp(la, lb, sizeof la);
    printf("  save/load round trip (%s): config %s, logprobs %s\n", out, same_cfg ? "same" : "DIFFERENT",
           same ? "bit-identical" : "DIFFERENT");
    check(same_cfg, "save", "config.json written by model_save_hf reads back differently");
    check(same, "save", "reloaded checkpoint gives different logprobs");
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char f[1100];
        snprintf(f, sizeof f, "%s/%s", out, files[i]);
        remove(f);
    }
    if (rmdir(out) != 0) printf("  (%s holds more than config.json and model.safetensors; left in place)\n", out);
    model_free(&a);
    model_free(&b);
    ops_ctx_free(&ctx);
}

int main(void) {
    const char *root = getenv("DK_SOURCE");
    if (!root || !*root) root = ".";
    test_family(root, "qwen3");
    test_family(root, "qwen2");
    test_family(root, "llama");
    test_bad_batches(root);
    test_save_roundtrip(root);
    if (failures) {
        printf("test_model_hf: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_model_hf: ok\n");
    return 0;
}
