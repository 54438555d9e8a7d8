/* lmhead_wgmma.cu: the lm head's logits and what the loss takes from them in
 * one Hopper kernel (sm_90a), so the fp32 logits never reach memory.
 *
 * Why. lmhead.cu's other path has cuBLASLt write each chunk of logits in
 * fp32 (T x chunk x 4 bytes), then a kernel reads them back to reduce each
 * row; the backward writes them again to turn them into dz in place. On an
 * H100 at the 1.7B shape (T 16384, C 2048, V 151936) that was 76.5 ms of a
 * 378 ms step against 58 ms for its four GEMMs at cuBLASLt's rate: the
 * fp32 stores sit in the GEMM's epilogue, after a K loop of only 2048.
 *
 * The kernel: C[M, N] = inv_temp h W^T over 128 x 256 tiles, a persistent
 * block per SM walking the tiles (grouped by 16 row tiles, so a wave reads
 * a few MB of h and W from L2). Warpgroup 0 produces: one thread streams
 * [128, 64] tiles of h and [256, 64] tiles of W by TMA into a ring of 4
 * stages (48 KB each; full / empty mbarriers as in attention_wgmma.cu), and
 * runs ahead into the next tile while the consumers finish the last.
 * Warpgroups 1 and 2 each multiply 64 rows of h by the 256 rows of W with
 * m64n256k16 wgmma (128 fp32 accumulators a thread), then apply the
 * epilogue straight from registers:
 *   LW_STATS (forward): per row, the tile's (max m, sum e^(z-m),
 *     sum e^(z-m)(z-m)) over its valid columns, reduced across the 4
 *     threads that share a row in a fixed order, stored as partials
 *     [rows, tiles of N]; the target's own logit is stored where its
 *     column falls. lmh_wg_merge (one warp a token) folds a row's partials
 *     in a fixed order into lse, entropy and logprob (lmhead.cu's
 *     formulas, the last step in double).
 *   LW_DZ (backward): dz = inv_temp (dlogprob (onehot - p) - dentropy p
 *     (log p + H)) as bf16 into a [rows, ldz] buffer, which lmhead.cu then
 *     multiplies by W and h^T through cuBLASLt.
 * Every order is fixed: the same inputs give the same bits. Taken on sm_90
 * for C % 8 == 0 (TMA rows of 16-byte multiples; the last K tile reads
 * zeros past C) and 16-byte aligned h and W; the host says 0 elsewhere and
 * lmhead.cu runs its cuBLASLt path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/lmhead_common.cuh"
#include "kernels/wgmma_common.cuh"

#define LW_BM 128   /* token rows a tile: two consumer warpgroups of 64 */
#define LW_BN 256   /* vocabulary columns a tile: one m64n256 wgmma */
#define LW_BK 64    /* K a stage: one 128-byte swizzle row of bf16 */
#define LW_ST 4     /* stages in the ring */
#define LW_GROUP 16 /* row tiles a group walks before the next columns */
#define LW_THREADS 384
#define LW_A_BYTES (LW_BM * LW_BK * 2)
#define LW_STAGE (LW_A_BYTES + LW_BN * LW_BK * 2)
#define LW_SMEM (LW_ST * LW_STAGE + 16 * LW_ST + 1024)

enum { LW_STATS = 0, LW_DZ = 1 };

struct lw_args {
    int M, N, K;             /* token rows, vocabulary columns, C */
    int n_base;              /* W row of column 0 (the backward's chunk) */
    int t0;                  /* token of row 0 (the backward's token block) */
    float inv_temp;
    const int32_t *target;   /* [t0 + M] */
    /* LW_STATS */
    float *pm, *ps, *pa;     /* [M, ceil(N / LW_BN)] partials */
    float *zt;               /* [M]: the target's logit */
    /* LW_DZ */
    bf16 *dz;                /* [M, ldz] */
    int ldz;
    const float *dlogprob, *dentropy, *lse, *entropy;
};

/* Tile idx of a grid of Mt x Nt: groups of `group` row tiles, columns
 * outer within a group, so consecutive blocks share W's tile. */
