/* gemv_common.cuh: the few-row product kernel that matmul_gemv.cu (plain
 * rows) and fused_matmul.cu (rows normalised on the fly) share.
 *
 * One warp per output column n, GEMV_WARPS columns per block: the lanes
 * stride over W's row n in 16-byte chunks, GEMV_UNROLL chunks each issued
 * before any is used (streamed past L1, read once), and over the matching
 * chunks of the M input rows (small, shared by every warp, kept in cache),
 * transformed as they are read:
 *   GEMV_PLAIN    a[m, k]
 *   GEMV_RMSNORM  act((a[m, k] * r_m) * norm_w[k]), r_m = 1 / sqrt(mean_k a[m, k]^2 + eps),
 *                 each warp summing its rows' squares first (from cache)
 * where act() rounds to bf16, as the unfused op's output would be. fp32 sums
 * in a fixed order (deterministic), a warp reduction, then alpha, beta and
 * one rounding to the output type. No shared memory and no block barrier,
 * so many warps stay resident and keep enough loads in flight. Launched as
 * a programmatic dependent launch (cuda_common.cuh). */
#ifndef DK_GEMV_COMMON_CUH
#define DK_GEMV_COMMON_CUH

#include "kernels/cuda_common.cuh"

#define GEMV_MAX_M 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 8
/* Wider outputs (the lm head) already run near the copy rate in cuBLASLt. */
#define GEMV_MAX_N 32768

enum { GEMV_PLAIN, GEMV_RMSNORM };

struct gemv_args {
    void *c;
    const bf16 *a, *w, *norm_w;
    int N, K, lda; /* lda: elements between input rows */
    float eps, alpha, beta;
};

__device__ __forceinline__ float gemv_act(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

template <int M, int PRO, bool F32OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_rows(gemv_args p) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int K = p.K, chunks = K / 8;
    const uint4 *wr = (const uint4 *)(p.w + (size_t)n * K);
    /* The first GEMV_UNROLL chunks of W's row go in flight before the wait
     * for the kernel before (programmatic dependent launch, decode steps):
     * the weights are no kernel's output, and at K = 2048 that is the whole
     * row, so the weight stream overlaps the previous kernel's tail. */
    uint4 wv[GEMV_UNROLL];
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        const int ch = lane + 32 * u;
        wv[u] = n < p.N && ch < chunks ? ld_stream(wr + ch) : make_uint4(0u, 0u, 0u, 0u);
    }
    pdl_wait();
    pdl_launch_dependents();
    if (n >= p.N) return;
    float r[M];
#pragma unroll
    for (int m = 0; m < M; m++) r[m] = 1.0f;
    if (PRO == GEMV_RMSNORM) {
#pragma unroll
        for (int m = 0; m < M; m++) {
            float ss = 0.0f;
            for (int ch = lane; ch < chunks; ch += 32) {
                float x[8];
                bf16x8_to_f32(__ldg((const uint4 *)(p.a + (size_t)m * p.lda) + ch), x);
#pragma unroll
                for (int j = 0; j < 8; j++) ss = fmaf(x[j], x[j], ss);
            }
            r[m] = 1.0f / sqrtf(warp_sum(ss) * (1.0f / (float)K) + p.eps);
        }
    }
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0.0f;
    for (int base = lane;;) {
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int ch = base + 32 * u;
            if (ch >= chunks) break;
            float wf[8], nw[8];
            bf16x8_to_f32(wv[u], wf);
            if (PRO == GEMV_RMSNORM) bf16x8_to_f32(__ldg((const uint4 *)p.norm_w + ch), nw);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint4 *row = (const uint4 *)(p.a + (size_t)m * p.lda);
                float af[8];
                bf16x8_to_f32(__ldg(row + ch), af);
                if (PRO == GEMV_RMSNORM) {
#pragma unroll
                    for (int j = 0; j < 8; j++) af[j] = gemv_act((af[j] * r[m]) * nw[j]);
                }
#pragma unroll
                for (int j = 0; j < 8; j++) acc[m] = fmaf(wf[j], af[j], acc[m]);
            }
        }
        base += 32 * GEMV_UNROLL;
        if (base >= chunks) break;
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int ch = base + 32 * u;
            wv[u] = ch < chunks ? ld_stream(wr + ch) : make_uint4(0u, 0u, 0u, 0u);
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
        const size_t idx = (size_t)lane * p.N + n;
        float out = p.alpha * s;
        if (F32OUT) {
            float *cf = (float *)p.c;
            if (p.beta != 0.0f) out += p.beta * cf[idx];
            cf[idx] = out;
        } else {
            bf16 *cb = (bf16 *)p.c;
            if (p.beta != 0.0f) out += p.beta * __bfloat162float(cb[idx]);
            cb[idx] = __float2bfloat16_rn(out);
        }
    }
}

template <int M, int PRO>
static void gemv_launch_pro(cudaStream_t st, const gemv_args &p, int c_f32) {
    const dim3 blocks((unsigned)((p.N + GEMV_WARPS - 1) / GEMV_WARPS)), threads(GEMV_WARPS * 32);
    if (c_f32) cuda_launch_pdl(st, cuda_pdl_rows(M), gemv_rows<M, PRO, true>, blocks, threads, 0, p);
    else cuda_launch_pdl(st, cuda_pdl_rows(M), gemv_rows<M, PRO, false>, blocks, threads, 0, p);
}

/* M (1..GEMV_MAX_M) as a template argument. */
template <int PRO>
static void gemv_launch_rows(cudaStream_t st, const gemv_args &p, int M, int c_f32) {
    switch (M) {
    case 1: gemv_launch_pro<1, PRO>(st, p, c_f32); break;
    case 2: gemv_launch_pro<2, PRO>(st, p, c_f32); break;
    case 3: gemv_launch_pro<3, PRO>(st, p, c_f32); break;
    case 4: gemv_launch_pro<4, PRO>(st, p, c_f32); break;
    case 5: gemv_launch_pro<5, PRO>(st, p, c_f32); break;
    case 6: gemv_launch_pro<6, PRO>(st, p, c_f32); break;
    case 7: gemv_launch_pro<7, PRO>(st, p, c_f32); break;
    default: gemv_launch_pro<8, PRO>(st, p, c_f32); break;
    }
    CUDA_LAUNCH_CHECK();
}

#endif
