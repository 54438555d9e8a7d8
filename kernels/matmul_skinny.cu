/* matmul_skinny.cu: the skinny products of ops_matmul, C[M, N] = alpha *
 * A[M, K] W[N, K]^T + beta * C for GEMV_MAX_M < M <= SK_MAX_M: a decode step
 * at batch 9..64 multiplies that many token rows by each weight matrix.
 * Reading W once is the whole cost (64 rows make 64 FLOPs per weight byte,
 * far below the tensor cores' ratio), so the kernel is built to keep HBM
 * streaming: enough blocks that every SM has weights in flight, few enough
 * that they run as one wave, and no pass over partial sums in global memory.
 *
 * A block owns BN (128, or 64 when pinned) output columns and a slice of
 * K: A[:, slice] and W[cols, slice] stream through a SK_STAGES-deep
 * cp.async ring of swizzled shared-memory tiles, and each of its 4 warps
 * multiplies all M rows by its BN / 4 columns with mma.sync m16n8k16 (bf16
 * in, fp32 accumulate), fragments by ldmatrix. Every warp loads all of A's
 * fragments, so 32 columns a warp read shared memory half as much per
 * weight byte as 16 did (measured: 10-25% more GB/s on most shapes). Under
 * a programmatic dependent launch the first stages' weights are requested
 * before the wait on the kernel before (measured: about 10% more GB/s on
 * back-to-back products).
 *
 * Split-K without global partials: the nsplit blocks of one column tile
 * form a thread-block cluster (at most 8, the portable size). Each leaves
 * its fp32 partial tile in its own shared memory; after a cluster barrier,
 * block q adds rows q, q + nsplit .. (a share of the tile) across the
 * cluster's shared memories in rank order (distributed shared memory), then
 * applies alpha, beta and the single bf16 rounding. The order is fixed, so
 * the same inputs give the same bits. Taken for K % 64 == 0 and 16-byte
 * aligned A and W. */
#include <cooperative_groups.h>

#include "kernels/mma_common.cuh"
#include "kernels/skinny_common.cuh"

namespace cg = cooperative_groups;

#define SK_MAX_M 64
static_assert(SK_MAX_M <= OPS_MATMUL_FEW_ROWS, "matmul.cu copies R in only up to OPS_MATMUL_FEW_ROWS");
#define SK_MIN_M 9
#define SK_KT 64 /* K per stage */
#define SK_STAGES 4
#define SK_MAX_SPLIT 8 /* the portable cluster size */
#define SK_THREADS 128 /* 4 warps */

/* Shared memory of the ring for mt 16-row tiles of M and bn columns. */
__host__ __device__ constexpr size_t sk_smem_bytes(int mt, int bn) {
    return (size_t)SK_STAGES * (mt * 16 + bn) * SK_KT * sizeof(bf16);
}

/* Sizes of the <MT 16-row tiles of M, BN columns> instance. */
template <int MT, int BN>
struct sk_dims {
    static constexpr int wn = BN / 4; /* columns a warp: 16 or 32 */
    static constexpr int a_tile = MT * 16 * SK_KT;
    static constexpr int stage = a_tile + BN * SK_KT; /* elements */
    static constexpr int ld = BN + 4; /* fp32 partial row stride: float2 stores spread over the banks */
    static_assert((size_t)MT * 16 * ld * sizeof(float) <= sk_smem_bytes(MT, BN), "the partial tile reuses the ring");
};

/* Element offset of 16-byte chunk c (0..7) of row r in a [rows, 64] tile:
 * XOR-swizzled so the 8 rows an ldmatrix reads hit 8 different bank groups. */
__device__ __forceinline__ int sk_swz(int r, int c) { return r * SK_KT + ((c ^ (r & 7)) << 3); }