__device__ __forceinline__ void lw_tile(int idx, int Mt, int Nt, int group, int &m, int &n) {
    const int per = group * Nt, g = idx / per, r = idx - g * per;
    const int gm = min(group, Mt - g * group);
    m = g * group + r % gm;
    n = r / gm;
}

#ifndef WG_NO_WGMMA
/* Forward epilogue: the tile's partial statistics of one row (h2 picks the
 * thread's first or second row of accumulators). Per logit one FFMA, one
 * ex2 and two adds, in base 2: the max is taken on the raw products (the
 * scaling by inv_temp > 0 commutes with it exactly), d2 = (z - m) log2 e
 * is one FFMA, and a = ln 2 sum x d2. A tile wholly inside N skips the
 * column test. (Two chains of sums spilled registers.) */
__device__ __forceinline__ void lw_stats_row(const lw_args &p, const float (&acc)[32][4], int h2, int r, int n,
                                             int t4) {
    const int n0 = n * LW_BN;
    const bool whole = n0 + LW_BN <= p.N;
    float mr = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; j++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (whole || n0 + j * 8 + 2 * t4 + e < p.N) mr = fmaxf(mr, acc[j][2 * h2 + e]);
    mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 1));
    mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, 2));
    const float mx = mr * p.inv_temp, c2 = p.inv_temp * LOG2E_F, m2 = mr * c2;
    float ss = 0.0f, aa = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (whole || n0 + j * 8 + 2 * t4 + e < p.N) {
                const float d2 = fmaf(acc[j][2 * h2 + e], c2, -m2), x = fast_exp2(d2);
                ss += x;
                aa = fmaf(x, d2, aa);
            }
    aa *= LN2_F;
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    aa += __shfl_xor_sync(0xffffffffu, aa, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    aa += __shfl_xor_sync(0xffffffffu, aa, 2);
    if (r >= p.M) return;
    const int Nt = (p.N + LW_BN - 1) / LW_BN;
    if (t4 == 0) {
        const size_t i = (size_t)r * Nt + n;
        p.pm[i] = mx, p.ps[i] = ss, p.pa[i] = aa;
    }
    const int c = p.target[p.t0 + r] - p.n_base - n0; /* the target's column in this tile */
    if (c >= 0 && c < LW_BN && c < p.N - n0 && ((c & 7) >> 1) == t4) {
#pragma unroll
        for (int j = 0; j < 32; j++)
            if ((c >> 3) == j) p.zt[r] = ((c & 1) ? acc[j][2 * h2 + 1] : acc[j][2 * h2]) * p.inv_temp;
    }
}

/* Backward epilogue: one row's dz over the tile's valid columns,
 *   dz = inv_temp (glp [col == target] - p (glp + gent (logp + H))),
 * with logp = z inv_temp - lse taken in base 2 as d2 = logp log2(e), so that
 * p = 2^d2 and the bracket is one FMA in d2: k1 d2 + k0 with the row's
 * constants k1 = -inv_temp gent ln 2, k0 = -inv_temp (glp + gent H). */
__device__ __forceinline__ void lw_dz_row(const lw_args &p, const float (&acc)[32][4], int h2, int r, int n, int t4) {
    if (r >= p.M) return;
    const int t = p.t0 + r, tg = p.target[t], n0 = n * LW_BN;
    const bool whole = n0 + LW_BN <= p.N;
    bf16 *out = p.dz + (size_t)r * p.ldz;
    if (tg < 0) { /* masked: dz is exactly 0, whatever the logits */
#pragma unroll
        for (int j = 0; j < 32; j++) {
            const int col = n0 + j * 8 + 2 * t4;
            if (!whole && col >= p.N) break;
            *(__nv_bfloat162 *)(out + col) = __floats2bfloat162_rn(0.0f, 0.0f);
        }
        return;
    }
    const float glp = p.dlogprob[t], gent = p.dentropy ? p.dentropy[t] : 0.0f;
    const float H = p.dentropy ? p.entropy[t] : 0.0f;
    const float c2 = p.inv_temp * LOG2E_F, l2 = p.lse[t] * LOG2E_F;
    const float k1 = -p.inv_temp * gent * LN2_F, k0 = -p.inv_temp * (glp + gent * H), hit = p.inv_temp * glp;
    const int tc = tg - p.n_base - n0 - 2 * t4; /* the target's column, from this thread's first */
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const int col = n0 + j * 8 + 2 * t4;
        if (!whole && col >= p.N) break;
        float g[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float d2 = fmaf(acc[j][2 * h2 + e], c2, -l2);
            g[e] = fast_exp2(d2) * fmaf(k1, d2, k0);
            if (tc == j * 8 + e) g[e] += hit;
            if (!whole && col + e >= p.N) g[e] = 0.0f;
        }
        *(__nv_bfloat162 *)(out + col) = __floats2bfloat162_rn(g[0], g[1]);
    }
}
#endif

