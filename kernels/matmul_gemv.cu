/* matmul_gemv.cu: the few-row products of ops_matmul, C[M, N] = alpha * A[M, K]
 * W[N, K]^T + beta * C for M <= GEMV_MAX_M: a decode step at a small batch
 * multiplies one to a few token rows by each weight matrix. Reading the
 * weights once is the whole cost, and cuBLASLt's kernels for such shapes
 * leave most of the bandwidth unused (26-44% of the copy rate on the q|k|v,
 * o and down projections at one row).
 *
 * The kernel (gemv_common.cuh) gives each output column a warp that
 * streams W's row once with several loads in flight. Taken only for K % 8
 * == 0 and 16-byte aligned A and W; beta == 0 never reads C. */
#include "kernels/gemv_common.cuh"
#include "kernels/ops_cuda.h"

extern "C" int cuda_matmul_gemv(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                                int trans_a, int trans_b, float alpha, float beta) {
    if (M < 1 || M > GEMV_MAX_M || N < 1 || N > GEMV_MAX_N || K < 8 || K % 8 || trans_a || !trans_b) return 0;
    if (!is_aligned16(a) || !is_aligned16(b)) return 0;
    gemv_args g = {c, (const bf16 *)a, (const bf16 *)b, NULL, N, K, K, 0.0f, alpha, beta};
    if (c_f32) gemv_launch_rows<GEMV_PLAIN, 1, true>(ctx, g, M);
    else gemv_launch_rows<GEMV_PLAIN, 1, false>(ctx, g, M);
    return 1;
}
