/* model.h: the Qwen3-family decoder (docs/DESIGN.md §5): forward, backward over
 * a packed batch of variable-length sequences, through the op table only, so
 * the same code runs on the CPU and the CUDA backend.
 *
 *   embedding -> L x [RMSNorm, q/k/v (+bias), per-head q/k RMSNorm (Qwen3),
 *   RoPE, causal GQA attention, o (+bias), residual, RMSNorm, gate|up,
 *   SwiGLU, down, residual] -> RMSNorm -> fused lm head (tied or not)
 *
 * The lm head never materialises logits: the forward leaves per-token
 * logprob of the target and entropy of the tempered distribution in fp32
 * device buffers the model owns. The backward takes dL/dlogprob (and
 * optionally dL/dentropy) and ACCUMULATES the fp32 parameter gradients, so
 * micro-batches add up without an extra pass.
 *
 * All memory is planned in model_create from the config and max_tokens:
 * parameters (act type, one flat buffer per layer as params.h lays out),
 * their fp32 gradients with the same layout, and the activations. With
 * recompute (model_recompute) only each layer's input is kept during the
 * forward, and the backward re-runs the layer's forward just before its
 * backward; MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION also keeps each layer's
 * attention output and logsumexp, so the re-run skips the attention, the op
 * that costs the most to run again. The ops are deterministic, so every mode
 * gives bit-identical results. */
#ifndef DK_MODEL_MODEL_H
#define DK_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/params.h"

/* One packed batch, host arrays. Sequence s is tokens cu_seqlens[s] ..
 * cu_seqlens[s+1]-1 (cu_seqlens[0] = 0, cu_seqlens[n_seqs] = T). pos may be
 * NULL: positions then restart at 0 for each sequence. targets[t] is the token
 * that should follow token t, or -1 to leave t out of the loss; targets may be
 * NULL (every token masked: a forward for hidden states only). */
typedef struct {
    int T, n_seqs;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *cu_seqlens;
    const int32_t *targets;
} model_batch;

/* Activations of one decoder layer (act unless typed float*). Without q/k
 * norm, q_raw == q and k_raw == k (RoPE rotates the projection in place). */
typedef struct {
    void *ln1;          /* [T, C] attention RMSNorm output */
    void *q_raw, *k_raw; /* [T, Hq*D], [T, Hkv*D] projections (+bias), before q/k norm */
    void *q, *k;        /* after q/k norm and RoPE: the attention inputs */
    void *v;            /* [T, Hkv*D] */
    void *att;          /* [T, Hq*D] attention output */
    void *x_mid;        /* [T, C] residual stream after attention */
    void *ln2;          /* [T, C] MLP RMSNorm output */
    void *gu;           /* [T, 2I] gate | up */
    void *h;            /* [T, I] silu(gate) * up */
    float *rstd1, *rstd2; /* [T] */
    float *q_rstd, *k_rstd; /* [T*Hq], [T*Hkv] (q/k norm only) */
    float *lse;         /* [Hq, T] attention logsumexp */
} model_layer_acts;

/* What the forward keeps for the backward. */
typedef enum {
    MODEL_RECOMPUTE_NONE = 0,  /* every layer's activations */
    MODEL_RECOMPUTE_LAYER = 1, /* each layer's input; one shared set of activations */
    /* As LAYER, plus per layer the attention output [T, Hq*D] (act) and its
     * logsumexp [Hq, T] (fp32): about 1.9 GB more for 28 layers of a
     * 1.7B-shaped model at 16k tokens. */
    MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION = 2,
} model_recompute;
enum { MODEL_N_RECOMPUTE = MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION + 1 };
/* The modes' names ("none", "layer", "layer_keep_attention"), indexed by
 * model_recompute: the run config's train.recompute values. */
extern const char *const model_recompute_names[MODEL_N_RECOMPUTE];

/* Where a sharded run (dist/zero.h) steps into the model. Without hooks the
 * model owns every parameter and gradient buffer and runs as it always has;
 * with them (model_create_ex, own_params = 0) the provider owns them and the
 * model calls it at these points, in this order, so it can gather a layer's
 * weights just in time and scatter its gradients as soon as they are done.
 * `layer` is -1 for the events that are not about one layer. */
typedef enum {
    MODEL_HOOK_FORWARD_BEGIN,    /* the embedding, final norm and lm head are read from here on */
    MODEL_HOOK_LAYER_PARAMS,     /* layer l's weights are read next (forward, or recompute + backward) */
    MODEL_HOOK_BACKWARD_BEGIN,   /* the lm head, final norm and embedding gradients accumulate from here on */
    MODEL_HOOK_LAYER_GRADS,      /* layer l's gradients accumulate next (m->grads.layers[l]) */
    MODEL_HOOK_LAYER_GRADS_DONE, /* layer l's backward is queued */
    MODEL_HOOK_BACKWARD_END,     /* every gradient of this backward is queued */
    MODEL_HOOK_ZERO_GRAD,        /* model_zero_grad: the provider zeroes what it owns */
} model_hook_event;

struct model;
typedef struct {
    void (*fn)(void *user, struct model *m, model_hook_event ev, int layer);
    void *user;
} model_hooks;

