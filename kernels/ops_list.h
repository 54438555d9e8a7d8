/* ops_list.h: the op table written once. Every op that takes a context and
 * runs on either backend is one entry here, with its contract above it:
 *   DK_OP(name, (params), (args))             an op returning nothing
 *   DK_OP_RET(type, name, (params), (args))   an op returning a value
 * params is the parameter list of ops_name (kernels/ops.h), cpu_name
 * (kernels/ops_cpu.h) and cuda_name (kernels/ops_cuda.h), all three the
 * same; args is the same list as names, which the dispatcher in ops.c
 * forwards. The context parameter is always named ctx, since the
 * dispatcher reads ctx->device. A new op, or a new parameter, is one edit
 * here plus the backends' definitions, which the compiler checks against
 * the prototypes generated from this list; that args names the parameters
 * in their order, which it cannot check, tests/unit/test_ops_list.py does.
 *
 * The file has no include guard: an includer defines DK_OP and DK_OP_RET,
 * includes it, and gets them undefined again at the end. Ops whose dispatch
 * is not a plain forward (ops_ctx_init, ops_ctx_free, ops_cuda_available,
 * ops_device_name, ops_parse_device) are written by hand in ops.h and ops.c.
 *
 * The conventions of act buffers, fp32 gradients and scratch are in ops.h. */
#if !defined(DK_OP) || !defined(DK_OP_RET)
#error "kernels/ops_list.h: define DK_OP and DK_OP_RET before including it"
#endif

/* ---- context and memory --------------------------------------------------- */

/* Bytes per act element: 4 CPU, 2 CUDA. */
DK_OP_RET(size_t, act_size, (const ops_ctx *ctx), (ctx))
/* Zeroed; aborts on OOM. */
DK_OP_RET(void *, alloc, (ops_ctx *ctx, size_t bytes), (ctx, bytes))
DK_OP(free, (ops_ctx *ctx, void *p), (ctx, p))
DK_OP(zero, (ops_ctx *ctx, void *p, size_t bytes), (ctx, p, bytes))
/* Host memory for the buffers a loop copies to and from the device every
 * step: page-locked on CUDA, so a copy is one DMA with no staging through
 * the runtime's own buffer; zeroed; aborts on failure. */
DK_OP_RET(void *, host_alloc, (ops_ctx *ctx, size_t bytes), (ctx, bytes))
DK_OP(host_free, (ops_ctx *ctx, void *p), (ctx, p))
DK_OP(sync, (ops_ctx *ctx), (ctx))
/* Host <-> device copies of raw bytes. */
DK_OP(upload, (ops_ctx *ctx, void *dst, const void *src_host, size_t bytes), (ctx, dst, src_host, bytes))
DK_OP(download, (ops_ctx *ctx, void *dst_host, const void *src, size_t bytes), (ctx, dst_host, src, bytes))
/* fp32 host array <-> act device array (converts to / from the storage type). */
DK_OP(upload_act, (ops_ctx *ctx, void *dst, const float *src_host, size_t n), (ctx, dst, src_host, n))
DK_OP(download_act, (ops_ctx *ctx, float *dst_host, const void *src, size_t n), (ctx, dst_host, src, n))
/* Events (ops_event in ops.h): a new one, a wait for it, and its release. */
DK_OP_RET(ops_event *, event_new, (ops_ctx *ctx), (ctx))
DK_OP(event_sync, (ops_ctx *ctx, ops_event *e), (ctx, e))
DK_OP(event_free, (ops_ctx *ctx, ops_event *e), (ctx, e))
/* Copies beside the context's stream (two copy lanes on CUDA), so that a
 * loop's small per-step copies do not sit between its kernels. Host memory
 * from ops_host_alloc, left alone until the copy is known to be done.
 *   ops_upload_lane:   src_host to dst at once; ops queued on the context
 *                      after the call wait for it, ops queued before it do
 *                      not (dst must be free of them; ops_alloc's zeroing
 *                      is always ordered before a lane's later copies).
 *   ops_download_lane: src to dst_host once the ops queued so far have
 *                      finished; `done` is recorded behind it; ops queued
 *                      after the call do not wait for it. */
DK_OP(upload_lane, (ops_ctx *ctx, void *dst, const void *src_host, size_t bytes), (ctx, dst, src_host, bytes))
DK_OP(download_lane, (ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done),
      (ctx, dst_host, src, bytes, done))
/* A replayable capture of the ops fn(user) queues (CUDA graphs): launching
 * it reruns those ops with the same pointers and sizes, reading whatever the
 * device buffers hold then. NULL, with the reason in dk_error(), where the
 * backend has none (CPU) or the capture failed; fn's ops did not run then,
 * and the caller runs them directly. */
