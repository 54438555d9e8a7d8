/* fused_matmul_cpu.c: the fp32 reference of ops_rmsnorm_matmul: the norm
 * into tmp, then the matmul, the same ops a step would otherwise run, so
 * the fused op and the sequence it replaces give the same values on this
 * backend. */
#include <stdlib.h>

#include "common/util.h"
#include "kernels/ops_cpu.h"

void cpu_rmsnorm_matmul(ops_ctx *ctx, void *c, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                        int N, int K, float eps, float alpha, float beta) {
    if (M < 0 || N < 0 || K <= 0) DK_ABORT("ops_rmsnorm_matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    float *rstd = dk_malloc((size_t)M * sizeof(float));
    cpu_rmsnorm_forward(ctx, tmp, rstd, x, norm_w, M, K, eps);
    free(rstd);
    cpu_matmul(ctx, c, 0, tmp, w, M, N, K, 0, 1, alpha, beta);
}
