/* matmul_skinny.cu: the skinny products of ops_matmul, C[M, N] = alpha *
 * A[M, K] W[N, K]^T + beta * C for GEMV_MAX_M < M <= SK_MAX_M: a decode step
 * at batch 9..64 multiplies that many token rows by each weight matrix.
 * Reading W once is still the whole cost (64 rows make 64 FLOPs per weight
 * byte, far below the tensor cores' ratio). cuBLASLt splits a long K with
 * bf16-rounded partials, so matmul.cu routes such products (K > 2 (M + N),
 * the down projection) through an fp32 output and two casts, at 1.0-1.4 TB/s
 * on a 1.7B model's down projection at batch 64; this kernel reads the
 * weights once at about 1.4x that rate and rounds once. On wider, shorter
 * products cuBLASLt itself is faster, and keeps them.
 *
 * A block owns SK_BN output columns and a slice of K (split-K, so that even
 * 2048 columns give every SM work): A[:, slice] and W[cols, slice] stream
 * through a SK_STAGES-deep cp.async ring of swizzled shared-memory tiles,
 * and each of the 4 warps multiplies all M rows by its 16 columns with
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate), fragments by ldmatrix.
 * Without a split the block applies alpha and beta and rounds once; with one
 * it writes fp32 partial sums to ctx->scratch and a second kernel adds the
 * slices in order (deterministic, no atomics) before alpha, beta and the
 * single rounding. Taken for K % 64 == 0 and 16-byte aligned A and W. */
#include "kernels/mma_common.cuh"

#define SK_MAX_M 64
#define SK_MIN_M 9
#define SK_BN 64     /* columns per block */
#define SK_KT 64     /* K per stage */
#define SK_STAGES 4
#define SK_THREADS 128
#define SK_TILE (64 * SK_KT) /* elements of one operand tile */
#define SK_SMEM ((size_t)SK_STAGES * 2 * SK_TILE * sizeof(bf16))

struct sk_args {
    void *c;
    const bf16 *a, *w;
    float *part; /* [nsplit, M, N] when nsplit > 1 */
    int M, N, K, kchunk, nsplit, c_f32;
    float alpha, beta;
};

/* Element offset of 16-byte chunk c (0..7) of row r in a [64, 64] tile:
 * XOR-swizzled so the 8 rows an ldmatrix reads hit 8 different bank groups. */
__device__ __forceinline__ int sk_swz(int r, int c) { return r * SK_KT + ((c ^ (r & 7)) << 3); }

__device__ __forceinline__ void sk_store(const sk_args &p, int r, int col, float v) {
    if (r >= p.M || col >= p.N) return;
    const size_t idx = (size_t)r * p.N + col;
    float out = p.alpha * v;
    if (p.c_f32) {
        float *c = (float *)p.c;
        if (p.beta != 0.0f) out += p.beta * c[idx];
        c[idx] = out;
    } else {
        bf16 *c = (bf16 *)p.c;
        if (p.beta != 0.0f) out += p.beta * __bfloat162float(c[idx]);
        c[idx] = __float2bfloat16_rn(out);
    }
}

template <int MT> /* 16-row tiles of M: 1..4 */
__global__ void __launch_bounds__(SK_THREADS) matmul_skinny(sk_args p) {
    extern __shared__ __align__(16) unsigned char sk_smem[];
    bf16 *sa = (bf16 *)sk_smem, *sw = sa + SK_STAGES * SK_TILE;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tq = lane & 3;
    const int n0 = blockIdx.x * SK_BN, split = blockIdx.y;
    const int k_begin = split * p.kchunk, k_end = min(k_begin + p.kchunk, p.K);
    const int n_stages = (k_end - k_begin) / SK_KT;

    auto load = [&](int buf, int k0) {
        bf16 *da = sa + buf * SK_TILE, *dw = sw + buf * SK_TILE;
        for (int i = tid; i < MT * 16 * 8; i += SK_THREADS) {
            const int r = i >> 3, c = i & 7;
            const bool ok = r < p.M;
            cp_async16(da + sk_swz(r, c), p.a + (size_t)(ok ? r : 0) * p.K + k0 + c * 8, ok);
        }
        for (int i = tid; i < SK_BN * 8; i += SK_THREADS) {
            const int r = i >> 3, c = i & 7;
            const bool ok = n0 + r < p.N;
            cp_async16(dw + sk_swz(r, c), p.w + (size_t)(ok ? n0 + r : 0) * p.K + k0 + c * 8, ok);
        }
    };

    float acc[MT][2][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < 2; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;

#pragma unroll
    for (int s = 0; s < SK_STAGES - 1; s++) {
        if (s < n_stages) load(s, k_begin + s * SK_KT);
        cp_async_commit();
    }
    for (int st = 0; st < n_stages; st++) {
        cp_async_wait<SK_STAGES - 2>();
        __syncthreads();
        const bf16 *ta = sa + (st % SK_STAGES) * SK_TILE, *tw = sw + (st % SK_STAGES) * SK_TILE;
#pragma unroll
        for (int kk = 0; kk < SK_KT / 16; kk += 2) { /* two k16 steps per W fragment load */
            uint32_t b[2][4];
#pragma unroll
            for (int n = 0; n < 2; n++)
                ldsm_x4(b[n][0], b[n][1], b[n][2], b[n][3],
                        tw + sk_swz(warp * 16 + n * 8 + (lane & 7), kk * 2 + (lane >> 3)));
#pragma unroll
            for (int s = 0; s < 2; s++) {
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    uint32_t af[4];
                    ldsm_x4(af[0], af[1], af[2], af[3],
                            ta + sk_swz(m * 16 + (lane & 15), (kk + s) * 2 + (lane >> 4)));
#pragma unroll
                    for (int n = 0; n < 2; n++) mma_bf16(acc[m][n], af, b[n][2 * s], b[n][2 * s + 1]);
                }
            }
        }
        const int nx = st + SK_STAGES - 1; /* refill the buffer read one iteration ago */
        if (nx < n_stages) load(nx % SK_STAGES, k_begin + nx * SK_KT);
        cp_async_commit();
    }
    cp_async_wait<0>();

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = m * 16 + gid + 8 * h, col = n0 + warp * 16 + n * 8 + tq * 2;
                if (p.nsplit == 1) {
                    sk_store(p, r, col, acc[m][n][2 * h]);
                    sk_store(p, r, col + 1, acc[m][n][2 * h + 1]);
                } else if (r < p.M) {
                    float *dst = p.part + ((size_t)split * p.M + r) * p.N;
                    if (col < p.N) dst[col] = acc[m][n][2 * h];
                    if (col + 1 < p.N) dst[col + 1] = acc[m][n][2 * h + 1];
                }
            }
}

