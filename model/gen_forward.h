/* gen_forward.h: the decoder's inference forward for the generation engine.
 * It reads the training model's parameters in place (model.h's layout) but
 * keeps nothing for a backward: per layer it writes the new tokens' keys and
 * values into the paged cache and attends against it, and it computes logits
 * only for the rows that are sampled from.
 *
 *   embedding -> L x [RMSNorm, q/k/v (+bias), q/k RMSNorm, RoPE at the
 *   tokens' absolute positions, kv write,
 *   paged attention (or causal attention over the step's own tokens when
 *   every sequence starts at position 0), x += o(att) (+bias), RMSNorm,
 *   gate|up, SwiGLU, x += down(h)] -> gather the sampled rows -> RMSNorm ->
 *   fp32 logits -> ops_sample
 *
 * The residual adds ride on the projections (matmul with beta = 1), the
 * RMSNorms on the products after them and the SwiGLU on the gate|up
 * product (ops_rmsnorm_matmul, ops_rmsnorm_matmul_swiglu: one kernel each
 * for a few rows on CUDA), so a decode layer is six op calls; the final
 * RMSNorm rides on the lm head's product the same way.
 * q, k and v come from one matmul with the stacked wq|wk|wv (adjacent in
 * the layer buffer, as are bq|bk|bv) when a step has at most
 * GEN_FUSED_QKV_TOKENS tokens. A step over cached prefixes
 * (decode, short continuations) hands its [T, q | k | v] rows to
 * ops_qkv_to_cache, which norms and rotates q and k and caches k and v in
 * one op, then attends over the pages. A small fresh step regroups the rows
 * into q, k and v blocks with one row gather (the embedding op over the
 * output viewed as rows of Hkv * D) for the varlen attention. Larger steps
 * (prefill) use three matmuls, where the gather's copy would cost more than
 * the fusion saves. */
#ifndef DK_MODEL_GEN_FORWARD_H
#define DK_MODEL_GEN_FORWARD_H

#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/model.h"

#define GEN_FUSED_QKV_TOKENS 256

/* One step's batch, as device pointers (the engine uploads them together). */
typedef struct gen_step {
    int T;              /* tokens in the step */
    int n_seqs;         /* sequences in the step */
    int n_rows;         /* rows whose logits are computed */
    int max_pages;      /* row stride of block_table */
    int fresh;          /* every sequence starts at position 0 (no cached prefix) */
    int gather;         /* rows is not simply 0 .. T-1 */
    int sample;         /* 0: stop after the logits */
    const int32_t *tokens, *pos, *slots; /* [T] */
    const int32_t *cu_q;      /* [n_seqs + 1] */
    const int32_t *ctx_lens;  /* [n_seqs]: cached tokens after this step's writes */
    const int32_t *block_table; /* [n_seqs, max_pages] */
    const int32_t *rows;      /* [n_rows] token rows to take logits from */
    const int32_t *qkv_rows;  /* [T * (Hq/Hkv + 2)] gather order of the fused q|k|v output
                                 (1 < T <= GEN_FUSED_QKV_TOKENS; gen_forward_qkv_rows) */
    ops_kv_groups groups;     /* sequences that share leading pages (n = 0: none) */
    const sample_params *params; /* [n_rows] */
    int32_t *out_tokens;      /* [n_rows] */
    float *out_logprobs;      /* [n_rows] */
} gen_step;

typedef struct gen_forward {
    model *m;
    kv_cache *kv;
    int max_tokens, max_rows;
    void *x, *ln;       /* [T, C] residual stream, norm output */
    void *qkv;          /* [T*Q | T*KV | T*KV] projections */
    void *qkv_fused;    /* [T, Q + 2 KV] fused projection output (small steps) */
    void *qk;           /* [T*Q | T*KV] after q/k norm and rotation */
    void *att;          /* [T, Q] */
    void *gu, *h;       /* [T, 2I], [T, I] */
    float *rstd;        /* [T * Hq] norm statistics (unused afterwards) */
    float *lse;         /* [Hq, T] of the causal attention op */
    void *xs, *lnf;     /* [rows, C] gathered rows, final norm */
    float *logits;      /* [rows, V] fp32 */
    size_t bytes;
} gen_forward;

void gen_forward_init(gen_forward *f, model *m, kv_cache *kv, int max_tokens, int max_rows);
/* Fills rows[0 .. T*(G+2)-1] (G = Hq / Hkv) with the gather order that turns
 * the fused [T, (G+2) * Hkv*D] projection into [T*Q | T*KV | T*KV]; returns
 * the count, or 0 when the step does not use the fused projection. */
int gen_forward_qkv_rows(const model_config *c, int T, int32_t *rows);
void gen_forward_free(gen_forward *f);
/* Queues one step on the model's ctx; results land in the step's outputs (and
 * f->logits) in stream order. */
void gen_forward_run(gen_forward *f, const gen_step *st);

#endif
