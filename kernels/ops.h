/* ops.h: the one op table. The model, the generation engine and the trainer
 * call compute only through these functions, so the same code runs on the CPU
 * backend (fp32, the numerical reference, *_cpu.c) and the CUDA backend (bf16
 * storage with fp32 accumulation, *.cu). Each op dispatches on ctx->device.
 *
 * Conventions (docs/DESIGN.md §4):
 * - Raw pointers and explicit sizes; all matrices are row-major.
 * - "act" buffers (activations, parameters, their gradients w.r.t.
 *   activations) are in the backend's storage type: float on CPU, bf16 on CUDA.
 *   They are passed as void*. Buffers typed float* are fp32 on both backends
 *   (norm statistics, logsumexps, per-token logprobs, parameter gradients,
 *   fp32 master weights and AdamW moments).
 * - Parameter gradients are fp32 and backward ops ACCUMULATE into them (+=),
 *   so gradient accumulation over micro-batches needs no extra pass.
 *   Gradients w.r.t. inputs (dx) are OVERWRITTEN unless the name says _acc.
 * - No op allocates; temporary space comes from ctx->scratch.
 * - Pointers live on the ctx's device; ops never copy to the host except the
 *   few that return a host scalar (ops_sumsq), which synchronise. */
#ifndef DK_OPS_H
#define DK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef enum { DK_DEVICE_CPU = 0, DK_DEVICE_CUDA = 1 } dk_device;

typedef struct ops_ctx {
    dk_device device;
    int gpu;              /* CUDA device ordinal */
    void *stream;         /* cudaStream_t */
    void *blaslt;         /* cublasLtHandle_t */
    void *blaslt_ws;      /* cuBLASLt workspace */
    size_t blaslt_ws_size;
    void *scratch;        /* temporary space for ops (device memory) */
    size_t scratch_size;
    void *lane[2];        /* cudaStream_t: the copy lanes up and down (ops_upload_lane), made on first use */
    void *lane_ev[2];     /* cudaEvent_t: their joins with `stream` */
} ops_ctx;

/* ---- context and memory --------------------------------------------------- */

/* Creates a context on a device; CUDA fails (DK_ERR_RUNTIME, message says why)
 * where the binary was built without CUDA or no GPU is visible. */
dk_status ops_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void ops_ctx_free(ops_ctx *ctx);
int ops_cuda_available(void); /* 1 when a CUDA GPU can be used */
const char *ops_device_name(dk_device d);
dk_status ops_parse_device(const char *s, dk_device *out);

size_t ops_act_size(const ops_ctx *ctx); /* bytes per act element: 4 CPU, 2 CUDA */
void *ops_alloc(ops_ctx *ctx, size_t bytes); /* zeroed; aborts on OOM */
void ops_free(ops_ctx *ctx, void *p);
void ops_zero(ops_ctx *ctx, void *p, size_t bytes);
/* Host memory for the buffers a loop copies to and from the device every
 * step: page-locked on CUDA, so a copy is one DMA with no staging through
 * the runtime's own buffer; zeroed; aborts on failure. */
void *ops_host_alloc(ops_ctx *ctx, size_t bytes);
void ops_host_free(ops_ctx *ctx, void *p);
void ops_sync(ops_ctx *ctx);
/* Host <-> device copies of raw bytes. */
void ops_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void ops_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes);
/* fp32 host array <-> act device array (converts to / from the storage type). */
void ops_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n);
void ops_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n);
/* A point the host can wait for (ops_download_lane records it behind its
 * copy): what came before it has finished when ops_event_sync returns,
 * while ops queued on the context after it may still run. */
typedef struct ops_event ops_event;
ops_event *ops_event_new(ops_ctx *ctx);
void ops_event_sync(ops_ctx *ctx, ops_event *e);
void ops_event_free(ops_ctx *ctx, ops_event *e);
/* Copies beside the context's stream (two copy lanes on CUDA), so that a
 * loop's small per-step copies do not sit between its kernels. Host memory
 * from ops_host_alloc, left alone until the copy is known to be done.
 *   ops_upload_lane:   src_host to dst at once; ops queued on the context
 *                      after the call wait for it, ops queued before it do
 *                      not (dst must be free of them).
 *   ops_download_lane: src to dst_host once the ops queued so far have
 *                      finished; `done` is recorded behind it; ops queued
 *                      after the call do not wait for it. */
void ops_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void ops_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done);

/* A replayable capture of the ops fn(user) queues (CUDA graphs): launching
 * it reruns those ops with the same pointers and sizes, reading whatever the
 * device buffers hold then. NULL, with the reason in dk_error(), where the
 * backend has none (CPU) or the capture failed; fn's ops did not run then,
 * and the caller runs them directly. */