/* MC = 2: the blocks of a cluster of two take row tiles 2 mp and 2 mp + 1
 * against the same columns, so each TMA-loads its own h tile and half of the
 * W tile, multicast to both: per stage 32 KB from L2 a block instead of 48.
 * A stage may then be overwritten by either block's producer, so it goes
 * back to both: its empty barrier counts the consumer warps of the two. */
template <int EPI, int MC>
__global__ void __launch_bounds__(LW_THREADS, 1)
    lmh_wg(lw_args p, const __grid_constant__ CUtensorMap map_h, const __grid_constant__ CUtensorMap map_w) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    const uint32_t ring = smem_base(), full = ring + LW_ST * LW_STAGE, empty = full + 8 * LW_ST;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int Mt = (p.M + LW_BM - 1) / LW_BM, Nt = (p.N + LW_BN - 1) / LW_BN;
    const int Mp = (Mt + MC - 1) / MC, tiles = Mp * Nt; /* tiles of MC row tiles */
    const int KB = (p.K + LW_BK - 1) / LW_BK;
    const uint32_t rank = MC > 1 ? cluster_rank() : 0;
    const int first = (int)blockIdx.y / MC, stride = (int)gridDim.y / MC;
    if (tid == 0) {
        for (int s = 0; s < LW_ST; s++) {
            mbar_init(full + 8 * s, 1);       /* the producer's arrival, plus the bytes */
            mbar_init(empty + 8 * s, 8 * MC); /* one arrival per consumer warp of the cluster */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (MC > 1) cluster_sync_all(); /* no remote arrival or copy before the barriers exist */
    else __syncthreads();

    if (warp < 4) {
        /* ---- producer: one thread streams the stages of every tile ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid != 0) return;
        int it = 0;
        for (int idx = first; idx < tiles; idx += stride) {
            int mp, n;
            lw_tile(idx, Mp, Nt, LW_GROUP / MC, mp, n);
            const int m = mp * MC + (int)rank; /* past the last row tile: TMA reads zeros */
            for (int kb = 0; kb < KB; kb++, it++) {
                const int s = it % LW_ST;
                const uint32_t st = ring + s * LW_STAGE;
                stage_wait_empty(empty + 8 * s, it / LW_ST);
                mbar_expect(full + 8 * s, LW_STAGE);
                tma_load_2d(st, &map_h, kb * LW_BK, m * LW_BM, full + 8 * s);
                if constexpr (MC > 1)
                    tma_load_2d_mc(st + LW_A_BYTES + rank * (LW_BN / MC) * 128, &map_w, kb * LW_BK,
                                   p.n_base + n * LW_BN + (int)rank * (LW_BN / MC), full + 8 * s,
                                   (uint16_t)((1u << MC) - 1));
                else
                    tma_load_2d(st + LW_A_BYTES, &map_w, kb * LW_BK, p.n_base + n * LW_BN, full + 8 * s);
            }
        }
        /* The other block's consumers arrive on this block's empty
         * barriers: it may leave only once their last arrivals are in. */
        if constexpr (MC > 1)
            for (int k = 0; k < LW_ST; k++, it++) stage_wait_empty(empty + 8 * (it % LW_ST), it / LW_ST);
        return;
    }

    /* ---- consumers: warpgroup wg takes rows 64 wg .. 64 wg + 63 of a tile ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = warp - 4, wg = cw >> 2, g = lane >> 2, t4 = lane & 3;
    const int row = wg * 64 + (cw & 3) * 16 + g; /* and row + 8 */
    /* This warp is done with a stage: back to the producer of each block. */
    auto release = [&](int s) {
        if constexpr (MC > 1) {
            __syncwarp();
            if (lane < MC) mbar_arrive_rank(empty + 8 * s, (uint32_t)lane);
        } else {
            stage_release(empty + 8 * s);
        }
    };
    float acc[32][4];
    zero(acc);
    int it = 0;
    for (int idx = first; idx < tiles; idx += stride) {
        int mp, n;
        lw_tile(idx, Mp, Nt, LW_GROUP / MC, mp, n);
        const int m = mp * MC + (int)rank;
        for (int kb = 0; kb < KB; kb++, it++) {
            const int s = it % LW_ST;
            mbar_wait(full + 8 * s, (it / LW_ST) & 1);
            const uint32_t ta = ring + s * LW_STAGE + wg * 64 * 128, tw = ring + s * LW_STAGE + LW_A_BYTES;
            reg_fence(acc);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < LW_BK / 16; kk++)
                wg_ss_n256(acc, desc_k<64>(ta, kk), desc_k<LW_BN>(tw, kk), kb > 0 || kk > 0);
            wg_commit();
            wg_wait<1>();
            reg_fence(acc);
            if (kb > 0) release((it - 1) % LW_ST);
        }
        wg_wait<0>();
        reg_fence(acc);
        release((it - 1) % LW_ST);
        const int r0 = m * LW_BM + row;
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            if constexpr (EPI == LW_STATS) lw_stats_row(p, acc, h2, r0 + 8 * h2, n, t4);
            else lw_dz_row(p, acc, h2, r0 + 8 * h2, n, t4);
        }
    }
