/* matmul_skinny_wgmma.cu: the skinny products of matmul_skinny.cu, C[M, N] =
 * alpha * A[M, K] W[N, K]^T + beta * C for M <= 64, on Hopper's warpgroup
 * MMA with TMA loads (sm_90a). A decode step at batch 64 is such a product
 * per weight matrix, and reading W once is its whole cost.
 *
 * Why another kernel. The mma.sync kernel gives every SM 4 warps, and each
 * pulls its A and W fragments out of shared memory with ldmatrix and feeds
 * its mma.sync one k16 step at a time: with M = 64 that is 16 products per
 * k16 step per warp, issued from the same 4 warps that load, and it moved
 * W at 1.4-2.0 TB/s on an H100 (bench_ops --decode) where the copy rate is
 * 3.0; cuBLASLt, which takes the wider products, did not do better. Here a
 * block is one or two consumer warpgroups, whose m64nBNk16 wgmma reads both
 * operands from shared memory through descriptors (one instruction per k16
 * step for all 64 rows), and one producer warp, whose lane 0 streams A and
 * W tiles with TMA into a ring of up to 8 stages filling about 210 KB of
 * shared memory (full / empty mbarriers, as in attention_wgmma.cu): loads
 * never wait on the math, and each SM has the whole ring in flight.
 *
 * Tiles. A stage is A[0..63, k0..k0+63] (rows past M read as zeros by TMA)
 * and W[n0..n0+NWG*BN-1, k0..k0+63], both K-major in the 128-byte swizzle
 * that TMA writes and the descriptors read. A block has NWG = 1 or 2
 * consumer warpgroups, each multiplying the one A tile by its BN = 64, 96
 * or 128 rows of the W tile (wgmma n64 / n96 / n128). Every block reads
 * A again (from L2), 64 / (NWG BN) of W's bytes more: 67% at 96 columns,
 * 25% at 2 x 128, traffic L2 must carry beside W's own stream. The plan
 * (skinny_plan.c) takes the best fill of whole waves of one block per SM
 * over the widths (64, 96, 128, 2 x 96, 2 x 128) and 1, 2, 4 or 8 splits
 * of K, a split plan only where its clusters all fit at once
 * (cudaOccupancyMaxActiveClusters: 66 of 2, 30 of 4 and 15 of 8 on an
 * H100's 132 SMs), and of the plans within 2% of that fill, the fewest
 * splits, then the widest. Measured on an H100 (bench_ops --decode, 17
 * decode products of the 1.7B, 8B and 14B shapes) it ran within 3% of the
 * fastest pinned plan on each; the rule it replaced (the widest within 2%,
 * whatever its splits) took 32 clusters of 4 or 16 of 8 where only 30 or
 * 15 fit, a second wave of short blocks, at 63-71% of the best on four.
 *
 * Split-K and the epilogue are matmul_skinny.cu's: the nsplit blocks of one
 * column tile form a cluster, each leaves its fp32 partial tile in its own
 * shared memory (the ring, free once every stage is consumed), and block q
 * adds rows q, q + nsplit, ... across the cluster in rank order, applies
 * alpha and beta and rounds once. The order is fixed: the same inputs give
 * the same bits.
 *
 * Under a programmatic dependent launch the producer requests the first
 * stages' weights before waiting for the kernel before (weights are
 * written by no kernel of the step); A, that kernel's output, follows the
 * wait. Asking L2 for a share of the next product's weights once a
 * block's own loads were issued (cp.async.bulk.prefetch.L2 in 256-byte
 * segments, spread over the next matrix; the warp decode kernel likewise
 * for the o projection) was measured on an H100 and lost at every size:
 * a Qwen3-1.7B decode chain at batch 64 took 4.05 ms with 8 MiB of each
 * next matrix asked for, 4.79 with 24, against 3.53 without, and the
 * engine's batch-64 decode fell from 69.7% to 51.5% of its memory
 * roofline (bench_generate). Taken for K % 64 == 0, 16-byte aligned A
 * and W, on sm_90 only: elsewhere the body traps, and the host never
 * launches it there. */
