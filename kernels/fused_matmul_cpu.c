/* fused_matmul_cpu.c: the fp32 references of ops_rmsnorm_matmul and
 * ops_rmsnorm_matmul_swiglu: the norm into tmp, then the matmul (then the
 * SwiGLU), the same ops a step would otherwise run, so the fused ops and the
 * sequences they replace give the same values on this backend. */
#include <stdlib.h>

#include "common/util.h"
#include "kernels/ops_cpu.h"

void cpu_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                        int N, int K, float eps, float alpha, float beta) {
    if (M < 0 || N < 0 || K <= 0) DK_ABORT("ops_rmsnorm_matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    float *rstd = dk_malloc((size_t)M * sizeof(float));
    cpu_rmsnorm_forward(ctx, tmp, rstd, x, norm_w, M, K, eps);
    free(rstd);
    cpu_matmul(ctx, c, c_f32, tmp, w, M, N, K, 0, 1, alpha, beta);
}

void cpu_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w,
                               const void *w, int M, int I, int K, float eps) {
    if (M < 0 || I < 0 || K <= 0) DK_ABORT("ops_rmsnorm_matmul_swiglu: bad shape M=%d I=%d K=%d", M, I, K);
    if (M == 0 || I == 0) return;
    cpu_rmsnorm_matmul(ctx, gu, 0, tmp, x, norm_w, w, M, 2 * I, K, eps, 1.0f, 0.0f);
    cpu_swiglu_forward(ctx, h, gu, M, I);
}