/* The split slices added in order, then alpha, beta and one rounding. */
__global__ void matmul_skinny_reduce(sk_args p) {
    const size_t mn = (size_t)p.M * p.N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < mn; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int x = 0; x < p.nsplit; x++) s += p.part[(size_t)x * mn + i];
        sk_store(p, (int)(i / p.N), (int)(i % p.N), s);
    }
}

template <int MT>
static void sk_launch(const ops_ctx *ctx, cudaStream_t st, dim3 grid, const sk_args &p) {
    cuda_kernel_per_sm(ctx, (const void *)matmul_skinny<MT>, SK_THREADS, SK_SMEM); /* sets the shared-memory limit */
    matmul_skinny<MT><<<grid, SK_THREADS, SK_SMEM, st>>>(p);
    CUDA_LAUNCH_CHECK();
}

extern "C" int cuda_matmul_skinny(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                                  int trans_a, int trans_b, float alpha, float beta) {
    if (M < SK_MIN_M || M > SK_MAX_M || N < 1 || K < SK_KT || K % SK_KT || trans_a || !trans_b) return 0;
    if (!is_aligned16(a) || !is_aligned16(b)) return 0;
    sk_args p;
    p.c = c, p.a = (const bf16 *)a, p.w = (const bf16 *)b, p.part = NULL;
    p.M = M, p.N = N, p.K = K, p.c_f32 = c_f32, p.alpha = alpha, p.beta = beta;
    /* Splits of K: about three blocks per SM (as many as fit), each slice at
     * least four stages long, the partial sums within the scratch. At M=64
     * N=2048 K=6144 on an H200 that is 12 splits, 16.8 us, where two blocks
     * per SM (9 splits) took 17.8 and 16 splits 21.7. */
    const int tiles = (N + SK_BN - 1) / SK_BN, kst = K / SK_KT;
    int nsplit = (3 * cuda_sm_count(ctx) + tiles - 1) / tiles;
    if (nsplit > kst / 4) nsplit = kst / 4;
    /* A benchmark's pinned count (ops.h, ops_tuning). */
    const int forced = ctx->tuning.skinny_splits;
    if (forced < 0) DK_ABORT("ops_tuning.skinny_splits = %d: expected 0 (chosen) or a count >= 1", forced);
    if (forced) nsplit = forced < kst ? forced : kst;
    const size_t per_split = (size_t)M * N * sizeof(float);
    nsplit = splits_in_scratch(ctx, nsplit, per_split);
    p.kchunk = split_chunk(K, SK_KT, &nsplit);
    p.nsplit = nsplit;
    if (p.nsplit > 1) p.part = (float *)ctx_scratch(ctx, (size_t)p.nsplit * per_split, "ops_matmul");
    cudaStream_t st = ctx_stream(ctx);
    dim3 grid((unsigned)tiles, (unsigned)p.nsplit);
    switch ((M + 15) / 16) {
    case 1: sk_launch<1>(ctx, st, grid, p); break;
    case 2: sk_launch<2>(ctx, st, grid, p); break;
    case 3: sk_launch<3>(ctx, st, grid, p); break;
    default: sk_launch<4>(ctx, st, grid, p); break;
    }
    if (p.nsplit > 1) {
        const size_t mn = (size_t)M * N;
        matmul_skinny_reduce<<<(unsigned)((mn + 255) / 256), 256, 0, st>>>(p);
        CUDA_LAUNCH_CHECK();
    }
    return 1;
}
