/* matmul_gemv.cu: the few-row products of ops_matmul, C[M, N] = alpha * A[M, K]
 * W[N, K]^T + beta * C for M <= GEMV_MAX_M: a decode step at a small batch
 * multiplies one to a few token rows by each weight matrix. Reading the
 * weights once is the whole cost, and cuBLASLt's kernels for such shapes
 * leave most of the bandwidth unused (26-44% of the copy rate on the q|k|v,
 * o and down projections at one row).
 *
 * One warp per output column n, GEMV_WARPS columns per block: the lanes
 * stride over W's row n in 16-byte chunks, GEMV_UNROLL chunks each issued
 * before any is used (streamed past L1, read once), and over the matching
 * chunks of the M rows of A (small, shared by every warp, kept in cache).
 * fp32 sums in a fixed order (deterministic), a warp reduction, then alpha,
 * beta and one rounding to the output type. No shared memory and no block
 * barrier, so many warps stay resident and keep enough loads in flight.
 * Taken only for K % 8 == 0 and 16-byte aligned A and W; beta == 0 never
 * reads C. */
#include "kernels/cuda_common.cuh"

#define GEMV_MAX_M 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 8
/* Wider outputs (the lm head) already run near the copy rate in cuBLASLt. */
#define GEMV_MAX_N 32768

template <int M, bool F32OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_rows(void *c, const bf16 *__restrict__ a, const bf16 *__restrict__ w, int N, int K, float alpha, float beta) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const int chunks = K / 8;
    const uint4 *wr = (const uint4 *)(w + (size_t)n * K);
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.0f;
    for (int base = lane; base < chunks; base += 32 * GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int ch = base + 32 * u;
            wv[u] = ch < chunks ? ld_stream(wr + ch) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int ch = base + 32 * u;
            if (ch >= chunks) break;
            float wf[8];
            bf16x8_to_f32(wv[u], wf);
#pragma unroll
            for (int m = 0; m < M; m++) {
                float af[8];
                bf16x8_to_f32(__ldg((const uint4 *)(a + (size_t)m * K) + ch), af);
#pragma unroll
                for (int j = 0; j < 8; j++) acc[m] = fmaf(wf[j], af[j], acc[m]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = warp_sum(acc[m]);
    if (lane < M) {
        /* Lane m writes row m (registers indexed by a constant per branch). */
        float s = 0.0f;
#pragma unroll
        for (int m = 0; m < M; m++)
            if (lane == m) s = acc[m];
        const size_t idx = (size_t)lane * N + n;
        float out = alpha * s;
        if (F32OUT) {
            float *cf = (float *)c;
            if (beta != 0.0f) out += beta * cf[idx];
            cf[idx] = out;
        } else {
            bf16 *cb = (bf16 *)c;
            if (beta != 0.0f) out += beta * __bfloat162float(cb[idx]);
            cb[idx] = __float2bfloat16_rn(out);
        }
    }
}

template <int M>
static void gemv_launch(cudaStream_t st, void *c, int c_f32, const void *a, const void *w, int N, int K, float alpha,
                        float beta) {
    const unsigned blocks = (unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS);
    if (c_f32) gemv_rows<M, true><<<blocks, GEMV_WARPS * 32, 0, st>>>(c, (const bf16 *)a, (const bf16 *)w, N, K, alpha, beta);
    else gemv_rows<M, false><<<blocks, GEMV_WARPS * 32, 0, st>>>(c, (const bf16 *)a, (const bf16 *)w, N, K, alpha, beta);
}

extern "C" int cuda_matmul_gemv(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                                int trans_a, int trans_b, float alpha, float beta) {
    if (M < 1 || M > GEMV_MAX_M || N < 1 || N > GEMV_MAX_N || K < 8 || K % 8 || trans_a || !trans_b) return 0;
    if (!is_aligned16(a) || !is_aligned16(b)) return 0;
    cudaStream_t st = ctx_stream(ctx);
    switch (M) {
    case 1: gemv_launch<1>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 2: gemv_launch<2>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 3: gemv_launch<3>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 4: gemv_launch<4>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 5: gemv_launch<5>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 6: gemv_launch<6>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    case 7: gemv_launch<7>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    default: gemv_launch<8>(st, c, c_f32, a, b, N, K, alpha, beta); break;
    }
    CUDA_LAUNCH_CHECK();
    return 1;
}
