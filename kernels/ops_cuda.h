/* ops_cuda.h: the CUDA backend of the op table. One cuda_X for every op of
 * kernels/ops_list.h, generated from that list with the identical parameter
 * list (the same as cpu_X in kernels/ops_cpu.h), so the dispatcher in ops.c
 * is a plain forward. On this backend "act" buffers are bf16
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
 * Each op lives in the .cu file named after it or its family (memory.cu:
 * the context, memory and copies; event.cu: events and copy lanes;
 * elementwise.cu: the casts, add and sumsq; fused_matmul.cu: the
 * rmsnorm_matmul pair); the file's header says how its kernels work.
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

/* memory.cu: the context (ops_ctx_init / ops_ctx_free, written by hand). */
dk_status cuda_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void cuda_ctx_free(ops_ctx *ctx);

#define DK_OP(name, params, args) void cuda_##name params;
#define DK_OP_RET(type, name, params, args) type cuda_##name params;
#include "kernels/ops_list.h"

/* Kernels of ops_matmul beside cuBLASLt, for products x W^T: 1 when they
 * computed it, 0 to leave it to cuBLASLt. matmul_gemv.cu takes M <= 8 rows,
 * matmul_skinny.cu 9 to 64 rows (K % 64 == 0), matmul_skinny_wgmma.cu up
 * to 64 rows (K % 64 == 0, sm_90 only). Their grids and split counts
 * can be pinned through ctx->tuning (ops.h). */
int cuda_matmul_gemv(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                     int trans_a, int trans_b, float alpha, float beta);
int cuda_matmul_skinny(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                       int trans_a, int trans_b, float alpha, float beta);
int cuda_matmul_skinny_wgmma(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                             int trans_a, int trans_b, float alpha, float beta);
/* h[M, I] = swiglu(A W^T), W the [2I, K] gate|up weight, on the wgmma
 * skinny kernel in one launch: 1 when it computed it, 0 to leave it to the
 * ops in turn (not sm_90, M > 64, K % 64, or a split plan). */
int cuda_matmul_skinny_wgmma_swiglu(ops_ctx *ctx, void *h, const void *a, const void *w, int M, int I, int K);
/* clusters[s] for s = 2, 4, 8: the most clusters of s blocks of the wgmma
 * skinny kernel the ctx's GPU holds at once (what its plan fits within). */
void cuda_skinny_wgmma_clusters(ops_ctx *ctx, int *clusters);
/* The columns a block of that kernel's chosen plan for N columns and K
 * (skinny_plan.h, before any ops_tuning pin); *splits gets its split count. */
int cuda_skinny_wgmma_plan(ops_ctx *ctx, int N, int K, int *splits);

/* The lm head's one-kernel passes on sm_90 (lmhead_wgmma.cu), which reduce
 * the logits in registers instead of writing them: _fits says whether they
 * serve these operands (ops_tuning.lmhead_kernel, C % 8, alignment, GPU);
 * _forward does ops_lmhead_forward without keep (scratch: _fwd_scratch
 * bytes); _dz writes bf16 dz[rows, ldz] of tokens t0.. (h points at t0) and
 * columns c0 .. c0 + n - 1. Each returns 1 when it computed, 0 otherwise. */
int cuda_lmhead_wgmma_fits(const ops_ctx *ctx, const void *h, const void *W, int C);
size_t cuda_lmhead_wgmma_fwd_scratch(int T, int V);
int cuda_lmhead_forward_wgmma(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                              const int32_t *target, int T, int C, int V, float inv_temp);
int cuda_lmhead_dz_wgmma(ops_ctx *ctx, void *dz, int ldz, const float *dlogprob, const float *dentropy, const void *h,
                         const void *W, const int32_t *target, const float *lse, const float *entropy, int t0, int rows,
                         int C, int V, int c0, int n, float inv_temp);

#ifdef __cplusplus
}
#endif

#endif