DK_OP_RET(ops_graph *, graph_capture, (ops_ctx *ctx, void (*fn)(void *user), void *user), (ctx, fn, user))
DK_OP(graph_launch, (ops_ctx *ctx, ops_graph *g), (ctx, g))
DK_OP(graph_free, (ops_ctx *ctx, ops_graph *g), (ctx, g))
/* Device-side casts between fp32 and act. fp32 -> act is how a sharded
 * optimizer refreshes the bf16 parameter shards from their fp32 masters
 * (the ZeRO-3 optimizer), which is why it stays although only tests call
 * it today. */
DK_OP(cast_f32_to_act, (ops_ctx *ctx, void *dst, const float *src, size_t n), (ctx, dst, src, n))
DK_OP(cast_act_to_f32, (ops_ctx *ctx, float *dst, const void *src, size_t n), (ctx, dst, src, n))

/* ---- elementwise -------------------------------------------------------------- */

/* y += x (act). */
DK_OP(add, (ops_ctx *ctx, void *y, const void *x, size_t n), (ctx, y, x, n))
/* Sum of squares of an fp32 buffer, returned to the host (synchronises). */
DK_OP_RET(double, sumsq, (ops_ctx *ctx, const float *x, size_t n), (ctx, x, n))

/* ---- matmul ------------------------------------------------------------------ */

/* C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
 * A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b).
 * A and B are act; C is act, or fp32 when c_f32 (parameter gradients).
 * A linear layer y = x W^T is ops_matmul(y, x, W, T, out, in, 0, 1, ...).
 * With beta != 0 and an act C the CUDA backend's cuBLASLt path (past 64
 * rows, unless a long K takes its fp32 detour) rounds the product to act
 * before adding beta * C, as ops_matmul then ops_add would: where the sum
 * must be rounded once, ops_matmul_residual writes it to another buffer. */
DK_OP(matmul,
      (ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K, int trans_a, int trans_b,
       float alpha, float beta),
      (ctx, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta))
/* C[M,N] = A[M,K] @ W[N,K]^T + R[M,N], all act, the sum rounded once: a
 * linear layer whose output joins the residual stream R (the o and down
 * projections of a decoder layer), where ops_matmul then ops_add would
 * round the product first and pass over [M, N] twice more. C may be R, and
 * then rounds as ops_matmul with beta = 1 does (see above). */
DK_OP(matmul_residual, (ops_ctx *ctx, void *c, const void *a, const void *w, const void *r, int M, int N, int K),
      (ctx, c, a, w, r, M, N, K))
/* y[N,C] += bias[C] (act); backward: dbias[C] += sum over rows of dy. */
DK_OP(bias_forward, (ops_ctx *ctx, void *y, const void *bias, int N, int C), (ctx, y, bias, N, C))
DK_OP(bias_backward, (ops_ctx *ctx, float *dbias, const void *dy, int N, int C), (ctx, dbias, dy, N, C))

/* ---- embedding --------------------------------------------------------------- */

/* out[t,:] = table[ids[t],:]; ids are int32 on the ctx's device. */
DK_OP(embedding_forward, (ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T, int C),
      (ctx, out, ids, table, T, C))
/* dtable[ids[t],:] += dout[t,:], deterministic (fixed summation order). */
DK_OP(embedding_backward, (ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T, int C),
      (ctx, dtable, dout, ids, T, C))

/* ---- normalisation ----------------------------------------------------------- */

/* RMSNorm over rows of length C: out = x * rstd * w, rstd[N] fp32 saved.
 * Also used per head for Qwen3's q/k norm (N = tokens * heads, C = head_dim).
 * The backward writes dx (accumulate 0; dx may then be dout) or adds the
 * input gradient into it (accumulate 1, dx distinct from dout, the sum
 * rounded once): a block's norm gradient joining the residual stream's. */
DK_OP(rmsnorm_forward, (ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N, int C, float eps),
      (ctx, out, rstd, x, w, N, C, eps))
DK_OP(rmsnorm_backward,
      (ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x, const void *w, const float *rstd, int N,
       int C, int accumulate),
      (ctx, dx, dw, dout, x, w, rstd, N, C, accumulate))
/* LayerNorm: out = (x - mean) * rstd * w + b; b may be NULL (then db may be
 * NULL too). No model here uses it yet; it is the hand-written kernel the
 * product offers for LayerNorm models, tested against the CPU backend and
 * PyTorch and timed by bench_ops. */
DK_OP(layernorm_forward,
      (ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N, int C,
       float eps),
      (ctx, out, mean, rstd, x, w, b, N, C, eps))