template <int MT, int BN>
__global__ void __launch_bounds__(SK_THREADS) matmul_skinny(sk_args p) {
    typedef sk_dims<MT, BN> S;
    constexpr int NT = S::wn / 8; /* n8 tiles a warp */
    extern __shared__ __align__(16) unsigned char sk_smem[];
    bf16 *ring = (bf16 *)sk_smem;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tq = lane & 3;
    const int n0 = blockIdx.x * BN, split = blockIdx.y;
    const int k_begin = split * p.kchunk, k_end = min(k_begin + p.kchunk, p.K);
    const int n_stages = (k_end - k_begin) / SK_KT;

    auto load_a = [&](int buf, int k0) {
        bf16 *da = ring + buf * S::stage;
        for (int i = tid; i < MT * 16 * 8; i += SK_THREADS) {
            const int r = i >> 3, c = i & 7;
            const bool ok = r < p.M;
            cp_async16(da + sk_swz(r, c), p.a + (size_t)(ok ? r : 0) * p.K + k0 + c * 8, ok);
        }
    };
    auto load_w = [&](int buf, int k0) {
        bf16 *dw = ring + buf * S::stage + S::a_tile;
        for (int i = tid; i < BN * 8; i += SK_THREADS) {
            const int r = i >> 3, c = i & 7;
            const bool ok = n0 + r < p.N;
            cp_async16(dw + sk_swz(r, c), p.w + (size_t)(ok ? n0 + r : 0) * p.K + k0 + c * 8, ok);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;

    /* The first stages' weights are requested before the wait for the
     * kernel before (a programmatic dependent launch; weights are written
     * by no kernel of the step), so their latency hides behind its tail;
     * A is that kernel's output and follows the wait. One commit group per
     * stage still: group 0 holds those weights and A's first stage. */
#pragma unroll
    for (int s = 0; s < SK_STAGES - 1; s++)
        if (s < n_stages) load_w(s, k_begin + s * SK_KT);
    pdl_wait();
    pdl_launch_dependents();
#pragma unroll
    for (int s = 0; s < SK_STAGES - 1; s++) {
        if (s < n_stages) load_a(s, k_begin + s * SK_KT);
        cp_async_commit();
    }
    for (int st = 0; st < n_stages; st++) {
        cp_async_wait<SK_STAGES - 2>();
        __syncthreads();
        const bf16 *ta = ring + (st % SK_STAGES) * S::stage, *tw = ta + S::a_tile;
#pragma unroll
        for (int kk = 0; kk < SK_KT / 16; kk += 2) { /* two k16 steps per W fragment load */
            uint32_t b[NT][4];
#pragma unroll
            for (int n = 0; n < NT; n++)
                ldsm_x4(b[n][0], b[n][1], b[n][2], b[n][3],
                        tw + sk_swz(warp * S::wn + n * 8 + (lane & 7), kk * 2 + (lane >> 3)));
#pragma unroll
            for (int s = 0; s < 2; s++) {
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    uint32_t af[4];
                    ldsm_x4(af[0], af[1], af[2], af[3],
                            ta + sk_swz(m * 16 + (lane & 15), (kk + s) * 2 + (lane >> 4)));
#pragma unroll
                    for (int n = 0; n < NT; n++) mma_bf16(acc[m][n], af, b[n][2 * s], b[n][2 * s + 1]);
                }
            }
        }
        const int nx = st + SK_STAGES - 1; /* refill the buffer read one iteration ago */
        if (nx < n_stages) load_a(nx % SK_STAGES, k_begin + nx * SK_KT), load_w(nx % SK_STAGES, k_begin + nx * SK_KT);
        cp_async_commit();
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring: it now holds the fp32 partial tile */

    float *part = (float *)sk_smem;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = m * 16 + gid + 8 * h, col = warp * S::wn + n * 8 + tq * 2;
                *(float2 *)&part[r * S::ld + col] = make_float2(acc[m][n][2 * h], acc[m][n][2 * h + 1]);
            }
    const int rows = min(MT * 16, p.M);
    if (p.nsplit == 1) {
        __syncthreads();
        for (int e = tid; e < rows * BN; e += SK_THREADS) {
            const int r = e / BN, c = e % BN;
            sk_store(p, r, n0 + c, part[r * S::ld + c]);
        }
        return;
    }
    /* Block `split` of the cluster sums rows split, split + nsplit, ... over
     * the cluster's partial tiles, in rank order. */
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    sk_cluster_sum(p, cluster, part, S::ld, BN, rows, n0, split, tid, SK_THREADS);
    cluster.sync(); /* no block leaves while another still reads its tile */
}

typedef void (*sk_kernel)(sk_args);

static sk_kernel sk_kernel_for(int mt, int bn) {
    static const sk_kernel k64[4] = {matmul_skinny<1, 64>, matmul_skinny<2, 64>, matmul_skinny<3, 64>,
                                     matmul_skinny<4, 64>};
    static const sk_kernel k128[4] = {matmul_skinny<1, 128>, matmul_skinny<2, 128>, matmul_skinny<3, 128>,
                                      matmul_skinny<4, 128>};
    return bn == 128 ? k128[mt - 1] : k64[mt - 1];
}

/* The plan of a product: 128 columns a block (a warp's 32 columns share
 * each A fragment it loads; 64 columns, 16 a warp, only when pinned), and
 * the most splits of K, up to 8, that keep the blocks within 7/4 of the
 * SM count: with fewer, SMs wait on DRAM latency; with more, slices get
 * short and partial tiles many. Measured on an H100 (bench_ops --decode,
 * GB/s of 3.02 copy): M=64 N=2048 K=6144 at 8 splits 1514 (4: 1250);
 * N=4096 K=12288 at 4 splits 2033 (8: 1730); N=5120 K=17408 at 4 splits
 * 2489 (8: 2127). A product with more tiles than that takes no split. */
static void sk_plan(const ops_ctx *ctx, int N, int K, int *bn_out, int *ns_out) {
    const int kst = K / SK_KT;
    const long tiles = (N + 127) / 128, cap = 7L * cuda_sm_count(ctx) / 4;
    int ns = 1;
    while (ns < SK_MAX_SPLIT && tiles * ns * 2 <= cap && kst / (ns * 2) >= 2) ns *= 2;
    *bn_out = 128, *ns_out = ns;
}

extern "C" int cuda_matmul_skinny(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                                  int trans_a, int trans_b, float alpha, float beta) {
    if (M < SK_MIN_M || M > SK_MAX_M || N < 1 || K < SK_KT || K % SK_KT || trans_a || !trans_b) return 0;
    if (!is_aligned16(a) || !is_aligned16(b)) return 0;
    sk_args p = sk_args_make(c, c_f32, a, b, M, N, K, alpha, beta);
    int bn, nsplit;
    sk_plan(ctx, N, K, &bn, &nsplit);
    sk_plan_finish(ctx, &p, SK_KT, SK_MAX_SPLIT, 0, &bn, &nsplit);
    const int mt = (M + 15) / 16;
    const size_t smem = sk_smem_bytes(mt, bn);
    const sk_kernel k = sk_kernel_for(mt, bn);
    cuda_kernel_per_sm(ctx, (const void *)k, SK_THREADS, smem); /* sets the shared-memory limit */
    cuda_launch_pdl_cluster(ctx_stream(ctx), !ctx->tuning.no_pdl, nsplit, k,
                            dim3((unsigned)((N + bn - 1) / bn), (unsigned)nsplit), dim3(SK_THREADS), smem, p);
    return 1;
}