#include <cooperative_groups.h>
#include <pthread.h>
#include <string.h>

#include "kernels/skinny_common.cuh"
#include "kernels/skinny_plan.h"
#include "kernels/wgmma_common.cuh"

namespace cg = cooperative_groups;

#define SW_M 64             /* rows of A: one wgmma M */
static_assert(SW_M <= OPS_MATMUL_FEW_ROWS, "matmul.cu copies R in only up to OPS_MATMUL_FEW_ROWS");
#define SW_KT 64            /* K per stage: one 128-byte swizzle row of bf16 */
#define SW_MAX_STAGES 8     /* stages in flight, at most */
#define SW_RING_BYTES 215040 /* 210 KB of ring (of 227 a block may have): one block per SM */
#define SW_MAX_SPLIT SKINNY_PLAN_MAX_SPLIT

/* The shape of an instance: NWG consumer warpgroups of BN columns each. */
__host__ __device__ constexpr int sw_threads(int nwg) { return nwg * 128 + 32; }
__host__ __device__ constexpr uint32_t sw_stage_bytes(int cols) { return (uint32_t)(SW_M + cols) * SW_KT * 2; }
__host__ __device__ constexpr int sw_stages(int cols) {
    return SW_RING_BYTES / sw_stage_bytes(cols) < SW_MAX_STAGES ? (int)(SW_RING_BYTES / sw_stage_bytes(cols))
                                                                : SW_MAX_STAGES;
}
/* The whole dynamic shared memory: ring, 2 mbarriers a stage, slack for
 * the 1024-byte alignment. */
__host__ __device__ constexpr size_t sw_smem_bytes(int cols) {
    return (size_t)sw_stages(cols) * sw_stage_bytes(cols) + 16 * sw_stages(cols) + 1024;
}

#ifndef WG_NO_WGMMA
/* acc (+)= A tile * W tile^T for one k16 step, both K-major descriptors. */
template <int BN>
__device__ __forceinline__ void sw_mma(float (&d)[BN / 8][4], uint64_t da, uint64_t dw) {
    if constexpr (BN == 128) wg_ss_n128(d, da, dw, 1);
    else if constexpr (BN == 96) wg_ss_n96(d, da, dw, 1);
    else wg_ss_n64(d, da, dw, 1);
}
#endif

/* W's rows of one stage: COLS rows from n0 of a plain product; for the
 * SwiGLU form, COLS / 2 gate rows from its first output column n0 and as
 * many up rows from N + n0 (N = I), one box after the other. Both boxes
 * are a multiple of 8 rows, so the second starts on the 128-byte swizzle's
 * 1024-byte period and the tile reads as one of COLS rows. */
template <int COLS, bool SWIGLU>
__device__ __forceinline__ void sw_load_w(uint32_t dst, const CUtensorMap *map_w, int k0, int n0, int N, uint32_t bar) {
    if constexpr (SWIGLU) {
        tma_load_2d(dst, map_w, k0, n0, bar);
        tma_load_2d(dst + (COLS / 2) * 128, map_w, k0, N + n0, bar);
    } else {
        tma_load_2d(dst, map_w, k0, n0, bar);
    }
}

