/* rmsnorm_rope_cpu.c: ops_rmsnorm_rope_forward / _backward on the CPU
 * backend: the RMSNorm and the rotation in turn. The CPU backend keeps
 * fp32 throughout, so one pass would gain nothing here; the ops exist as
 * one call so that the CUDA backend can fuse them (rmsnorm_rope.cu). */
#include "kernels/ops_cpu.h"

void cpu_rmsnorm_rope_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, const int32_t *pos,
                              int T, int H, int D, float eps, float theta) {
    cpu_rmsnorm_forward(ctx, out, rstd, x, w, T * H, D, eps);
    cpu_rope_forward(ctx, out, pos, T, H, D, theta);
}

void cpu_rmsnorm_rope_backward(ops_ctx *ctx, void *dx, float *dw, void *dout, const void *x, const void *w,
                               const float *rstd, const int32_t *pos, int T, int H, int D, float theta) {
    cpu_rope_backward(ctx, dout, pos, T, H, D, theta);
    cpu_rmsnorm_backward(ctx, dx, dw, dout, x, w, rstd, T * H, D, 0);
}