typedef struct model {
    model_config cfg;
    param_layout layout;
    ops_ctx *ctx;
    int max_tokens;
    model_recompute recompute;
    int lmhead_chunk;     /* vocabulary columns per lm-head step (fits ctx->scratch) */

    param_buffers params; /* act: the weights */
    param_buffers grads;  /* fp32, same layout, accumulated by model_backward */

    /* Activations, planned for max_tokens. */
    void **res;           /* n_layers + 1 residual-stream buffers [T, C]: res[l] is layer l's input */
    model_layer_acts *acts; /* n_layers sets, or one shared set when recompute */
    void **att_kept;      /* LAYER_KEEP_ATTENTION: n_layers attention outputs [T, Hq*D] */
    float **lse_kept;     /* and their logsumexp [Hq, T] */
    void *final_h;        /* [T, C] final RMSNorm output (the lm head's input) */
    float *final_rstd;    /* [T] */
    float *logprob;       /* [T] fp32 per-token logprob of the target (0 where masked) */
    float *entropy;       /* [T] fp32 entropy of the tempered next-token distribution */
    float *lmhead_lse;    /* [T] fp32 logsumexp of the tempered logits */
    float *lmhead_keep;   /* NULL, or [max_tokens, V] fp32 logits kept from forward to backward */
    int keep_filled;      /* lmhead_keep holds the last forward's logits (the backward consumes them) */
    float *dlogprob;      /* [max_tokens] fp32 device buffers a caller may fill */
    float *dentropy;      /* (ops_upload) and pass to model_backward */

    /* Backward workspace (act). */
    void *d_res;          /* [T, C] dL/d residual stream */
    void *d_ln;           /* [T, C] */
    void *d_work;         /* MLP phase: dh [T, I], dgu [T, 2I]; attention phase:
                             datt, dq, dq_raw [T, Hq*D], dk, dk_raw, dv [T, Hkv*D] */

    /* The batch on the device (int32) and host staging for derived arrays. */
    int32_t *d_tokens, *d_pos, *d_cu_seqlens, *d_targets;
    int32_t *h_stage;     /* host [max_tokens + 1] */
    int T, n_seqs;        /* of the last forward */
    float inv_temp;       /* of the last forward */
    int have_forward;     /* the activations belong to a completed forward */
    int n_act_sets;       /* n_layers, or 1 with recompute */
    int acts_layer;       /* with recompute: the layer whose activations the shared set holds, or -1 */
    size_t device_bytes;  /* everything allocated on the ctx's device */
    int own_params;       /* params and grads are the model's (else a provider's, through hooks) */
    model_hooks hooks;    /* fn NULL: none */
} model;

/* Bytes of ctx->scratch the model's ops need for max_tokens tokens per batch
 * with the default lm-head chunk; pass it (or more) to ops_ctx_init. */
size_t model_scratch_bytes(const model_config *cfg, int max_tokens);

/* Validates cfg, plans and allocates everything for batches of up to
 * max_tokens tokens. Parameters start at zero; load or initialise them. Fails
 * (naming the field or size) on a bad config or a too small ctx->scratch. */
dk_status model_create(model *m, const model_config *cfg, ops_ctx *ctx, int max_tokens, model_recompute recompute);
/* As model_create; own_params = 0 allocates no parameter or gradient buffer
 * (params and grads are param_buffers with NULL pointers, `layers` arrays
 * ready to fill): a provider sets m->hooks and fills the pointers before each
 * use. Weight loading and saving (model_load_hf, model_init_random,
 * model_save_hf) need own_params = 1. */
dk_status model_create_ex(model *m, const model_config *cfg, ops_ctx *ctx, int max_tokens, model_recompute recompute,
                          int own_params);
void model_free(model *m);
/* Keeps the lm head's fp32 logits (4 max_tokens V bytes) from each forward
 * to its backward, which then skips their recompute: one GEMM of
 * 2 T C V FLOPs fewer per step. For when the memory plan has room. */
void model_keep_logits(model *m);
/* Bytes model_keep_logits allocates for cfg and max_tokens. */
size_t model_keep_logits_bytes(const model_config *cfg, int max_tokens);

/* Loads a Hugging Face checkpoint directory (*.safetensors, HF names) whose
 * shapes match m->cfg; errors name the file and the tensor. */
dk_status model_load_hf(model *m, const char *dir);
/* Writes DIR/config.json and the weights (HF names) in DTYPE ("bf16",
 * "fp16", "fp32"), so transformers and vLLM can load them. */
dk_status model_save_hf(const model *m, const char *dir, const char *dtype);
/* Deterministic random weights from seed (weights normal(0, std), norm
 * weights 1, biases 0): for tests and smoke runs. */
void model_init_random(model *m, uint64_t seed, float std);

/* Forward over one packed batch at temperature 1/inv_temp: fills m->logprob,
 * m->entropy (device fp32 [b->T]) and keeps what the backward needs. Fails,
 * naming the culprit, on a batch that does not fit or is inconsistent. */
dk_status model_forward(model *m, const model_batch *b, float inv_temp);
/* Backward of the last forward: dlogprob[T] and dentropy[T] (may be NULL) are
 * device fp32 arrays (m->dlogprob / m->dentropy are there to be used).
 * Tokens whose target is -1 contribute nothing, through either term.
 * Accumulates into m->grads; call model_zero_grad between optimizer steps. */
void model_backward(model *m, const float *dlogprob, const float *dentropy);
void model_zero_grad(model *m);

/* The final RMSNorm output [T, C] of the last forward (act, device) and the
 * lm head weight [V, C] (the embedding table when tied): logits for a few
 * tokens are ops_matmul(logits, h, W, T, V, C, 0, 1, 1, 0). */
const void *model_final_hidden(const model *m);
const void *model_lm_head_weight(const model *m);

/* Bytes of device memory the model allocated (parameters, gradients,
 * activations), for logs. */
size_t model_device_bytes(const model *m);

#endif