#endif
}

/* One warp a token: its Nt partials folded in lane-strided order, then a
 * fixed xor tree; lane 0 writes the token's lse, entropy and logprob. */
__global__ void __launch_bounds__(256)
    lmh_wg_merge(const float *__restrict__ pm, const float *__restrict__ ps, const float *__restrict__ pa, int Nt,
                 int T, int V, const int32_t *__restrict__ target, float *__restrict__ lse,
                 float *__restrict__ entropy, float *__restrict__ logprob) {
    const int t = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;
    lmh_stat st = {-INFINITY, 0.0f, 0.0f};
    for (int j = lane; j < Nt; j += 32) {
        const size_t i = (size_t)t * Nt + j;
        st = lmh_merge(st, lmh_stat{pm[i], ps[i], pa[i]});
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) st = lmh_merge(st, lmh_shfl(st, o));
    if (lane != 0) return;
    const int tg = target[t];
    lmh_check_target(t, tg, V);
    double l, a;
    lmh_finish(st, &l, &a);
    lse[t] = (float)l;
    if (entropy) entropy[t] = (float)-a;
    logprob[t] = tg >= 0 ? (float)((double)logprob[t] - l) : 0.0f;
}

/* ---- host ------------------------------------------------------------------------------ */

/* Whether the kernel serves these operands (ops_tuning.lmhead_kernel 0 or 1). */
extern "C" int cuda_lmhead_wgmma_fits(const ops_ctx *ctx, const void *h, const void *W, int C) {
    const int pin = ctx->tuning.lmhead_kernel;
    if (pin < -1 || pin > 1)
        DK_ABORT("ops_tuning.lmhead_kernel = %d: expected 0 (chosen), 1 (one block, no cluster) or -1 (cuBLASLt)",
                 pin);
    return pin >= 0 && C >= 8 && C % 8 == 0 && is_aligned16(h) && is_aligned16(W) && cuda_is_sm90(ctx);
}

/* A persistent grid of one block an SM, or of clusters of two where they
 * fit (ops_tuning.lmhead_kernel 0); it walks the tiles in lw_tile's order. */