DK_OP(layernorm_backward,
      (ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x, const void *w, const float *mean,
       const float *rstd, int N, int C),
      (ctx, dx, dw, db, dout, x, w, mean, rstd, N, C))

/* ---- rotary embedding -------------------------------------------------------- */

/* In place on x[T, H, D] with the "rotate half" pairing (i, i + D/2) that
 * Qwen, Llama and HF use: angle = pos[t] * theta^(-2i/D). pos is int32 on the
 * device (positions restart at 0 for each packed sequence). Backward is the
 * same rotation with the opposite angle, applied to the gradient in place. */
DK_OP(rope_forward, (ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta),
      (ctx, x, pos, T, H, D, theta))
DK_OP(rope_backward, (ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta),
      (ctx, dx, pos, T, H, D, theta))
/* Qwen3's q/k path in one pass over x[T, H, D] (rows of one head):
 *   forward  out = ops_rope_forward(ops_rmsnorm_forward(x)), rstd [T * H]
 *   backward dx = ops_rmsnorm_backward(ops_rope_backward(dout)) (accumulate
 *            0), dw += the norm weight's gradient
 * with the roundings of those ops in turn (the normalised row and the
 * rotated-back gradient rounded to act), so the bits are theirs. dout may be
 * overwritten (the ops in turn rotate it in place where the CUDA backend's
 * one-pass kernels do not fit: D/2 not a multiple of 8, D/16 not a power of
 * two, unaligned buffers). */
DK_OP(rmsnorm_rope_forward,
      (ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, const int32_t *pos, int T, int H, int D,
       float eps, float theta),
      (ctx, out, rstd, x, w, pos, T, H, D, eps, theta))
DK_OP(rmsnorm_rope_backward,
      (ops_ctx *ctx, void *dx, float *dw, void *dout, const void *x, const void *w, const float *rstd,
       const int32_t *pos, int T, int H, int D, float theta),
      (ctx, dx, dw, dout, x, w, rstd, pos, T, H, D, theta))

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
DK_OP(attention_forward,
      (ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
       int n_seqs, int T, int Hq, int Hkv, int D, float scale),
      (ctx, out, lse, q, k, v, cu_seqlens, n_seqs, T, Hq, Hkv, D, scale))
DK_OP(attention_backward,
      (ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k, const void *v,
       const void *out, const float *lse, const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D,
       float scale),
      (ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, n_seqs, T, Hq, Hkv, D, scale))

/* ---- MLP --------------------------------------------------------------------- */

/* gu[N, 2*inter] holds [gate | up] per row (one matmul with the stacked weight);
 * out[N, inter] = silu(gate) * up. */
DK_OP(swiglu_forward, (ops_ctx *ctx, void *out, const void *gu, int N, int inter), (ctx, out, gu, N, inter))
DK_OP(swiglu_backward, (ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter),
      (ctx, dgu, dout, gu, N, inter))

/* ---- fused lm head ----------------------------------------------------------- */

/* For each token t with hidden h[t, C] and head W[V, C]:
 *   z = (h[t] . W^T) * inv_temp, logprob[t] = z[target[t]] - logsumexp(z),
 *   entropy[t] = -sum softmax(z) log softmax(z), lse[t] = logsumexp(z).
 * Computed over vocabulary chunks of `chunk` columns with an online
 * logsumexp, so tokens x V logits are never materialised; scratch must hold
 * T x chunk floats. Tokens with target < 0 get logprob 0 (they are masked);
 * entropy may be NULL when not wanted. keep, when not NULL, is T x V floats
 * that receive the tempered logits z, so that the backward can read them
 * rather than recompute them (one GEMM of 2 T C V FLOPs fewer). */
DK_OP(lmhead_forward,
      (ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W, const int32_t *target,
       int T, int C, int V, float inv_temp, int chunk, float *keep),
      (ctx, logprob, entropy, lse, h, W, target, T, C, V, inv_temp, chunk, keep))
/* Given dL/dlogprob[t] and (optionally, may be NULL) dL/dentropy[t], writes
 * dh[T, C] (overwrite) and accumulates dW[V, C] (fp32), recomputing each
 * chunk's logits, or reading them from keep when the forward filled it (the
 * backward then overwrites keep: one backward per such forward). Needs lse
 * and, when dentropy is given, entropy from the forward. Masked tokens
 * (target < 0) get no gradient at all, entropy term included. */
DK_OP(lmhead_backward,
      (ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy, const void *h, const void *W,
       const int32_t *target, const float *lse, const float *entropy, int T, int C, int V, float inv_temp, int chunk,
       float *keep),
      (ctx, dh, dW, dlogprob, dentropy, h, W, target, lse, entropy, T, C, V, inv_temp, chunk, keep))

