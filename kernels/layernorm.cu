/* layernorm.cu: LayerNorm over rows of length C on the CUDA backend with
 * PyTorch's biased variance: out = ((x - mean) * rstd) * w + b (b may be
 * NULL), mean and rstd saved in fp32. The row holds in registers, so the
 * variance is an exact second pass over x - mean (no E[x^2] - E[x]^2
 * cancellation). Kernels in norm_common.cuh, shared with RMSNorm; dw and db
 * are accumulated (+=) deterministically, db skipped when NULL. */
#include "kernels/norm_common.cuh"

extern "C" void cuda_layernorm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x,
                                       const void *w, const void *b, int N, int C, float eps) {
    norm_forward<true>(ctx, out, mean, rstd, x, w, b, N, C, eps);
}

extern "C" void cuda_layernorm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout,
                                        const void *x, const void *w, const float *mean, const float *rstd, int N,
                                        int C) {
    norm_backward<true>(ctx, dx, dw, db, dout, x, w, mean, rstd, N, C, 0, "ops_layernorm_backward");
}
