/* model_hf_dump.c: our side of tests/gpu/test_model_hf_cuda.sh. Loads a
 * Hugging Face checkpoint directory with model_load_hf on the chosen backend,
 * runs the training forward and the backward of loss = -mean(logprob of the
 * target) over one packed batch, and writes what the comparer checks against
 * transformers to one fp32 safetensors file:
 *   logits [T, V]     final hidden x lm head (fp32 output of the bf16 matmul
 *                     on CUDA), the logits HF's forward returns
 *   logprob, entropy  [T] from the fused lm head the training uses
 *   loss [1]          -mean(logprob) over targets >= 0
 *   grad.<hf name>    every parameter's gradient under its HF name and shape
 *                     (gate_proj / up_proj are the two row halves of our
 *                     w_gate_up; with tied embeddings the embedding's
 *                     gradient includes the lm head's, as in HF)
 * The batch file holds tokens, cu_seqlens and targets (-1: no target) as F32.
 * The name mapping is written here from HF's module names, not taken from the
 * loader, so a loader that put a tensor in the wrong place is caught.
 *
 * Usage: model_hf_dump [--device cuda|cpu] MODEL_DIR BATCH.safetensors OUT.safetensors
 * Exit 77 where --device cuda has no GPU or no CUDA op table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "model_hf_dump: %s: %s\n", what, dk_error());
        exit(1);
    }
}

static float *read_f32(const st_reader *r, const char *name, size_t *n) {
    const st_tensor *t = safetensors_find(r, name);
    if (!t) {
        fprintf(stderr, "model_hf_dump: %s: tensor '%s' missing\n", r->source, name);
        exit(1);
    }
    float *out = dk_malloc(t->numel * sizeof(float) + 1);
    safetensors_tensor_to_f32(t, out);
    *n = t->numel;
    return out;
}

static int32_t *to_i32(const float *x, size_t n) {
    int32_t *out = dk_malloc(n * sizeof(int32_t) + 1);
    for (size_t i = 0; i < n; i++) out[i] = (int32_t)lrintf(x[i]);
    return out;
}

/* Entries being written, with names they own. */
typedef struct {
    st_entry *e;
    int n, cap;
} entries;

static void add(entries *es, const char *name, const float *data, int ndim, int64_t d0, int64_t d1) {
    if (es->n == es->cap) {
        es->cap = es->cap ? 2 * es->cap : 64;
        es->e = dk_realloc(es->e, (size_t)es->cap * sizeof(st_entry));
    }
    st_entry *e = &es->e[es->n++];
    memset(e, 0, sizeof *e);
    e->name = dk_strdup(name);
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->data = data;
}

/* Host fp32 copy of a gradient buffer of n floats. */
static float *grab(ops_ctx *ctx, const void *dev, size_t n) {
    float *h = dk_malloc(n * sizeof(float) + 1);
    ops_download(ctx, h, dev, n * sizeof(float));
    return h;
}