typedef struct ops_graph ops_graph;
ops_graph *ops_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user);
void ops_graph_launch(ops_ctx *ctx, ops_graph *g);
void ops_graph_free(ops_ctx *ctx, ops_graph *g);
/* Device-side casts between fp32 and act. */
void ops_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n);
void ops_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n);

/* ---- elementwise -------------------------------------------------------------- */

void ops_add(ops_ctx *ctx, void *y, const void *x, size_t n);  /* y += x (act) */
void ops_scale_f32(ops_ctx *ctx, float *x, size_t n, float s); /* x *= s */
/* Sum of squares of an fp32 buffer, returned to the host (synchronises). */
double ops_sumsq(ops_ctx *ctx, const float *x, size_t n);

/* ---- matmul ------------------------------------------------------------------ */

/* C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
 * A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b).
 * A and B are act; C is act, or fp32 when c_f32 (parameter gradients).
 * A linear layer y = x W^T is ops_matmul(y, x, W, T, out, in, 0, 1, ...). */
void ops_matmul(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                int trans_a, int trans_b, float alpha, float beta);
/* y[N,C] += bias[C] (act); backward: dbias[C] += sum over rows of dy. */
void ops_bias_forward(ops_ctx *ctx, void *y, const void *bias, int N, int C);
void ops_bias_backward(ops_ctx *ctx, float *dbias, const void *dy, int N, int C);

/* ---- embedding --------------------------------------------------------------- */

/* out[t,:] = table[ids[t],:]; ids are int32 on the ctx's device. */
void ops_embedding_forward(ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T, int C);
/* dtable[ids[t],:] += dout[t,:], deterministic (fixed summation order). */
void ops_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T, int C);

/* ---- normalisation ----------------------------------------------------------- */

/* RMSNorm over rows of length C: out = x * rstd * w, rstd[N] fp32 saved.
 * Also used per head for Qwen3's q/k norm (N = tokens * heads, C = head_dim). */
void ops_rmsnorm_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N, int C,
                         float eps);
void ops_rmsnorm_backward(ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x, const void *w,
                          const float *rstd, int N, int C);
/* LayerNorm: out = (x - mean) * rstd * w + b; b may be NULL. */
void ops_layernorm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w,
                           const void *b, int N, int C, float eps);
void ops_layernorm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x,
                            const void *w, const float *mean, const float *rstd, int N, int C);

/* ---- rotary embedding -------------------------------------------------------- */

/* In place on x[T, H, D] with the "rotate half" pairing (i, i + D/2) that
 * Qwen, Llama and HF use: angle = pos[t] * theta^(-2i/D). pos is int32 on the
 * device (positions restart at 0 for each packed sequence). Backward is the
 * same rotation with the opposite angle, applied to the gradient in place. */
void ops_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta);
void ops_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta);

/* ---- attention --------------------------------------------------------------- */

/* Causal GQA attention over packed variable-length sequences.
 * q[T, Hq, D], k and v [T, Hkv, D], out[T, Hq, D]; Hq % Hkv == 0, query head h
 * reads kv head h / (Hq / Hkv). Sequence s is tokens cu_seqlens[s] ..
 * cu_seqlens[s+1]-1 (int32, device). lse[Hq, T] fp32 (natural log) is saved
 * for the backward. scale is usually 1/sqrt(D). Tokens after cu_seqlens[n_seqs]
 * (padding) get out = 0, lse = 0 and zero gradients. The backward recomputes
 * probabilities from lse and sums dk/dv over a group's query heads in head
 * order, so it is deterministic. Scratch: on the CPU 2 * min(64, L) * L
 * floats for the longest sequence L; on CUDA Hq * T floats (backward). */
void ops_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                           const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);
void ops_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *out, const float *lse,
                            const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);

/* ---- MLP --------------------------------------------------------------------- */

/* gu[N, 2*inter] holds [gate | up] per row (one matmul with the stacked weight);
 * out[N, inter] = silu(gate) * up. */
void ops_swiglu_forward(ops_ctx *ctx, void *out, const void *gu, int N, int inter);
void ops_swiglu_backward(ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter);

/* ---- fused lm head ----------------------------------------------------------- */

/* For each token t with hidden h[t, C] and head W[V, C]:
 *   z = (h[t] . W^T) * inv_temp, logprob[t] = z[target[t]] - logsumexp(z),
 *   entropy[t] = -sum softmax(z) log softmax(z), lse[t] = logsumexp(z).
 * Computed over vocabulary chunks of `chunk` columns with an online
 * logsumexp, so tokens x V logits are never materialised; scratch must hold
 * T x chunk floats. Tokens with target < 0 get logprob 0 (they are masked);
 * entropy may be NULL when not wanted. */