/* ---- optimizer ---------------------------------------------------------------- */

/* One AdamW step over n elements (decoupled weight decay, bias correction at
 * step t >= 1). master[n] fp32 is the truth; param (act) receives its cast.
 * On the CPU backend master may equal param (both fp32). grad is scaled by
 * grad_scale first (global-norm clipping and loss scaling), then left as is. */
DK_OP(adamw,
      (ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v, size_t n, float lr,
       float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale),
      (ctx, param, master, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale))

/* ---- generation ---------------------------------------------------------------- */

/* The paged KV cache of one layer: k_cache and v_cache are [n_pages,
 * page_size, Hkv, D] (act). A token's slot is page * page_size + offset; the
 * pages of sequence s are block_table[s * max_pages + i], i = 0, 1, ...
 * ops_kv_write stores k[t], v[t] ([T, Hkv, D]) at slot_mapping[t]. */
DK_OP(kv_write,
      (ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *slot_mapping, int T,
       int Hkv, int D),
      (ctx, k_cache, v_cache, k, v, slot_mapping, T, Hkv, D))
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
 * W is [N, K] (a weight, transposed as in x W^T), C act, or fp32 when c_f32.
 * tmp [M, K] (act) holds the normalised rows where the backend runs the ops
 * in turn (always on the CPU; on CUDA above a few rows); its contents after
 * the call are unspecified. */
DK_OP(rmsnorm_matmul,
      (ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M, int N,
       int K, float eps, float alpha, float beta),
      (ctx, c, c_f32, tmp, x, norm_w, w, M, N, K, eps, alpha, beta))
DK_OP(rmsnorm_matmul_swiglu,
      (ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w, const void *w, int M, int I,
       int K, float eps),
      (ctx, h, gu, tmp, x, norm_w, w, M, I, K, eps))
/* The tail of a step's q|k|v projection in one op, from qkv[T, (Hq + 2 Hkv)
 * D] (per token: the q heads, then the k heads, then the v heads):
 *   q_out[t, h] = rope(rmsnorm(q[t, h]) * q_norm_w, pos[t])   ([T, Hq, D])
 *   k = rope(rmsnorm(k[t, g]) * k_norm_w, pos[t]) and v[t, g] stored at
 *   slot_mapping[t] of the caches (-1: not stored),
 * with the roundings of ops_rmsnorm_forward, ops_rope_forward and
 * ops_kv_write run in turn (the normalised value is rounded to act before
 * the rotation). q_norm_w and k_norm_w both NULL: no q/k norm, rope only. */
DK_OP(qkv_to_cache,
      (ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv, const void *q_norm_w,
       const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping, int T, int Hq, int Hkv, int D, float eps,
       float theta),
      (ctx, q_out, k_cache, v_cache, qkv, q_norm_w, k_norm_w, pos, slot_mapping, T, Hq, Hkv, D, eps, theta))
/* Attention of new query tokens against the paged cache (decode: one query
 * per sequence; continuation prefill: several). Sequence s has queries
 * cu_q[s] .. cu_q[s+1]-1, the last n_q of its ctx_lens[s] cached tokens (their
 * k/v already written), and query i attends causally to cached positions
 * 0 .. ctx_lens[s] - n_q + i. q and out are [T, Hq, D]; GQA as above. Long
 * contexts may be split along the context and merged (scratch). groups
 * (NULL or n = 0: none) names sequences that share leading pages
 * (ops_kv_groups in ops.h); on CUDA a decode step then reads those keys
 * once per group. Which kernel serves a call on CUDA can be pinned
 * (ops_tuning.paged_kernel). */
DK_OP(paged_attention,
      (ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache, const int32_t *block_table,
       int max_pages, const int32_t *ctx_lens, const int32_t *cu_q, int n_seqs, int T, int Hq, int Hkv, int D,
       int page_size, float scale, const ops_kv_groups *groups),
      (ctx, out, q, k_cache, v_cache, block_table, max_pages, ctx_lens, cu_q, n_seqs, T, Hq, Hkv, D, page_size, scale,
       groups))
/* Samples one token per row of logits[n, V] (fp32; may be overwritten as
 * scratch) after temperature, top-k and top-p truncation (sample_params in
 * ops.h). logprob[i] is the sampled token's log-probability under
 * softmax(logits / T) over the FULL vocabulary (T = 1 when greedy): what
 * the training forward recomputes. */
DK_OP(sample,
      (ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n, int V),
      (ctx, tokens, logprob, logits, params, n, V))

#undef DK_OP
#undef DK_OP_RET
