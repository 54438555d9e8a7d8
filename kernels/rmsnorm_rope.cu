/* rmsnorm_rope.cu: ops_rmsnorm_rope_forward / _backward on the CUDA
 * backend. A training layer's q and k each went through an RMSNorm kernel
 * and a rotation kernel in the forward, and a rotation and an RMSNorm
 * backward in the backward: two reads and two writes of the rows where one
 * of each does. Here the RMSNorm kernels of norm_common.cuh rotate their
 * rounded output before the store, and the incoming gradient after the
 * load (the RP instances), with rope.cu's code (rope_common.cuh); the rest
 * of each kernel, its grid and its reductions, are the plain RMSNorm's, so
 * the bits are those of the ops in turn. Shapes the one-pass plan does not
 * take (norm_rope_fits) run the ops in turn. */
#include "kernels/norm_common.cuh"

extern "C" void cuda_rmsnorm_rope_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w,
                                          const int32_t *pos, int T, int H, int D, float eps, float theta) {
    if (T < 0 || H <= 0 || D <= 0 || D % 2)
        DK_ABORT("ops_rmsnorm_rope_forward: bad shape T=%d H=%d D=%d (D even)", T, H, D);
    const norm_rope rp = {pos, H, theta};
    if (norm_forward<false>(ctx, out, NULL, rstd, x, w, NULL, T * H, D, eps, &rp)) return;
    cuda_rmsnorm_forward(ctx, out, rstd, x, w, T * H, D, eps);
    cuda_rope_forward(ctx, out, pos, T, H, D, theta);
}

extern "C" void cuda_rmsnorm_rope_backward(ops_ctx *ctx, void *dx, float *dw, void *dout, const void *x,
                                           const void *w, const float *rstd, const int32_t *pos, int T, int H, int D,
                                           float theta) {
    if (T < 0 || H <= 0 || D <= 0 || D % 2)
        DK_ABORT("ops_rmsnorm_rope_backward: bad shape T=%d H=%d D=%d (D even)", T, H, D);
    const norm_rope rp = {pos, H, theta};
    if (norm_backward<false>(ctx, dx, dw, NULL, dout, x, w, NULL, rstd, T * H, D, 0, "ops_rmsnorm_rope_backward",
                             &rp))
        return;
    cuda_rope_backward(ctx, dout, pos, T, H, D, theta);
    cuda_rmsnorm_backward(ctx, dx, dw, dout, x, w, rstd, T * H, D, 0);
}