void ops_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                        const int32_t *target, int T, int C, int V, float inv_temp, int chunk);
/* Given dL/dlogprob[t] and (optionally, may be NULL) dL/dentropy[t], writes
 * dh[T, C] (overwrite) and accumulates dW[V, C] (fp32), recomputing each
 * chunk's logits. Needs lse and, when dentropy is given, entropy from the
 * forward. Masked tokens (target < 0) get no gradient at all, entropy term
 * included. */
void ops_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                         const void *h, const void *W, const int32_t *target, const float *lse,
                         const float *entropy, int T, int C, int V, float inv_temp, int chunk);

/* ---- optimizer ---------------------------------------------------------------- */

/* One AdamW step over n elements (decoupled weight decay, bias correction at
 * step t >= 1). master[n] fp32 is the truth; param (act) receives its cast.
 * On the CPU backend master may equal param (both fp32). grad is scaled by
 * grad_scale first (global-norm clipping and loss scaling), then left as is. */
void ops_adamw(ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);

/* ---- generation ---------------------------------------------------------------- */

/* The paged KV cache of one layer: k_cache and v_cache are [n_pages,
 * page_size, Hkv, D] (act). A token's slot is page * page_size + offset; the
 * pages of sequence s are block_table[s * max_pages + i], i = 0, 1, ...
 * ops_kv_write stores k[t], v[t] ([T, Hkv, D]) at slot_mapping[t]. */
void ops_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                  const int32_t *slot_mapping, int T, int Hkv, int D);
/* A decode step's RMSNorm fused into the product that follows it:
 *   ops_rmsnorm_matmul: C[M, N] = alpha * (rmsnorm(x) * norm_w) W^T + beta * C
 *                       (x [M, K]; the normalised rows rounded to act, as
 *                       ops_rmsnorm_forward writes them)
 *   ops_rmsnorm_matmul_swiglu: h[M, I] = swiglu((rmsnorm(x) * norm_w) W^T)
 *                       with W [2I, K] the stacked gate|up weight: the first
 *                       half of an MLP, the product rounded to act before
 *                       the SwiGLU as ops_matmul then ops_swiglu_forward
 *                       would; gu [M, 2I] (act) holds the product where the
 *                       backend runs the ops in turn
 * W is [N, K] (a weight, transposed as in x W^T), C act. tmp [M, K] (act)
 * holds the normalised rows where the backend runs the ops in turn
 * (always on the CPU; on CUDA above a few rows); its contents after the call
 * are unspecified. */
void ops_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                        int N, int K, float eps, float alpha, float beta);
void ops_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w,
                               const void *w, int M, int I, int K, float eps);
/* The tail of a step's q|k|v projection in one op, from qkv[T, (Hq + 2 Hkv)
 * D] (per token: the q heads, then the k heads, then the v heads):
 *   q_out[t, h] = rope(rmsnorm(q[t, h]) * q_norm_w, pos[t])   ([T, Hq, D])
 *   k = rope(rmsnorm(k[t, g]) * k_norm_w, pos[t]) and v[t, g] stored at
 *   slot_mapping[t] of the caches (-1: not stored),
 * with the roundings of ops_rmsnorm_forward, ops_rope_forward and
 * ops_kv_write run in turn (the normalised value is rounded to act before
 * the rotation). q_norm_w and k_norm_w both NULL: no q/k norm, rope only. */
void ops_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                      const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                      int T, int Hq, int Hkv, int D, float eps, float theta);
/* Attention of new query tokens against the paged cache (decode: one query
 * per sequence; continuation prefill: several). Sequence s has queries
 * cu_q[s] .. cu_q[s+1]-1, the last n_q of its ctx_lens[s] cached tokens (their
 * k/v already written), and query i attends causally to cached positions
 * 0 .. ctx_lens[s] - n_q + i. q and out are [T, Hq, D]; GQA as above. Long
 * contexts may be split along the context and merged (scratch). */
void ops_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                         int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale);

/* Per-row sampling settings (device memory). temperature 0 is greedy. The
 * random draw is a counter-based function of (seed, counter), so a rollout
 * is reproducible whatever the batch it runs in. */
typedef struct {
    float temperature;
    float top_p;  /* 1: off */
    int top_k;    /* 0: off */
    int pad;
    uint64_t seed;
    uint64_t counter; /* e.g. the token's position in its sequence */
} sample_params;

/* Samples one token per row of logits[n, V] (fp32; may be overwritten as
 * scratch) after temperature, top-k and top-p truncation. logprob[i] is the
 * sampled token's log-probability under softmax(logits / T) over the FULL
 * vocabulary (T = 1 when greedy): what the training forward recomputes. */
void ops_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n,
                int V);

#endif
