/* matmul_cpu.c: C = alpha * op(A) @ op(B) + beta * C on the CPU through
 * OpenBLAS's row-major sgemm, and the residual form C = A W^T + R as a copy
 * of R then the same sgemm with beta 1. c_f32 needs no case of its own here
 * because act is already fp32 on this backend. */
#include <string.h>

#include "kernels/ops_cpu.h"

/* sgemm needs no complex type; this keeps openblas_config.h from including
 * <complex.h>, whose one-letter macro `I` breaks any later declaration that
 * uses I as a name. */
#define FORCE_OPENBLAS_COMPLEX_STRUCT
#include <cblas.h>

void cpu_matmul(ops_ctx *ctx, void *c_, int c_f32, const void *a, const void *b, int M, int N, int K,
                int trans_a, int trans_b, float alpha, float beta) {
    float *c = c_;
    if (M < 0 || N < 0 || K < 0) DK_ABORT("ops_matmul: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        /* BLAS rejects a leading dimension of 0 (A is [M,0]); the product is
         * empty, so C = beta * C, where beta == 0 writes zeros without reading
         * C, as sgemm does. */
        for (size_t i = 0; i < (size_t)M * N; i++) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
        return;
    }
    /* Row-major leading dimensions are the stored row lengths: A is stored
     * [M,K] (or [K,M] when transposed), B [K,N] (or [N,K]), C [M,N]. */
    int lda = trans_a ? M : K;
    int ldb = trans_b ? K : N;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, (const float *)a, lda, (const float *)b, ldb, beta, c, N);
}

void cpu_matmul_residual(ops_ctx *ctx, void *c, const void *a, const void *w, const void *r, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0) DK_ABORT("ops_matmul_residual: negative size M=%d N=%d K=%d", M, N, K);
    if (c != r && M > 0 && N > 0) memcpy(c, r, (size_t)M * N * sizeof(float));
    cpu_matmul(ctx, c, 0, a, w, M, N, K, 0, 1, 1.0f, 1.0f);
}
