/* ops_cuda.h: the CUDA backend of the op table. One cuda_X for every cpu_X of
 * kernels/ops_cpu.h, with the identical parameter list, so the dispatcher in
 * ops.c is a plain forward. On this backend "act" buffers are bf16
 * (__nv_bfloat16) on the GPU, float* buffers are fp32 on the GPU, all math is
 * fp32 (sums of squares for the gradient norm in fp64), and every op is
 * deterministic: no floating-point atomics, reductions in a fixed order, so
 * two identical runs give bit-identical results.
 *
 * All ops run asynchronously on ctx->stream. Exceptions: cuda_sumsq returns a
 * host value, cuda_download / cuda_download_act return filled host memory and
 * cuda_upload_act converts through a host staging buffer, so those three
 * synchronise. cuda_upload may return before the copy is done (the caller
 * syncs before reusing the host buffer, as ops.h asks).
 *
 * The context's scratch holds at least CUDA_MIN_SCRATCH bytes whatever the
 * caller asked for: the reductions of the norm, bias, embedding and sumsq
 * backwards keep their per-block partial sums there. */
#ifndef DK_OPS_CUDA_H
#define DK_OPS_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/ops.h"

#define CUDA_MIN_SCRATCH ((size_t)64 << 20)

/* 1 when a CUDA device is visible and usable (memory.cu). */
int cuda_available(void);

/* memory.cu */
dk_status cuda_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void cuda_ctx_free(ops_ctx *ctx);
size_t cuda_act_size(const ops_ctx *ctx);
void *cuda_alloc(ops_ctx *ctx, size_t bytes);
void cuda_free(ops_ctx *ctx, void *p);
void *cuda_host_alloc(ops_ctx *ctx, size_t bytes);
void cuda_host_free(ops_ctx *ctx, void *p);
void cuda_zero(ops_ctx *ctx, void *p, size_t bytes);
void cuda_sync(ops_ctx *ctx);
void cuda_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void cuda_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes);
void cuda_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n);
void cuda_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n);

/* matmul_gemv.cu: 1 when it computed the product (M <= 8 rows times W^T), 0 to leave it to cuBLASLt */
int cuda_matmul_gemv(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                     int trans_a, int trans_b, float alpha, float beta);
/* Pins the few-row products' grid for benchmarks: 0 chosen per call, -1 a
 * block for every group of columns, n >= 1 a 1/n share of the blocks a
 * multiprocessor holds (gemv_common.cuh) */
void cuda_gemv_force_residency(int share);
/* matmul_skinny.cu: the same for 9 to 64 rows times W^T (K % 64 == 0);
 * force_splits pins the split-K count for benchmarks (0: chosen per call) */
int cuda_matmul_skinny(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                       int trans_a, int trans_b, float alpha, float beta);
void cuda_matmul_skinny_force_splits(int n);
/* force_all routes every product it can take (9..64 rows, K % 64 == 0) to
 * it instead of only the long-K ones, for benchmarks comparing it with
 * cuBLASLt shape by shape */
void cuda_matmul_skinny_force_all(int on);
int cuda_matmul_skinny_all(void);

/* memory.cu: programmatic dependent launch of the decode-step kernels
 * (cuda_common.cuh); on by default, a benchmark turns it off to measure it */
void cuda_pdl_set(int on);

/* event.cu */
ops_event *cuda_event_new(ops_ctx *ctx);
void cuda_event_sync(ops_event *e);
void cuda_event_free(ops_event *e);
void cuda_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void cuda_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done);

/* graph.cu */
ops_graph *cuda_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user);
void cuda_graph_launch(ops_ctx *ctx, ops_graph *g);
void cuda_graph_free(ops_graph *g);

/* elementwise.cu */
void cuda_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n);
void cuda_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n);
void cuda_add(ops_ctx *ctx, void *y, const void *x, size_t n);
void cuda_scale_f32(ops_ctx *ctx, float *x, size_t n, float s);
double cuda_sumsq(ops_ctx *ctx, const float *x, size_t n);

/* matmul.cu, bias.cu */
void cuda_matmul(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                 int trans_a, int trans_b, float alpha, float beta);
void cuda_bias_forward(ops_ctx *ctx, void *y, const void *bias, int N, int C);
void cuda_bias_backward(ops_ctx *ctx, float *dbias, const void *dy, int N, int C);

/* embedding.cu */
void cuda_embedding_forward(ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T, int C);
void cuda_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T, int C);

/* rmsnorm.cu, layernorm.cu */
void cuda_rmsnorm_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N, int C,
                          float eps);
void cuda_rmsnorm_backward(ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x, const void *w,
                           const float *rstd, int N, int C);
void cuda_layernorm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w,
                            const void *b, int N, int C, float eps);
void cuda_layernorm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x,
                             const void *w, const float *mean, const float *rstd, int N, int C);

/* rope.cu */
void cuda_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta);
void cuda_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta);

/* attention.cu */
void cuda_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                            const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);
void cuda_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                             const void *k, const void *v, const void *out, const float *lse,
                             const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);

/* swiglu.cu */
void cuda_swiglu_forward(ops_ctx *ctx, void *out, const void *gu, int N, int inter);
void cuda_swiglu_backward(ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter);

/* lmhead.cu */
void cuda_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                         const int32_t *target, int T, int C, int V, float inv_temp, int chunk);
void cuda_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                          const void *h, const void *W, const int32_t *target, const float *lse,
                          const float *entropy, int T, int C, int V, float inv_temp, int chunk);

/* adamw.cu */
void cuda_adamw(ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
