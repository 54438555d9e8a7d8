/* ops_cuda_infer.h: the CUDA backend of the op table's generation ops
 * (kernels/ops.h, "generation"), with the parameter lists of their cpu_X
 * twins in ops_cpu.h. Like the rest of the backend they queue work on
 * ctx->stream without synchronising, keep act data in bf16 with fp32 math,
 * and are deterministic run to run (no floating-point atomics). */
#ifndef DK_OPS_CUDA_INFER_H
#define DK_OPS_CUDA_INFER_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kv_write.cu */
void cuda_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                   const int32_t *slot_mapping, int T, int Hkv, int D);

/* fused_matmul.cu: the few-row matmul of matmul_gemv.cu with the RMSNorm
 * in its loads, and with the SwiGLU as its output (M <= 8); the ops in turn
 * above that. */
void cuda_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                         int N, int K, float eps, float alpha, float beta);
void cuda_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w,
                                const void *w, int M, int I, int K, float eps);

/* qkv_to_cache.cu: a block per token, a warp per head. */
void cuda_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                       const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                       int T, int Hq, int Hkv, int D, float eps, float theta);

/* paged_attention.cu: flash decoding over pages: a warp kernel for few
 * query rows per sequence (paged_decode.cu), a tensor-core kernel for
 * continuation prefills, a plain one for other head dims; long contexts are
 * split along the keys when the batch alone cannot fill the GPU, with fp32
 * partial results in ctx->scratch merged by a second kernel.
 * cuda_paged_attention_force pins one kernel for every later call (tests
 * and benchmarks compare them); PA_KERNEL_AUTO restores the choice. */
void cuda_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                          const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                          int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale);
enum { PA_KERNEL_AUTO, PA_KERNEL_DECODE, PA_KERNEL_MMA, PA_KERNEL_PLAIN };
void cuda_paged_attention_force(int kind);
/* paged_decode.cu: pins the decode kernel's warps a CTA (4 or 8) and splits
 * (at most the cluster size) for a benchmark; 0, 0 restores the choice. */
void cuda_paged_decode_force(int nw, int nsplit);

/* sample.cu: one block per row; radix selections for top-k / top-p. */
void cuda_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n,
                 int V);

#ifdef __cplusplus
}
#endif

#endif