int main(int argc, char **argv) {
    dk_device dev = DK_DEVICE_CUDA;
    int a = 1;
    if (a + 1 < argc && !strcmp(argv[a], "--device")) {
        if (ops_parse_device(argv[a + 1], &dev) != DK_OK) {
            fprintf(stderr, "model_hf_dump: %s\n", dk_error());
            return 2;
        }
        a += 2;
    }
    if (argc - a != 3) {
        fprintf(stderr, "usage: model_hf_dump [--device cuda|cpu] MODEL_DIR BATCH.safetensors OUT.safetensors\n");
        return 2;
    }
    const char *model_dir = argv[a], *batch_path = argv[a + 1], *out_path = argv[a + 2];
    if (dev == DK_DEVICE_CUDA && (device_count() == 0 || !ops_cuda_available())) {
        printf("model_hf_dump: no CUDA GPU or no CUDA op table in this build: skipped\n");
        return 77;
    }

    model_config cfg;
    must(model_config_from_hf(model_dir, &cfg), "config");
    st_reader br;
    must(safetensors_open(&br, batch_path), "batch");
    size_t T, n_cu, n_tgt;
    float *f_tok = read_f32(&br, "tokens", &T), *f_cu = read_f32(&br, "cu_seqlens", &n_cu);
    float *f_tgt = read_f32(&br, "targets", &n_tgt);
    if (n_tgt != T || n_cu < 2) {
        fprintf(stderr, "model_hf_dump: %s: %zu targets for %zu tokens, %zu cu_seqlens\n", batch_path, n_tgt, T, n_cu);
        return 1;
    }
    int32_t *tokens = to_i32(f_tok, T), *cu = to_i32(f_cu, n_cu), *targets = to_i32(f_tgt, T);
    model_batch b = {.T = (int)T, .n_seqs = (int)n_cu - 1, .tokens = tokens, .pos = NULL, .cu_seqlens = cu,
                     .targets = targets};

    ops_ctx ctx;
    must(ops_ctx_init(&ctx, dev, 0, model_scratch_bytes(&cfg, (int)T)), "ops_ctx_init");
    model m;
    must(model_create(&m, &cfg, &ctx, (int)T, 0), "model_create");
    double t0 = dk_now();
    must(model_load_hf(&m, model_dir), "model_load_hf");
    double t_load = dk_now() - t0;

    const int V = cfg.vocab_size, C = cfg.hidden_size, L = cfg.n_layers;
    const size_t I = (size_t)cfg.intermediate_size;
    int n_valid = 0;
    for (size_t t = 0; t < T; t++) n_valid += targets[t] >= 0;
    if (n_valid == 0) {
        fprintf(stderr, "model_hf_dump: %s has no target >= 0\n", batch_path);
        return 1;
    }

    t0 = dk_now();
    must(model_forward(&m, &b, 1.0f), "model_forward");
    float *logprob = grab(&ctx, m.logprob, T), *entropy = grab(&ctx, m.entropy, T);
    float *logits_dev = ops_alloc(&ctx, T * (size_t)V * sizeof(float));
    ops_matmul(&ctx, logits_dev, 1, model_final_hidden(&m), model_lm_head_weight(&m), (int)T, V, C, 0, 1, 1.0f, 0.0f);
    float *logits = grab(&ctx, logits_dev, T * (size_t)V);
    ops_free(&ctx, logits_dev);

    float *dlogprob = dk_malloc(T * sizeof(float));
    double nll = 0.0;
    for (size_t t = 0; t < T; t++) {
        dlogprob[t] = targets[t] >= 0 ? -1.0f / (float)n_valid : 0.0f;
        if (targets[t] >= 0) nll -= logprob[t];
    }
    float loss = (float)(nll / n_valid);
    model_zero_grad(&m);
    ops_upload(&ctx, m.dlogprob, dlogprob, T * sizeof(float));
    model_backward(&m, m.dlogprob, NULL);
    ops_sync(&ctx);
    double t_step = dk_now() - t0;

    /* Every gradient under its HF name. */
    const param_layout *pl = &m.layout;
    entries es = {0};
    add(&es, "logits", logits, 2, (int64_t)T, V);
    add(&es, "logprob", logprob, 1, (int64_t)T, 0);
    add(&es, "entropy", entropy, 1, (int64_t)T, 0);
    add(&es, "loss", &loss, 1, 1, 0);
    float *g_embed = grab(&ctx, m.grads.embed, pl->embed_size);
    add(&es, "grad.model.embed_tokens.weight", g_embed, 2, V, C);
    float *g_norm = grab(&ctx, m.grads.final_norm, pl->final_norm_size);
    add(&es, "grad.model.norm.weight", g_norm, 1, C, 0);
    float *g_head = NULL;
    if (pl->lm_head_size) {
        g_head = grab(&ctx, m.grads.lm_head, pl->lm_head_size);
        add(&es, "grad.lm_head.weight", g_head, 2, V, C);
    }
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
    float **g_layers = dk_calloc((size_t)L, sizeof(float *));
    char name[256];
    for (int l = 0; l < L; l++) {
        float *g = g_layers[l] = grab(&ctx, m.grads.layers[l], pl->layer_size);
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            dk_layer_tensor t = map[i].t;
            if (!pl->size[t]) continue;
            snprintf(name, sizeof name, "grad.model.layers.%d.%s", l, map[i].hf);
            if (pl->rows[t] > 1) add(&es, name, g + pl->off[t], 2, pl->rows[t], pl->cols[t]);
            else add(&es, name, g + pl->off[t], 1, (int64_t)pl->size[t], 0);
        }
        snprintf(name, sizeof name, "grad.model.layers.%d.mlp.gate_proj.weight", l);
        add(&es, name, g + pl->off[P_W_GATE_UP], 2, (int64_t)I, C);
        snprintf(name, sizeof name, "grad.model.layers.%d.mlp.up_proj.weight", l);
        add(&es, name, g + pl->off[P_W_GATE_UP] + I * (size_t)C, 2, (int64_t)I, C);
    }
    t0 = dk_now();
    must(safetensors_write_file(out_path, es.e, es.n, ST_F32), "write");
    printf("model_hf_dump: %s on %s: T=%zu in %d sequences, %d targets, loss %.6f; load %.1f s, forward+backward "
           "%.2f s, wrote %d tensors in %.1f s\n",
           model_dir, ops_device_name(dev), T, b.n_seqs, n_valid, (double)loss, t_load, t_step, es.n,
           dk_now() - t0);

    for (int i = 0; i < es.n; i++) free((char *)es.e[i].name);
    free(es.e);
    for (int l = 0; l < L; l++) free(g_layers[l]);
    free(g_layers), free(g_embed), free(g_norm), free(g_head);
    free(logits), free(logprob), free(entropy), free(dlogprob);
    free(tokens), free(cu), free(targets), free(f_tok), free(f_cu), free(f_tgt);
    model_free(&m);
    ops_ctx_free(&ctx);
    safetensors_close(&br);
    return 0;
}
