/* rmsnorm.cu: RMSNorm over rows of length C on the CUDA backend, out = (x *
 * rstd) * w, the order Hugging Face's Qwen3 / Llama norm uses (normalise in
 * fp32, then scale), with rstd saved in fp32 for the backward. The same op
 * serves Qwen3's per-head q/k norm (N = tokens * heads, C = head_dim). The
 * kernels live in norm_common.cuh, shared with LayerNorm; the weight
 * gradient is accumulated (+=) into the fp32 dw deterministically, and the
 * input gradient may be added into dx (the residual stream's gradient). */
#include "kernels/norm_common.cuh"

extern "C" void cuda_rmsnorm_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N,
                                     int C, float eps) {
    norm_forward<false>(ctx, out, NULL, rstd, x, w, NULL, N, C, eps);
}

extern "C" void cuda_rmsnorm_backward(ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x,
                                      const void *w, const float *rstd, int N, int C, int accumulate) {
    norm_backward<false>(ctx, dx, dw, NULL, dout, x, w, NULL, rstd, N, C, accumulate, "ops_rmsnorm_backward");
}
