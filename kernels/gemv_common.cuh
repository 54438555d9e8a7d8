/* gemv_common.cuh: the few-row product kernel that matmul_gemv.cu (plain
 * rows) and fused_matmul.cu (rows normalised on the fly, SwiGLU output)
 * share.
 *
 * KS warps per output column n, GEMV_WARPS warps per block: the lanes of a
 * warp stride over its share of W's row n in 16-byte chunks, GEMV_UNROLL
 * chunks each issued before any is used (streamed past L1, read once), and
 * over the matching chunks of the M input rows (small, shared by every
 * warp, kept in cache), transformed as they are read:
 *   GEMV_PLAIN    a[m, k]
 *   GEMV_RMSNORM  act((a[m, k] * r_m) * norm_w[k]), r_m = 1 / sqrt(mean_k a[m, k]^2 + eps),
 *                 each warp summing its rows' squares first (from cache)
 * where act() rounds to bf16, as the unfused op's output would be. fp32 sums
 * in a fixed order (deterministic): a warp reduction, then the KS warps of
 * a column in order through shared memory; then alpha, beta and one
 * rounding to the output type. With NR = 2 a warp also streams row n + N
 * and writes act(silu(act(c_n)) * act(c_{n+N})) instead: the gate|up
 * product and the SwiGLU after it in one kernel, the same values as the
 * two ops in turn. Shared memory holds only the KS partials and, with
 * GEMV_RMSNORM, the normalised rows, so many warps stay resident and keep
 * enough loads in flight. A block walks groups of CPB columns (a grid of what fits the machine,
 * gemv_grid), and the result of a column does not depend on which block
 * computed it. With GEMV_RMSNORM the block first normalises the M rows
 * into shared memory. Launched as a programmatic dependent launch
 * (cuda_common.cuh). */
#ifndef DK_GEMV_COMMON_CUH
#define DK_GEMV_COMMON_CUH

#include "kernels/cuda_common.cuh"

#define GEMV_MAX_M 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 8
/* GEMV_RMSNORM keeps the normalised rows in shared memory: at most this
 * (the default dynamic limit), 8 rows of 3072. */
#define GEMV_XS_MAX 49152
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

/* Blocks a multiprocessor must hold at one row: 64 registers a thread
 * (128 with the gate|up pair), where the loop over column groups otherwise
 * took 72 at one row and cost a quarter of the blocks. More rows need more
 * (spills). */
__host__ __device__ constexpr int gemv_min_blocks(int M, int NR) { return M > 1 ? 1 : NR == 1 ? 4 : 2; }

