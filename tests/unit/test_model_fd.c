/* test_model_fd.c: the decoder's backward against central finite differences
 * of its own forward, on the CPU backend, for what the Hugging Face fixtures
 * do not reach: every optional tensor at once (q/k/v bias, output bias, q/k
 * norm, tied embeddings), a head_dim that is neither a power of two nor
 * hidden / heads, a one-token sequence in the packed batch, a temperature,
 * and an RL-style loss that weights both per-token logprobs and entropies:
 *
 *   L = sum_t u_t * logprob_t + w_t * entropy_t   at inv_temp = 1 / 0.7
 *
 * over the tokens with a target (masked tokens carry no gradient, through
 * neither term, by the lm head's contract).
 *
 * For every parameter tensor the element with the largest analytic gradient
 * is perturbed by +-h and (L+ - L-) / 2h is compared with the gradient. The
 * forward is fp32: at h = 3e-3 rounding and curvature together stay near
 * 1e-3 relative, against a tolerance of 1e-2 (a wrong term is off by far
 * more: dropping the output-bias gradient or the temperature fails). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "model/model.h"

#define FD_STEP 3e-3
#define FD_REL_TOL 1e-2

static const model_config test_cfg = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 64, .hidden_size = 32, .intermediate_size = 40, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 12, .max_position = 64, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qkv_bias = 1, .o_bias = 1, .qk_norm = 1,
    .bos_token_id = -1, .eos_token_id = -1,
};

enum { T = 13, N_SEQS = 3 };
static const int32_t cu_seqlens[N_SEQS + 1] = {0, 6, 7, 13};
static int32_t tokens[T], targets[T];
static float u[T], w[T];
static const float inv_temp = 1.0f / 0.7f;

/* The loss of the current parameters, in double from the fp32 outputs. */
static double loss_of(model *m) {
    model_batch b = {.T = T, .n_seqs = N_SEQS, .tokens = tokens, .cu_seqlens = cu_seqlens, .targets = targets};
    if (model_forward(m, &b, inv_temp)) {
        printf("FAIL forward: %s\n", dk_error());
        exit(1);
    }
    float lp[T], ent[T];
    ops_download(m->ctx, lp, m->logprob, sizeof lp);
    ops_download(m->ctx, ent, m->entropy, sizeof ent);
    double L = 0;
    for (int t = 0; t < T; t++)
        if (targets[t] >= 0) L += (double)u[t] * lp[t] + (double)w[t] * ent[t];
    return L;
}

/* One parameter tensor: its act buffer (a view into a flat buffer) and its
 * fp32 gradient, both on the device. */
typedef struct {
    char name[64];
    void *param;
    float *grad;
    size_t n;
    int vector; /* norm weights and biases */
} tensor_view;

static int list_tensors(model *m, tensor_view *out) {
    const param_layout *pl = &m->layout;
    const size_t A = ops_act_size(m->ctx);
    int n = 0;
    out[n++] = (tensor_view){"embed (tied lm head)", m->params.embed, m->grads.embed, pl->embed_size, 0};
    out[n++] = (tensor_view){"final_norm", m->params.final_norm, m->grads.final_norm, pl->final_norm_size, 1};
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int t = 0; t < P_LAYER_COUNT; t++) {
            if (!pl->size[t]) continue;
            tensor_view *v = &out[n++];
            snprintf(v->name, sizeof v->name, "layer %d %s", l, param_layer_tensor_name((dk_layer_tensor)t));
            v->param = (char *)m->params.layers[l] + pl->off[t] * A;
            v->grad = (float *)m->grads.layers[l] + pl->off[t];
            v->n = pl->size[t];
            v->vector = pl->rows[t] == 1;
        }
    return n;
}

static float get_param(model *m, const tensor_view *v, size_t i) {
    float x;
    ops_download_act(m->ctx, &x, (char *)v->param + i * ops_act_size(m->ctx), 1);
    return x;
}

static void set_param(model *m, const tensor_view *v, size_t i, float x) {
    ops_upload_act(m->ctx, (char *)v->param + i * ops_act_size(m->ctx), &x, 1);
    ops_sync(m->ctx);
}