template <int BN, int NWG, bool SWIGLU>
__global__ void __launch_bounds__(sw_threads(NWG), 1)
    matmul_skinny_wg(sk_args p, const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    constexpr int COLS = NWG * BN, NT = BN / 8, LD = COLS + 4; /* LD: fp32 partial row stride, 16-byte rows */
    constexpr int THREADS = sw_threads(NWG), ST = sw_stages(COLS), PRODUCER = NWG * 4;
    constexpr uint32_t A_BYTES = SW_M * SW_KT * 2, STAGE = sw_stage_bytes(COLS);
    static_assert((size_t)SW_M * LD * sizeof(float) <= (size_t)ST * STAGE, "the partial tile reuses the ring");
    static_assert(COLS <= 256, "a TMA box holds at most 256 rows");
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t ring = smem_base(), bars = ring + ST * STAGE;
    const uint32_t full = bars, empty = bars + 8 * ST; /* full[s] = full + 8 s */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    constexpr int OUT = SWIGLU ? COLS / 2 : COLS; /* output columns a block */
    const int n0 = blockIdx.x * OUT, split = blockIdx.y;
    const int k_begin = split * p.kchunk, k_end = min(k_begin + p.kchunk, p.K);
    const int n_stages = (k_end - k_begin) / SW_KT;

    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            mbar_init(full + 8 * s, 1);         /* the producer's arrival, plus the bytes */
            mbar_init(empty + 8 * s, 4 * NWG); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    float acc[NT][4];
    zero(acc);
    if (warp == PRODUCER) {
        /* ---- producer: lane 0 issues, the warp waits together ---- */
        const int pre = n_stages < ST ? n_stages : ST;
        if (lane == 0)
            for (int s = 0; s < pre; s++) {
                mbar_expect(full + 8 * s, STAGE);
                sw_load_w<COLS, SWIGLU>(ring + s * STAGE + A_BYTES, &map_w, k_begin + s * SW_KT, n0, p.N, full + 8 * s);
            }
        __syncwarp();
        pdl_wait();
        pdl_launch_dependents();
        if (lane == 0)
            for (int s = 0; s < pre; s++) tma_load_2d(ring + s * STAGE, &map_a, k_begin + s * SW_KT, 0, full + 8 * s);
        for (int st = pre; st < n_stages; st++) {
            const int s = st % ST, k0 = k_begin + st * SW_KT;
            stage_wait_empty(empty + 8 * s, st / ST);
            if (lane == 0) {
                mbar_expect(full + 8 * s, STAGE);
                sw_load_w<COLS, SWIGLU>(ring + s * STAGE + A_BYTES, &map_w, k0, n0, p.N, full + 8 * s);
                tma_load_2d(ring + s * STAGE, &map_a, k0, 0, full + 8 * s);
            }
            __syncwarp();
        }
    } else {
        /* ---- consumers: warpgroup wg multiplies the A tile by its BN rows
         * of the W tile, one k16 product per step for all 64 rows; the
         * stage read one step ago goes back once its products are done ---- */
        const uint32_t w_off = A_BYTES + (warp >> 2) * BN * 128;
        pdl_wait();
        pdl_launch_dependents();
        for (int st = 0; st < n_stages; st++) {
            const int s = st % ST;
            mbar_wait(full + 8 * s, (st / ST) & 1);
            const uint32_t ta = ring + s * STAGE, tw = ta + w_off;
            reg_fence(acc);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < SW_KT / 16; kk++) sw_mma<BN>(acc, desc_k<SW_M>(ta, kk), desc_k<BN>(tw, kk));
            wg_commit();
            wg_wait<1>();
            reg_fence(acc);
            if (st > 0) stage_release(empty + 8 * ((st - 1) % ST));
        }
        wg_wait<0>();
        reg_fence(acc);
    }
    __syncthreads(); /* every stage consumed, no load in flight: the ring holds the partial tile now */

    float *part = (float *)(smem + (ring - smem_addr(smem)));
    if (warp < PRODUCER) {
        const int g = lane >> 2, t4 = lane & 3, row = (warp & 3) * 16 + g, col = (warp >> 2) * BN + 2 * t4;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *(float2 *)&part[(row + 8 * h) * LD + col + j * 8] = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
    }
    const int rows = min(SW_M, p.M);
    if constexpr (SWIGLU) {
        /* h[r, n0 + c] = silu(g) * u of the products rounded to bf16, as
         * ops_matmul then ops_swiglu_forward round them; the host takes
         * this form only unsplit (p.nsplit == 1, alpha 1, beta 0). */
        __syncthreads();
        bf16 *h = (bf16 *)p.c;
        for (int e = tid; e < rows * OUT; e += THREADS) {
            const int r = e / OUT, c = e % OUT;
            if (n0 + c >= p.N) continue;
            const float g = __bfloat162float(__float2bfloat16_rn(part[r * LD + c]));
            const float u = __bfloat162float(__float2bfloat16_rn(part[r * LD + OUT + c]));
            h[(size_t)r * p.N + n0 + c] = __float2bfloat16_rn(silu_f(g) * u);
        }
        return;
    }
    if (p.nsplit == 1) {
        __syncthreads();
        for (int e = tid; e < rows * COLS; e += THREADS) {
            const int r = e / COLS, c = e % COLS;
            sk_store(p, r, n0 + c, part[r * LD + c]);
        }
        return;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    sk_cluster_sum(p, cluster, part, LD, COLS, rows, n0, split, tid, THREADS);
    cluster.sync(); /* no block leaves while another still reads its tile */
#endif
}