template <int M, int PRO, int NR, int KS, bool F32OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32, gemv_min_blocks(M, NR)) gemv_rows(gemv_args p) {
    constexpr int CPB = GEMV_WARPS / KS; /* output columns per block and group */
    /* Two copies, used in turn by the groups a block walks: a warp may start
     * the next group's parts while a slow warp still reads this one's. */
    __shared__ float part[KS > 1 ? 2 : 1][KS > 1 ? GEMV_WARPS : 1][NR][M];
    extern __shared__ uint4 gemv_xs[]; /* GEMV_RMSNORM: the normalised rows, M x K bf16 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int K = p.K, chunks = K / 8, per = (chunks + KS - 1) / KS, kp = warp % KS;
    const int c0 = kp * per, c1 = min(chunks, c0 + per); /* this warp's chunks of K */
    const int groups = (p.N + CPB - 1) / CPB;
    /* A block walks groups blockIdx.x, + gridDim.x, ...: a warp starts its
     * next column's loads as soon as its registers are free, where a block
     * a group ended in waves (three for gate|up at one row), each a gap in
     * the weight stream while blocks retired and new ones were scheduled. */
    int g = blockIdx.x, n = g * CPB + warp / KS;
    uint4 wv[NR][GEMV_UNROLL];
    /* The batch of this lane's chunks base, base + 32, ... of column col's
     * rows (W rows col and col + N for NR = 2), zeros past c1 or for a
     * column past N. */
    auto load_batch = [&](int col, int base) {
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const uint4 *wr = (const uint4 *)(p.w + ((size_t)col + (size_t)r * p.N) * K);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                const int ch = base + 32 * u;
                wv[r][u] = col < p.N && ch < c1 ? ld_stream(wr + ch) : make_uint4(0u, 0u, 0u, 0u);
            }
        }
    };
    /* The first batch goes in flight before the wait for the kernel before
     * (programmatic dependent launch, decode steps): the weights are no
     * kernel's output, and at K = 2048 that is the whole row, so the weight
     * stream overlaps the previous kernel's tail. */
    load_batch(n, c0 + lane);
    pdl_wait();
    pdl_launch_dependents();
    if (PRO == GEMV_RMSNORM) {
        /* The block normalises the M rows once into shared memory, as bf16
         * (the unfused op's output): each warp transforming the whole row
         * for each of its columns made the transform, not the weights, the
         * cost once the weights were in (3 us of the q|k|v product's 8 on an
         * H200). Squares summed in a fixed order: thread, warp, block. */
        __shared__ float red[M][GEMV_WARPS];
        constexpr int NT = GEMV_WARPS * 32;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const uint4 *row = (const uint4 *)(p.a + (size_t)m * p.lda);
            float ss = 0.0f;
            for (int ch = threadIdx.x; ch < chunks; ch += NT) {
                float x[8];
                bf16x8_to_f32(__ldg(row + ch), x);
#pragma unroll
                for (int j = 0; j < 8; j++) ss = fmaf(x[j], x[j], ss);
            }
            ss = warp_sum(ss);
            if (lane == 0) red[m][warp] = ss;
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < M; m++) {
            float ss = 0.0f;
#pragma unroll
            for (int w = 0; w < GEMV_WARPS; w++) ss += red[m][w];
            const float rs = 1.0f / sqrtf(ss * (1.0f / (float)K) + p.eps);
            const uint4 *row = (const uint4 *)(p.a + (size_t)m * p.lda);
            for (int ch = threadIdx.x; ch < chunks; ch += NT) {
                float x[8], nw[8];
                bf16x8_to_f32(__ldg(row + ch), x);
                bf16x8_to_f32(__ldg((const uint4 *)p.norm_w + ch), nw);
#pragma unroll
                for (int j = 0; j < 8; j++) x[j] = (x[j] * rs) * nw[j];
                gemv_xs[(size_t)m * chunks + ch] = f32_to_bf16x8(x);
            }
        }
        __syncthreads();
    }
    if (KS == 1 && n >= p.N) return; /* and so is every later column of this warp */
    for (int it = 0;; it++) {
        const bool live = n < p.N;
        const int gn = g + gridDim.x, nn = gn * CPB + warp / KS; /* the next group's column */
        float acc[NR][M];
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = 0.0f;
        for (int base = c0 + lane; live;) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                const int ch = base + 32 * u;
                if (ch >= c1) break;
                float wf[NR][8];
#pragma unroll
                for (int r = 0; r < NR; r++) bf16x8_to_f32(wv[r][u], wf[r]);
#pragma unroll
                for (int m = 0; m < M; m++) {
                    float af[8];
                    bf16x8_to_f32(PRO == GEMV_RMSNORM ? gemv_xs[(size_t)m * chunks + ch]
                                                      : __ldg((const uint4 *)(p.a + (size_t)m * p.lda) + ch),
                                  af);
#pragma unroll
                    for (int r = 0; r < NR; r++)
#pragma unroll
                        for (int j = 0; j < 8; j++) acc[r][m] = fmaf(wf[r][j], af[j], acc[r][m]);
                }
            }
            base += 32 * GEMV_UNROLL;
            if (base >= c1) break;
            load_batch(n, base);
        }
        /* The registers are free: the next group's loads fly during the sums. */
        if (gn < groups) load_batch(nn, c0 + lane);
#pragma unroll
        for (int r = 0; r < NR; r++)
#pragma unroll
            for (int m = 0; m < M; m++) acc[r][m] = warp_sum(acc[r][m]);
        bool out = live;
        if (KS > 1) { /* the column's KS warps add their parts in part order */
            float(*pt)[NR][M] = part[KS > 1 ? it & 1 : 0];
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < NR; r++)
#pragma unroll
                    for (int m = 0; m < M; m++) pt[warp][r][m] = acc[r][m];
            __syncthreads();
            out = live && kp == 0;
            if (out)
#pragma unroll
                for (int r = 0; r < NR; r++)
#pragma unroll
                    for (int m = 0; m < M; m++) {
                        float s = pt[warp][r][m];
                        for (int x = 1; x < KS; x++) s += pt[warp + x][r][m];
                        acc[r][m] = s;
                    }
        }
        if (out && lane < M) {
            /* Lane m writes row m (registers indexed by a constant per branch). */
            float v[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                v[r] = 0.0f;
#pragma unroll
                for (int m = 0; m < M; m++)
                    if (lane == m) v[r] = acc[r][m];
            }
            const size_t idx = (size_t)lane * p.N + n;
            if (NR == 2) { /* SwiGLU of the rounded gate and up, as ops_swiglu_forward */
                const float gt = gemv_act(v[0]), up = gemv_act(v[NR - 1]);
                ((bf16 *)p.c)[idx] = __float2bfloat16_rn(silu_f(gt) * up);
            } else {
                store_alpha_beta(p.c, F32OUT, idx, v[0], p.alpha, p.beta);
            }
        }
        if (gn >= groups) return;
        g = gn, n = nn;
        if (KS == 1 && n >= p.N) return;
    }
}

