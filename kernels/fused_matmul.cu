/* fused_matmul.cu: ops_rmsnorm_matmul on the CUDA backend. A decode step at
 * batch 1 is a chain of about ten kernels per layer, and the RMSNorm kernels
 * before q|k|v and gate|up move a few kilobytes each: their cost is the
 * launch. For up to GEMV_MAX_M rows (whose normalised copy fits
 * GEMV_XS_MAX bytes of shared memory) each block of the few-row product
 * kernel of gemv_common.cuh reads the raw rows and normalises them into
 * shared memory before its columns, so the step loses those kernels.
 * Larger products run the two ops in turn through tmp, where the matmul's
 * own kernels win.
 *
 * The SwiGLU between gate|up and down rides on the gate|up product's
 * output instead (ops_rmsnorm_matmul_swiglu): a warp streams the gate row n
 * and the up row n + I and writes h[n], one activation per output. Fused
 * into the down projection's loads it cost more than it saved: every one
 * of the N warps recomputed the activation of the whole K-long input (on
 * an H200, 28.6 us against 14.8 us for SwiGLU then the product at one
 * row). At 9..64 rows on sm_90 the wgmma skinny kernel computes gate|up
 * and the SwiGLU in one launch (cuda_matmul_skinny_wgmma_swiglu). */
#include "kernels/gemv_common.cuh"
#include "kernels/ops_cuda.h"

/* N has no cap here, unlike the plain few-row product: the lm head of a
 * decode step comes this way with its final norm. */
static int fused_fits(int M, int N, int K, const void *a, const void *w, const void *norm_w) {
    return M >= 1 && M <= GEMV_MAX_M && N >= 1 && K >= 8 && K % 8 == 0 &&
           (size_t)M * K * sizeof(bf16) <= GEMV_XS_MAX && is_aligned16(a) &&
           is_aligned16(w) && (!norm_w || is_aligned16(norm_w));
}

/* tmp[M, K] = rmsnorm(x) * norm_w, the rows the unfused paths multiply; rstd
 * is not needed past the norm, so scratch is free again for the product. */
static void norm_rows(ops_ctx *ctx, void *tmp, const void *x, const void *norm_w, int M, int K, float eps,
                      const char *op) {
    float *rstd = (float *)ctx_scratch(ctx, (size_t)M * sizeof(float), op);
    cuda_rmsnorm_forward(ctx, tmp, rstd, x, norm_w, M, K, eps);
}

extern "C" void cuda_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w,
                                    const void *w, int M, int N, int K, float eps, float alpha, float beta) {
    if (M < 0 || N < 0 || K <= 0) DK_ABORT("ops_rmsnorm_matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    if (fused_fits(M, N, K, x, w, norm_w)) {
        gemv_args g = {c, (const bf16 *)x, (const bf16 *)w, (const bf16 *)norm_w, N, K, K, eps, alpha, beta};
        if (c_f32) gemv_launch_rows<GEMV_RMSNORM, 1, true>(ctx, g, M);
        else gemv_launch_rows<GEMV_RMSNORM, 1, false>(ctx, g, M);
        return;
    }
    norm_rows(ctx, tmp, x, norm_w, M, K, eps, "ops_rmsnorm_matmul");
    cuda_matmul(ctx, c, c_f32, tmp, w, M, N, K, 0, 1, alpha, beta);
}

extern "C" void cuda_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x,
                                           const void *norm_w, const void *w, int M, int I, int K, float eps) {
    if (M < 0 || I < 0 || K <= 0) DK_ABORT("ops_rmsnorm_matmul_swiglu: bad shape M=%d I=%d K=%d", M, I, K);
    const int fuse = ctx->tuning.swiglu_fuse;
    if (fuse != 0 && fuse != -1) DK_ABORT("ops_tuning.swiglu_fuse = %d: expected 0 or -1", fuse);
    if (M == 0 || I == 0) return;
    if (fused_fits(M, 2 * I, K, x, w, norm_w)) {
        gemv_args g = {h, (const bf16 *)x, (const bf16 *)w, (const bf16 *)norm_w, I, K, K, eps, 1.0f, 0.0f};
        gemv_launch_rows<GEMV_RMSNORM, 2, false>(ctx, g, M);
        return;
    }
    /* 9..64 rows on sm_90: the norm, then gate|up and the SwiGLU in one
     * wgmma kernel (matmul_skinny_wgmma.cu), where the skinny kernels are
     * allowed (ops_tuning.skinny_use 0 or 2, swiglu_fuse 0) and the
     * product's plan is unsplit; its bits are those of the ops in turn on
     * that kernel. */
    const int use = ctx->tuning.skinny_use;
    if (M > GEMV_MAX_M && fuse == 0 && (use == 0 || use == 2)) {
        norm_rows(ctx, tmp, x, norm_w, M, K, eps, "ops_rmsnorm_matmul_swiglu");
        if (cuda_matmul_skinny_wgmma_swiglu(ctx, h, tmp, w, M, I, K)) return;
        cuda_matmul(ctx, gu, 0, tmp, w, M, 2 * I, K, 0, 1, 1.0f, 0.0f);
        cuda_swiglu_forward(ctx, h, gu, M, I);
        return;
    }
    cuda_rmsnorm_matmul(ctx, gu, 0, tmp, x, norm_w, w, M, 2 * I, K, eps, 1.0f, 0.0f);
    cuda_swiglu_forward(ctx, h, gu, M, I);
}