typedef void (*sw_kernel)(sk_args, const CUtensorMap, const CUtensorMap);

/* The instances, in skinny_plan_widths' order (skinny_plan.h): BN columns
 * a consumer warpgroup, NWG of them; each width's plain product and its
 * SwiGLU form. */
static const struct {
    int bn, nwg;
    sw_kernel k, swiglu;
} sw_widths[SKINNY_PLAN_WIDTHS] = {{128, 2, matmul_skinny_wg<128, 2, false>, matmul_skinny_wg<128, 2, true>},
                                   {96, 2, matmul_skinny_wg<96, 2, false>, matmul_skinny_wg<96, 2, true>},
                                   {128, 1, matmul_skinny_wg<128, 1, false>, matmul_skinny_wg<128, 1, true>},
                                   {96, 1, matmul_skinny_wg<96, 1, false>, matmul_skinny_wg<96, 1, true>},
                                   {64, 1, matmul_skinny_wg<64, 1, false>, matmul_skinny_wg<64, 1, true>}};

/* The index of the width of cols columns (one sk_plan_finish allows). */
static int sw_width_index(int cols) {
    int w = 0;
    while (w < SKINNY_PLAN_WIDTHS - 1 && skinny_plan_widths[w] != cols) w++;
    return w;
}

/* clusters[s] (s = 2, 4, 8): the most clusters of s blocks the GPU holds
 * at once, of the instance that holds the fewest, which skinny_plan takes
 * a split plan only within. Asked once per device: a GPC whose count of
 * multiprocessors s does not divide leaves some idle, so it is not sms / s. */
#define SW_MAX_DEVICES 64
static int sw_resident[SW_MAX_DEVICES][SW_MAX_SPLIT + 1];
static pthread_mutex_t sw_lock = PTHREAD_MUTEX_INITIALIZER;

extern "C" void cuda_skinny_wgmma_clusters(ops_ctx *ctx, int *clusters) {
    const int dev = ctx->gpu, cached = dev >= 0 && dev < SW_MAX_DEVICES;
    pthread_mutex_lock(&sw_lock);
    if (!cached || !sw_resident[dev][2]) {
        int *most = cached ? sw_resident[dev] : clusters; /* a device past the table is asked every time */
        for (int s = 2; s <= SW_MAX_SPLIT; s *= 2) {
            most[s] = cuda_sm_count(ctx) / s;
            for (int w = 0; w < SKINNY_PLAN_WIDTHS; w++) {
                const int n = cuda_clusters_resident(ctx, (const void *)sw_widths[w].k, sw_threads(sw_widths[w].nwg),
                                                     sw_smem_bytes(skinny_plan_widths[w]), s);
                if (n < most[s]) most[s] = n;
            }
        }
    }
    if (cached) memcpy(clusters, sw_resident[dev], sizeof sw_resident[dev]);
    pthread_mutex_unlock(&sw_lock);
}

extern "C" int cuda_skinny_wgmma_plan(ops_ctx *ctx, int N, int K, int *splits) {
    int clusters[SW_MAX_SPLIT + 1];
    cuda_skinny_wgmma_clusters(ctx, clusters);
    return skinny_plan_widths[skinny_plan(cuda_sm_count(ctx), clusters, N, K, splits)];
}

