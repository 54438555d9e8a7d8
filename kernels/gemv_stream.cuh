/* gemv_stream.cuh: the one- and two-row product kernel of a decode step at
 * batch 1 and 2 (gemv_common.cuh picks it; same arguments, same output).
 *
 * gemv_rows keeps a warp's weight loads in registers, so the loads in
 * flight are bounded by occupancy, a 2048-column product runs in two or
 * three waves of short-lived CTAs, and the next kernel of the step cannot
 * start its own loads until the last of those CTAs has left the SM. Here
 * one CTA per SM streams its share of W's rows through a ring of 4 KB
 * shared-memory stages filled by bulk copies (TMA): each warp owns
 * S stages, its lane 0 starts the copies, the warp waits on the
 * stage's mbarrier, computes, and refills the stage with its next chunk.
 * The first S chunks of every warp are in flight before the wait
 * for the kernel before (weights are no kernel's output), and the CTA
 * leaves room on the SM for the next kernel's CTA, which does the same: the
 * weight stream runs across kernel boundaries.
 *
 * The M input rows are staged once per CTA, transformed as gemv_rows does
 * (GEMV_RMSNORM: act((a * r) * norm_w), r from the row's sum of squares),
 * as bf16 in shared memory. A column's sum is, per lane, its 16-byte
 * pieces in K order, then a warp reduction: for K = 2048 (one chunk a row)
 * the order of gemv_rows with one warp per column. Streaming copies carry
 * an evict-first L2 policy, so they do not push out weights prefetched for
 * later (ops_prefetch_hint). */
#ifndef DK_GEMV_STREAM_CUH
#define DK_GEMV_STREAM_CUH

#include "kernels/bulk_common.cuh"
#include "kernels/mma_common.cuh" /* smem_addr */

#define GS_MAX_M 2
#define GS_WARPS 8
#define GS_MAX_STAGES 6
#define GS_CHUNK 2048 /* elements of a stage: 4 KB */

/* Dynamic shared memory: the ring of S stages a warp, the staged input
 * rows, the barriers and the sums of squares. */
static inline size_t gemv_stream_smem(int M, int K, int S) {
    return (size_t)GS_WARPS * S * GS_CHUNK * 2 + (size_t)M * K * 2 + GS_WARPS * S * 8 + GS_WARPS * GS_MAX_M * 4;
}