int main(void) {
    /* A fixed batch and loss weights from a small LCG. */
    uint32_t s = 12345;
#define NEXT() (s = s * 1664525u + 1013904223u, s >> 8)
    for (int t = 0; t < T; t++) {
        tokens[t] = (int32_t)(NEXT() % test_cfg.vocab_size);
        u[t] = (float)(NEXT() % 2001) / 1000.0f - 1.0f;
        w[t] = (float)(NEXT() % 2001) / 1000.0f - 1.0f;
    }
    for (int q = 0; q < N_SEQS; q++)
        for (int t = cu_seqlens[q]; t < cu_seqlens[q + 1]; t++)
            targets[t] = t + 1 < cu_seqlens[q + 1] ? tokens[t + 1] : -1;
    targets[2] = -1; /* a masked token inside a sequence */

    ops_ctx ctx;
    model m;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&test_cfg, T)) ||
        model_create(&m, &test_cfg, &ctx, T, 0)) {
        printf("FAIL setup: %s\n", dk_error());
        return 1;
    }
    model_init_random(&m, 2024, 0.3f);
    /* Norm weights start at 1 and biases at 0; perturb them so that every
     * gradient path carries a non-trivial value. */
    tensor_view views[64];
    int nv = list_tensors(&m, views);
    for (int i = 0; i < nv; i++) {
        tensor_view *v = &views[i];
        if (!views[i].vector) continue;
        float *host = dk_malloc(v->n * sizeof(float));
        ops_download_act(&ctx, host, v->param, v->n);
        for (size_t k = 0; k < v->n; k++) host[k] += 0.3f * ((float)(NEXT() % 2001) / 1000.0f - 1.0f);
        ops_upload_act(&ctx, v->param, host, v->n);
        ops_sync(&ctx);
        free(host);
    }

    /* Analytic gradients. */
    loss_of(&m);
    float dlp[T], dent[T];
    for (int t = 0; t < T; t++) {
        dlp[t] = targets[t] >= 0 ? u[t] : 0.0f;
        dent[t] = targets[t] >= 0 ? w[t] : 0.0f;
    }
    ops_upload(&ctx, m.dlogprob, dlp, sizeof dlp);
    ops_upload(&ctx, m.dentropy, dent, sizeof dent);
    model_zero_grad(&m);
    model_backward(&m, m.dlogprob, m.dentropy);

    int failures = 0;
    double worst = 0;
    printf("finite differences, L = sum u*logprob + w*entropy at temperature 0.7, h = %g:\n", FD_STEP);
    for (int i = 0; i < nv; i++) {
        tensor_view *v = &views[i];
        float *g = dk_malloc(v->n * sizeof(float));
        ops_download(&ctx, g, v->grad, v->n * sizeof(float));
        size_t k = 0;
        for (size_t j = 1; j < v->n; j++)
            if (fabsf(g[j]) > fabsf(g[k])) k = j;
        float p = get_param(&m, v, k);
        set_param(&m, v, k, p + (float)FD_STEP);
        double lp = loss_of(&m);
        set_param(&m, v, k, p - (float)FD_STEP);
        double lm = loss_of(&m);
        set_param(&m, v, k, p);
        double fd = (lp - lm) / (2 * FD_STEP), an = g[k];
        double rel = fabs(fd - an) / fmax(fabs(an), 1e-6);
        int ok = rel <= FD_REL_TOL && fabs(an) > 1e-5;
        printf("  %-24s [%4zu]  analytic % .6e  fd % .6e  rel %.2e%s\n", v->name, k, an, fd, rel, ok ? "" : "  FAIL");
        if (!ok) failures++;
        if (rel > worst) worst = rel;
        free(g);
    }
    printf("test_model_fd: %d tensors, worst relative error %.3g (tolerance %g)\n", nv, worst, FD_REL_TOL);
    model_free(&m);
    ops_ctx_free(&ctx);
    if (failures) {
        printf("test_model_fd: %d tensor(s) failed\n", failures);
        return 1;
    }
    printf("test_model_fd: ok\n");
    return 0;
}