/* Warps per output column: enough that each warp's share of K is one batch
 * of GEMV_UNROLL chunks a lane (all its loads in flight at once), at most 4:
 * one at K = 2048, four for a 1.7B model's down projection (K = 6144),
 * whose single warp per column otherwise walked three batches in turn. */
static inline int gemv_ksplit(int K) {
    const int batches = (K / 8 + 32 * GEMV_UNROLL - 1) / (32 * GEMV_UNROLL);
    return batches >= 3 ? 4 : batches;
}

/* The grid of one product of `groups` column groups: what fits the
 * machine at once. In the batch-1 decode chain on an H200 (bench_generate
 * --chain) that was 1.160 ms, a block a group 1.195 and half of what fits
 * 1.307: the next product's blocks finding room beside this one's did not
 * make up for the loads this one no longer had in flight. Benchmarks pin
 * another share of what fits (ctx->tuning.gemv_residency, ops.h): -1 a
 * block for every group (one column a warp), n >= 1 1/n of what fits. */
static inline unsigned int gemv_grid(const ops_ctx *ctx, const void *kernel, size_t smem, int groups) {
    const int share = ctx->tuning.gemv_residency;
    if (share < -1) DK_ABORT("ops_tuning.gemv_residency = %d: expected -1, 0 or n >= 1", share);
    if (share < 0) return (unsigned int)groups;
    const int most = cuda_kernel_per_sm(ctx, kernel, GEMV_WARPS * 32, smem);
    const int den = share > 0 ? share : 1;
    const long cap = (long)cuda_sm_count(ctx) * (most / den > 0 ? most / den : 1);
    return (unsigned int)(groups < cap ? groups : cap);
}

template <int M, int PRO, int NR, int KS, bool F32OUT>
static void gemv_launch_ks(const ops_ctx *ctx, const gemv_args &p) {
    constexpr int CPB = GEMV_WARPS / KS;
    const void *k = (const void *)gemv_rows<M, PRO, NR, KS, F32OUT>;
    const size_t smem = PRO == GEMV_RMSNORM ? (size_t)M * p.K * sizeof(bf16) : 0;
    const dim3 blocks(gemv_grid(ctx, k, smem, (p.N + CPB - 1) / CPB)), threads(GEMV_WARPS * 32);
    cuda_launch_pdl(ctx_stream(ctx), cuda_pdl_rows(ctx, M), gemv_rows<M, PRO, NR, KS, F32OUT>, blocks, threads, smem, p);
}

template <int M, int PRO, int NR, bool F32OUT>
static void gemv_launch_pro(const ops_ctx *ctx, const gemv_args &p) {
    switch (gemv_ksplit(p.K)) {
    case 1: gemv_launch_ks<M, PRO, NR, 1, F32OUT>(ctx, p); break;
    case 2: gemv_launch_ks<M, PRO, NR, 2, F32OUT>(ctx, p); break;
    default: gemv_launch_ks<M, PRO, NR, 4, F32OUT>(ctx, p); break;
    }
}

/* M (1..GEMV_MAX_M) as a template argument. NR = 2: the SwiGLU output of
 * columns n and n + N of W (p.N = the output width, W has 2 N rows, bf16
 * output). */
template <int PRO, int NR, bool F32OUT>
static void gemv_launch_rows(const ops_ctx *ctx, const gemv_args &p, int M) {
    static_assert(NR == 1 || !F32OUT, "the SwiGLU output is bf16");
    switch (M) {
    case 1: gemv_launch_pro<1, PRO, NR, F32OUT>(ctx, p); break;
    case 2: gemv_launch_pro<2, PRO, NR, F32OUT>(ctx, p); break;
    case 3: gemv_launch_pro<3, PRO, NR, F32OUT>(ctx, p); break;
    case 4: gemv_launch_pro<4, PRO, NR, F32OUT>(ctx, p); break;
    case 5: gemv_launch_pro<5, PRO, NR, F32OUT>(ctx, p); break;
    case 6: gemv_launch_pro<6, PRO, NR, F32OUT>(ctx, p); break;
    case 7: gemv_launch_pro<7, PRO, NR, F32OUT>(ctx, p); break;
    default: gemv_launch_pro<8, PRO, NR, F32OUT>(ctx, p); break;
    }
    CUDA_LAUNCH_CHECK();
}

#endif