template <int M, int PRO, int NR, bool F32OUT>
__global__ void __launch_bounds__(GS_WARPS * 32, 1) gemv_stream(gemv_args p, int S) {
    extern __shared__ __align__(128) unsigned char gs_smem[];
    bf16 *ring = (bf16 *)gs_smem;
    bf16 *xs = ring + GS_WARPS * S * GS_CHUNK;
    const int K = p.K, N = p.N;
    uint64_t *bars = (uint64_t *)(xs + (size_t)M * K);
    float *red = (float *)(bars + GS_WARPS * S); /* [GS_WARPS][M] partial sums of squares */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nch = (K + GS_CHUNK - 1) / GS_CHUNK; /* chunks of a row */
    /* This CTA's columns [n0, n1); warp w takes n0 + w, n0 + w + GS_WARPS, ... */
    const int n0 = (int)((long)blockIdx.x * N / gridDim.x), n1 = (int)((long)(blockIdx.x + 1) * N / gridDim.x);
    const int ncols = n1 - n0 > warp ? (n1 - n0 - warp + GS_WARPS - 1) / GS_WARPS : 0;
    const int units = ncols * NR * nch; /* chunks this warp streams, column by column */
    bf16 *my_ring = ring + warp * S * GS_CHUNK;
    const uint32_t my_bar = smem_addr(bars + warp * S);
    const uint64_t pol = l2_evict_first_policy();

    /* Unit u of this warp: chunk c of row r of its column j. */
    auto issue = [&](int u) {
        const int c = u % nch, r = (u / nch) % NR, j = u / (nch * NR);
        const int n = n0 + warp + j * GS_WARPS;
        const int len = min(GS_CHUNK, K - c * GS_CHUNK);
        const uint32_t bar = my_bar + (u % S) * 8;
        mbar_expect(bar, (uint32_t)len * 2);
        bulk_load(smem_addr(my_ring + (u % S) * GS_CHUNK),
                  p.w + ((size_t)n + (size_t)r * N) * K + (size_t)c * GS_CHUNK, (uint32_t)len * 2, bar, pol);
    };
    if (lane == 0) {
        for (int s = 0; s < S; s++) mbar_init(my_bar + s * 8, 1);
        mbar_init_fence();
        for (int u = 0; u < S && u < units; u++) issue(u);
    }
    /* The norm weights are no kernel's output either. */
    const int pieces = K / 8; /* 16-byte pieces of an input row */
    constexpr int XP = 4;     /* pieces a thread stages per row: K <= XP * 8 * blockDim */
    uint4 nw[XP];
#pragma unroll
    for (int i = 0; i < XP; i++) {
        const int pc = threadIdx.x + i * GS_WARPS * 32;
        nw[i] = PRO == GEMV_RMSNORM && pc < pieces ? __ldg((const uint4 *)p.norm_w + pc) : make_uint4(0u, 0u, 0u, 0u);
    }
    pdl_wait(); /* the input rows are the kernel before's output */
    pdl_launch_dependents();

    /* Stage the input rows: load, sum squares (CTA-wide), transform, store. */
    uint4 xv[M][XP];
    float ss[M];
#pragma unroll
    for (int m = 0; m < M; m++) {
        ss[m] = 0.0f;
#pragma unroll
        for (int i = 0; i < XP; i++) {
            const int pc = threadIdx.x + i * GS_WARPS * 32;
            xv[m][i] = pc < pieces ? __ldg((const uint4 *)(p.a + (size_t)m * p.lda) + pc) : make_uint4(0u, 0u, 0u, 0u);
            float x[8];
            bf16x8_to_f32(xv[m][i], x);
#pragma unroll
            for (int e = 0; e < 8; e++) ss[m] = fmaf(x[e], x[e], ss[m]);
        }
    }
    float rs[M];
    if (PRO == GEMV_RMSNORM) {
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float w = warp_sum(ss[m]);
            if (lane == 0) red[warp * M + m] = w;
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < M; m++) {
            float t = 0.0f;
            for (int w = 0; w < GS_WARPS; w++) t += red[w * M + m]; /* warp order: the same in every thread */
            rs[m] = 1.0f / sqrtf(t * (1.0f / (float)K) + p.eps);
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int i = 0; i < XP; i++) {
            const int pc = threadIdx.x + i * GS_WARPS * 32;
            if (pc >= pieces) break;
            uint4 v = xv[m][i];
            if (PRO == GEMV_RMSNORM) {
                float x[8], w[8];
                bf16x8_to_f32(v, x);
                bf16x8_to_f32(nw[i], w);
                __align__(16) bf16 o[8];
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = __float2bfloat16_rn((x[e] * rs[m]) * w[e]);
                v = *(const uint4 *)o;
            }
            ((uint4 *)(xs + (size_t)m * K))[pc] = v;
        }
    __syncthreads();

    float acc[NR][M];
    for (int u = 0, j = 0; u < units; j++) {
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = 0.0f;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            for (int c = 0; c < nch; c++, u++) {
                const int s = u % S;
                mbar_wait(my_bar + s * 8, (u / S) & 1);
                const uint4 *wq = (const uint4 *)(my_ring + s * GS_CHUNK);
                const int cp = min(GS_CHUNK, K - c * GS_CHUNK) / 8; /* pieces in this chunk */
#pragma unroll 4
                for (int pc = lane; pc < cp; pc += 32) {
                    float wf[8];
                    bf16x8_to_f32(wq[pc], wf);
#pragma unroll
                    for (int m = 0; m < M; m++) {
                        float af[8];
                        bf16x8_to_f32(((const uint4 *)(xs + (size_t)m * K + (size_t)c * GS_CHUNK))[pc], af);
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[r][m] = fmaf(wf[e], af[e], acc[r][m]);
                    }
                }
                __syncwarp(); /* every lane is done with the stage before it is refilled */
                if (lane == 0 && u + S < units) issue(u + S);
            }
        }
        const int n = n0 + warp + j * GS_WARPS;
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = warp_sum(acc[r][m]);
        if (lane < M) {
            float v[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                v[r] = 0.0f;
#pragma unroll
                for (int m = 0; m < M; m++)
                    if (lane == m) v[r] = acc[r][m];
            }
            const size_t idx = (size_t)lane * N + n;
            if (NR == 2) {
                const float g = gemv_act(v[0]), up = gemv_act(v[NR - 1]);
                ((bf16 *)p.c)[idx] = __float2bfloat16_rn(silu_f(g) * up);
            } else {
                float out = p.alpha * v[0];
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
    }
}

/* Whether the streaming kernel serves this product: a row or two, input
 * rows that the CTA can stage (K <= 4 * 8 * 256), and room for two of its
 * CTAs on an SM. */
static inline bool gemv_stream_fits(int M, int K) { return M >= 1 && M <= GS_MAX_M && K <= 4 * 8 * GS_WARPS * 32; }

/* S stages a warp (cuda_gemv_stream_stages). */
template <int M, int PRO, int NR, bool F32OUT>
static void gemv_stream_launch(const ops_ctx *ctx, cudaStream_t st, const gemv_args &p, int S) {
    const size_t smem = gemv_stream_smem(M, p.K, S);
    auto kernel = gemv_stream<M, PRO, NR, F32OUT>;
    (void)cuda_kernel_per_sm(ctx, (const void *)kernel, GS_WARPS * 32, smem); /* raises the kernel's smem limit */
    cuda_launch_pdl(st, cuda_pdl_rows(M), kernel, dim3((unsigned)cuda_sm_count(ctx)), dim3(GS_WARPS * 32), smem, p,
                    S);
}

#endif