template <int EPI>
static void lw_launch(ops_ctx *ctx, const lw_args &p, const bf16 *h, const bf16 *W, int V) {
    const int Mt = (p.M + LW_BM - 1) / LW_BM, Nt = (p.N + LW_BN - 1) / LW_BN;
    const int pairs = ctx->tuning.lmhead_kernel == 0
                          ? cuda_clusters_resident(ctx, (const void *)lmh_wg<EPI, 2>, LW_THREADS, LW_SMEM, 2)
                          : 0;
    const int mc = pairs > 0 ? 2 : 1, most = pairs > 0 ? pairs : cuda_sm_count(ctx);
    const int tiles = ((Mt + mc - 1) / mc) * Nt, grid = tiles < most ? tiles : most; /* in clusters */
    const CUtensorMap mh = tmap_rows(h, p.K, p.M, LW_BM), mw = tmap_rows(W, p.K, V, LW_BN / mc);
    const auto k = mc == 2 ? lmh_wg<EPI, 2> : lmh_wg<EPI, 1>;
    /* The shared-memory limit: cuda_clusters_resident set it for the pair. */
    if (mc == 1) cuda_kernel_per_sm(ctx, (const void *)k, LW_THREADS, LW_SMEM);
    cuda_launch_pdl_cluster(ctx_stream(ctx), 0, mc, k, dim3(1, (unsigned)(mc * grid)), dim3(LW_THREADS), LW_SMEM, p, mh,
                            mw);
}

/* Bytes of scratch the one-kernel forward needs: the partials. */
extern "C" size_t cuda_lmhead_wgmma_fwd_scratch(int T, int V) {
    return (size_t)3 * T * ((V + LW_BN - 1) / LW_BN) * sizeof(float);
}

/* The forward of lmhead.cu in one GEMM kernel and a merge; 0 where it does
 * not apply (the caller runs the cuBLASLt path). */
extern "C" int cuda_lmhead_forward_wgmma(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h,
                                         const void *W, const int32_t *target, int T, int C, int V,
                                         float inv_temp) {
    if (!cuda_lmhead_wgmma_fits(ctx, h, W, C) || !(inv_temp > 0.0f)) return 0; /* the epilogue scales a max */
    const int Nt = (V + LW_BN - 1) / LW_BN;
    const size_t per = (size_t)T * Nt;
    if (cuda_lmhead_wgmma_fwd_scratch(T, V) > ctx->scratch_size) return 0;
    float *pm = (float *)ctx->scratch;
    lw_args p;
    memset(&p, 0, sizeof p);
    p.M = T, p.N = V, p.K = C, p.inv_temp = inv_temp, p.target = target;
    p.pm = pm, p.ps = pm + per, p.pa = pm + 2 * per, p.zt = logprob;
    lw_launch<LW_STATS>(ctx, p, (const bf16 *)h, (const bf16 *)W, V);
    lmh_wg_merge<<<(T + 7) / 8, 256, 0, ctx_stream(ctx)>>>(p.pm, p.ps, p.pa, Nt, T, V, target, lse, entropy, logprob);
    CUDA_LAUNCH_CHECK();
    return 1;
}

/* dz[r, c] (bf16, row stride ldz) of tokens t0 .. t0 + rows - 1 (h points at
 * token t0) and vocabulary columns c0 .. c0 + n - 1; 0 where the kernel
 * does not apply. */
extern "C" int cuda_lmhead_dz_wgmma(ops_ctx *ctx, void *dz, int ldz, const float *dlogprob, const float *dentropy,
                                    const void *h, const void *W, const int32_t *target, const float *lse,
                                    const float *entropy, int t0, int rows, int C, int V, int c0, int n,
                                    float inv_temp) {
    if (!cuda_lmhead_wgmma_fits(ctx, h, W, C) || ldz % 2 || !is_aligned16(dz)) return 0;
    lw_args p;
    memset(&p, 0, sizeof p);
    p.M = rows, p.N = n, p.K = C, p.n_base = c0, p.t0 = t0, p.inv_temp = inv_temp, p.target = target;
    p.dz = (bf16 *)dz, p.ldz = ldz, p.dlogprob = dlogprob, p.dentropy = dentropy, p.lse = lse, p.entropy = entropy;
    lw_launch<LW_DZ>(ctx, p, (const bf16 *)h, (const bf16 *)W, V);
    return 1;
}