extern "C" int cuda_matmul_skinny_wgmma(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N,
                                        int K, int trans_a, int trans_b, float alpha, float beta) {
    if (M < 1 || M > SW_M || N < 1 || K < SW_KT || K % SW_KT || trans_a || !trans_b) return 0;
    if (!is_aligned16(a) || !is_aligned16(b) || !cuda_is_sm90(ctx)) return 0;
    sk_args p = sk_args_make(c, c_f32, a, b, M, N, K, alpha, beta);
    int nsplit, cols = cuda_skinny_wgmma_plan(ctx, N, K, &nsplit);
    sk_plan_finish(ctx, &p, SW_KT, SW_MAX_SPLIT, 1, &cols, &nsplit);
    const int w = sw_width_index(cols);
    const size_t smem = sw_smem_bytes(cols);
    const int threads = sw_threads(sw_widths[w].nwg);
    const sw_kernel k = sw_widths[w].k;
    cuda_kernel_per_sm(ctx, (const void *)k, threads, smem); /* sets the shared-memory limit */
    const CUtensorMap ma = tmap_rows((const bf16 *)a, K, M, SW_M), mw = tmap_rows((const bf16 *)b, K, N, cols);
    cuda_launch_pdl_cluster(ctx_stream(ctx), !ctx->tuning.no_pdl, nsplit, k,
                            dim3((unsigned)((N + cols - 1) / cols), (unsigned)nsplit), dim3(threads), smem, p, ma, mw);
    return 1;
}

/* h[M, I] = swiglu(A W^T) with W [2I, K] the stacked gate|up weight, the
 * products rounded to bf16 before the SwiGLU (ops_rmsnorm_matmul_swiglu's
 * rule): the first half of a decode step's MLP in one kernel, without the
 * [M, 2I] product in memory or the SwiGLU's launch. A block takes COLS / 2
 * gate rows and the same up rows (sw_load_w), so every output's gate and
 * up sums sit in one partial tile. The plan is the plain product's (2I
 * columns, skinny_plan); a split plan is left to the ops in turn (0), as
 * the split sum would have to precede the SwiGLU. Each output's sums run
 * in the plain kernel's k order: the bits equal ops_matmul on this kernel
 * (skinny_use 2) then ops_swiglu_forward. */
extern "C" int cuda_matmul_skinny_wgmma_swiglu(ops_ctx *ctx, void *h, const void *a, const void *w, int M, int I,
                                               int K) {
    if (M < 1 || M > SW_M || I < 1 || K < SW_KT || K % SW_KT) return 0;
    if (!is_aligned16(a) || !is_aligned16(w) || !cuda_is_sm90(ctx)) return 0;
    sk_args p = sk_args_make(h, 0, a, w, M, I, K, 1.0f, 0.0f);
    int nsplit, cols = cuda_skinny_wgmma_plan(ctx, 2 * I, K, &nsplit);
    sk_plan_finish(ctx, &p, SW_KT, SW_MAX_SPLIT, 1, &cols, &nsplit);
    if (nsplit != 1) return 0;
    const int wi = sw_width_index(cols), out = cols / 2;
    const size_t smem = sw_smem_bytes(cols);
    const int threads = sw_threads(sw_widths[wi].nwg);
    const sw_kernel k = sw_widths[wi].swiglu;
    cuda_kernel_per_sm(ctx, (const void *)k, threads, smem); /* sets the shared-memory limit */
    const CUtensorMap ma = tmap_rows((const bf16 *)a, K, M, SW_M), mw = tmap_rows((const bf16 *)w, K, 2 * I, out);
    cuda_launch_pdl_cluster(ctx_stream(ctx), !ctx->tuning.no_pdl, 1, k, dim3((unsigned)((I + out - 1) / out), 1u),
                            dim3(threads), smem, p, ma, mw);
    return 1;
}
