/* attention.cu: causal GQA flash attention over packed variable-length
 * sequences on the tensor cores (ops_attention_forward / _backward in ops.h),
 * in the FlashAttention-2 arrangement, for head_dim 16, 32, 64 and 128.
 *
 * Forward. A block of 4 warps owns ATTN_FWD_MT x 64 query rows of one head of one
 * sequence (each warp 16 * FWD_MT rows) and walks the key/value tiles of 64
 * rows that its rows may see, newest first. Scores S = Q K^T live in
 * registers as mma.sync m16n8k16 accumulators; an online softmax keeps the
 * running row max m and row sum l, rescales the output accumulator when the
 * max grows, and feeds P (bf16) straight back into the tensor cores as the A
 * operand of O += P V. Tiles arrive in shared memory through cp.async, two
 * stages deep, so the next tile loads while this one is multiplied; ldmatrix
 * moves them into fragments (the .trans form gives V^T for free). Rows are
 * padded by 16 bytes so the eight row addresses of an ldmatrix hit eight
 * different bank groups. lse = m * scale + log(l) (natural log) is saved.
 *
 * Backward, without floating-point atomics so that it is bit-reproducible:
 *  1. attn_bwd_dot: Dvec[h, t] = dout[t, h] . out[t, h] (fp32, in scratch).
 *  2. attn_bwd_dkdv: a block owns 64 keys of one kv head and holds dK, dV in
 *     registers (each warp 16 keys x D). It visits the query heads of its
 *     GQA group in head order and, for each, every query tile at or after
 *     the diagonal: P^T = exp(scale K Q^T - lse), dV += P^T dO,
 *     dP^T = V dO^T, dS^T = P^T (dP^T - Dvec), dK += dS^T Q. The group's sum
 *     is therefore taken inside the kernel, in a fixed order.
 *  3. attn_bwd_dq: a block owns 64 query rows of one head and walks their key
 *     tiles like the forward: P from lse, dP = dO V^T, dS = P (dP - Dvec),
 *     dQ += dS K. Each dq row is written once, by one block.
 * Recomputing S and dP in the dq pass costs 2 of the backward's 7 matmuls
 * (the atomic version does 5); that is the price of determinism.
 *
 * Varlen: blocks are numbered (tile entry, head) with the head fastest, so
 * the query heads that share a kv head run side by side and share its tiles
 * in L2. The entries of sequence s are its tiles; a warp finds which
 * sequence an entry belongs to with a prefix sum over cu_seqlens (no host
 * copy of cu_seqlens and no extra launch). The grid is sized by the bound
 * ceil(T / tile) + n_seqs; surplus blocks exit at once. Within a sequence
 * the most expensive tiles come first so the last wave is the light one.
 * Padding tokens after cu_seqlens[n_seqs] are zeroed by attn_pad, which also
 * checks the layout of cu_seqlens on the device (a bad layout traps with a
 * message instead of reading out of bounds).
 *
 * On Hopper (compute capability 9.0) the forward and the two backward passes
 * for head_dim 64 and 128 run the warp-specialized wgmma / TMA versions of
 * these kernels (attention_wgmma.cu: same algorithms, 128-row blocks); the
 * mma.sync kernels here serve every other GPU, inputs TMA cannot read (not
 * 16-byte aligned), and are tested on Hopper by building with
 * -DATTN_FORCE_MMA=1. */
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "kernels/attention.cuh"

/* ---- padding and layout check ----------------------------------------------------- */

struct attn_pad_job {
    bf16 *buf[3]; /* [T, row[i]] act buffers whose padding rows are zeroed */
    int row[3];
    int nbuf;
    float *f; /* [fh, T] fp32 (lse), or NULL */
    int fh;
};

/* Zeroes every row at or after cu_seqlens[n_seqs]; block 0 also checks that
 * cu_seqlens starts at 0, never decreases and stays inside T. */
__global__ void attn_pad(attn_pad_job job, const int32_t *cu, int n_seqs, int T, int backward) {
    if (blockIdx.x == 0 && n_seqs > 0) {
        for (int s = threadIdx.x; s <= n_seqs; s += blockDim.x) {
            const int a = cu[s];
            const bool bad = (s == 0 && a != 0) || (s > 0 && a < cu[s - 1]) || a > T;
            if (bad) {
                printf("%s: cu_seqlens[%d] = %d breaks the layout (must start at 0, never decrease, stay <= T = %d)\n",
                       backward ? "attention_backward" : "attention_forward", s, a, T);
                __trap();
            }
        }
    }
    int covered = n_seqs > 0 ? cu[n_seqs] : 0;
    covered = covered < 0 ? 0 : (covered > T ? T : covered);
    const size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int b = 0; b < job.nbuf; b++) {
        const size_t lo = (size_t)covered * job.row[b], hi = (size_t)T * job.row[b];
        for (size_t i = lo + i0; i < hi; i += stride) job.buf[b][i] = __float2bfloat16_rn(0.0f);
    }
    if (job.f) {
        const size_t pad = (size_t)(T - covered), n = pad * job.fh;
        for (size_t i = i0; i < n; i += stride) job.f[(i / pad) * T + covered + i % pad] = 0.0f;
    }
}

/* ---- forward -------------------------------------------------------------------------- */

template <int D, int MT>
struct fwd_cfg {
    static constexpr int BM = 16 * MT * 4, BN = ATTN_BN, LDS = D + 8;
    static constexpr size_t SMEM = (size_t)(BM + 4 * BN) * LDS * sizeof(bf16); /* Q, 2 x (K, V) */
};

template <int D, int MT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_fwd(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ q, const bf16 *__restrict__ k,
             const bf16 *__restrict__ v, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq, int Hkv,
             float scale_log2) {
    using cfg = fwd_cfg<D, MT>;
    constexpr int BM = cfg::BM, BN = cfg::BN, LDS = cfg::LDS, NT = BN / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem;
    bf16 *sK = sQ + BM * LDS; /* two stages */
    bf16 *sV = sK + 2 * BN * LDS;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_qtile tq;
    if (!attn_qtile_find<BM, BN>(tq, cu, n_seqs, Hq, Hkv)) return;
    const int h = tq.h, kvh = tq.kvh, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;
    const bf16 *qb = q + (size_t)off * ldq + (size_t)h * D;
    const bf16 *kb = k + (size_t)off * ldk + (size_t)kvh * D;
    const bf16 *vb = v + (size_t)off * ldk + (size_t)kvh * D;

    load_tile<BM, D>(sQ, qb, ldq, q0, L, tid);
    load_tile<BN, D>(sK, kb, ldk, (nkv - 1) * BN, L, tid);
    load_tile<BN, D>(sV, vb, ldk, (nkv - 1) * BN, L, tid);
    cp_async_commit();

    const int wrow = warp * 16 * MT; /* this warp's first row inside the tile */
    const int g = lane >> 2, t4 = lane & 3;
    float o[MT][DT][4];
    float m_i[MT][2], l_i[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int j = 0; j < DT; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
        m_i[mt][0] = m_i[mt][1] = -INFINITY;
        l_i[mt][0] = l_i[mt][1] = 0.0f;
    }

    for (int it = 0; it < nkv; it++) {
        const int nb = nkv - 1 - it, stage = it & 1;
        cp_async_next(it + 1 < nkv, [&] {
            load_tile<BN, D>(sK + (stage ^ 1) * BN * LDS, kb, ldk, (nb - 1) * BN, L, tid);
            load_tile<BN, D>(sV + (stage ^ 1) * BN * LDS, vb, ldk, (nb - 1) * BN, L, tid);
        });
        __syncthreads();
        const bf16 *cK = sK + stage * BN * LDS, *cV = sV + stage * BN * LDS;

        /* S = Q K^T for this warp's rows and the tile's 64 keys. */
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ldsm_x4(a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                        smem_addr(sQ + (wrow + mt * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3,
                        smem_addr(cK + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 +
                                  ((lane >> 3) & 1) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_bf16(s[mt][2 * np], a[mt], b0, b1);
                    mma_bf16(s[mt][2 * np + 1], a[mt], b2, b3);
                }
            }
        }

        /* Causal mask, only where the tile reaches past this warp's first
         * row; then the online softmax. */
        const int k0 = nb * BN;
        if (k0 + BN - 1 > q0 + wrow) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) strip_causal_mask(s[mt], q0 + wrow + mt * 16, k0, g, t4);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) strip_softmax(s[mt], o[mt], m_i[mt], l_i[mt], scale_log2);

        /* O += P V, P straight from the score registers. */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) acc_to_a(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          smem_addr(cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 +
                                    (lane >> 4) * 8));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_bf16(o[mt][2 * dp], pa[mt], b0, b1);
                    mma_bf16(o[mt][2 * dp + 1], pa[mt], b2, b3);
                }
            }
        }
        __syncthreads(); /* this stage is refilled by the next iteration's prefetch */
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        strip_store_out(out, lse, o[mt], m_i[mt], l_i[mt], q0 + wrow + mt * 16, off, L, ldq, h, T, g, t4, scale_log2);
}

/* ---- backward: Dvec = rowsum(dout * out) ----------------------------------------------- */

/* One warp per (token, head) row; fp32 sum over D in a fixed lane order
 * (lane l takes the pairs 2l, 2l + 64, ...). */
template <int D>
__global__ void __launch_bounds__(256) attn_bwd_dot(float *__restrict__ dvec, const bf16 *__restrict__ dout,
                                                    const bf16 *__restrict__ out, const int32_t *__restrict__ cu,
                                                    int n_seqs, int T, int Hq) {
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int covered = n_seqs > 0 ? cu[n_seqs] : 0;
    if (row >= (size_t)covered * Hq) return;
    const int t = (int)(row / Hq), h = (int)(row % Hq);
    const bf16 *a = dout + row * D, *b = out + row * D;
    float s = 0.0f;
#pragma unroll
    for (int i = 2 * lane; i < D; i += 64) {
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(a + i));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(b + i));
        s = fmaf(x.x, y.x, s);
        s = fmaf(x.y, y.y, s);
    }
    s = warp_sum(s);
    if (lane == 0) dvec[(size_t)h * T + t] = s;
}

/* ---- warp products of the backward ------------------------------------------------------ */

/* acc = A B^T for a warp's strip: A = 16 rows of a [*, D] tile at sA, B =
 * the NT * 8 rows of the [*, D] tile at sB (both row stride LDS), so the
 * strip gets one column per row of B. */
template <int NT, int D, int LDS>
__device__ __forceinline__ void strip_mma_abt(float (&acc)[NT][4], const bf16 *sA, const bf16 *sB, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldsm_x4(a[0], a[1], a[2], a[3], smem_addr(sA + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(b0, b1, b2, b3,
                    smem_addr(sB + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8));
            mma_bf16(acc[2 * np], a, b0, b1);
            mma_bf16(acc[2 * np + 1], a, b2, b3);
        }
    }
}

/* acc += A B for a warp's strip: A = the strip's [16, 16 KT] accumulator c
 * (P or dS) repacked as bf16 fragments, B = the [16 KT, D] tile at sB (row
 * stride LDS), read transposed by ldmatrix. */
template <int KT, int D, int LDS>
__device__ __forceinline__ void strip_mma_ab(float (&acc)[D / 8][4], const float (&c)[2 * KT][4], const bf16 *sB,
                                             int lane) {
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a[4];
        acc_to_a(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(b0, b1, b2, b3,
                      smem_addr(sB + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8));
            mma_bf16(acc[2 * dp], a, b0, b1);
            mma_bf16(acc[2 * dp + 1], a, b2, b3);
        }
    }
}

/* ---- backward: dK, dV ----------------------------------------------------------------- */

template <int D>
struct bwd_cfg {
    static constexpr int BM = ATTN_BWD_BM, BN = ATTN_BN, LDS = D + 8;
    /* dkdv: K, V, 2 x (Q, dO) tiles, 2 x (lse, Dvec) rows; dq: Q, dO, 2 x (K, V). */
    static constexpr size_t SMEM_DKDV = (size_t)(2 * BN + 4 * BM) * LDS * sizeof(bf16) + 4 * BM * sizeof(float);
    static constexpr size_t SMEM_DQ = (size_t)(2 * BM + 4 * BN) * LDS * sizeof(bf16);
};

template <int D>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dkdv(bf16 *__restrict__ dk, bf16 *__restrict__ dv, const bf16 *__restrict__ dout,
                  const bf16 *__restrict__ q, const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                  const float *__restrict__ lse, const float *__restrict__ dvec, const int32_t *__restrict__ cu,
                  int n_seqs, int T, int Hq, int Hkv, float scale, float scale_log2) {
    using cfg = bwd_cfg<D>;
    constexpr int BM = cfg::BM, BN = cfg::BN, LDS = cfg::LDS, NT = BM / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = (bf16 *)smem;
    bf16 *sV = sK + BN * LDS;
    bf16 *sQ = sV + BN * LDS;   /* two stages */
    bf16 *sdO = sQ + 2 * BM * LDS; /* two stages */
    float *sL = (float *)(sdO + 2 * BM * LDS); /* lse, two stages */
    float *sD = sL + 2 * BM;                   /* Dvec, two stages */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_ktile tk;
    if (!attn_ktile_find<BM, BN>(tk, cu, n_seqs, Hq, Hkv)) return;
    const int kvh = tk.kvh, off = tk.off, L = tk.L, n0 = tk.n0, group = Hq / Hkv;
    const int m_first = tk.m_first, per_head = tk.per_head, steps = tk.steps;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;

    load_tile<BN, D>(sK, k + (size_t)off * ldk + (size_t)kvh * D, ldk, n0, L, tid);
    load_tile<BN, D>(sV, v + (size_t)off * ldk + (size_t)kvh * D, ldk, n0, L, tid);

    /* Q, dO, lse and Dvec of step i (head kvh * group + i / per_head, query
     * tile m_first + i % per_head) into stage st. */
    auto load_step = [&](int i, int st) {
        const int hq = kvh * group + i / per_head, m0 = (m_first + i % per_head) * BM;
        const size_t hoff = (size_t)off * ldq + (size_t)hq * D;
        load_tile<BM, D>(sQ + st * BM * LDS, q + hoff, ldq, m0, L, tid);
        load_tile<BM, D>(sdO + st * BM * LDS, dout + hoff, ldq, m0, L, tid);
        if (tid < BM) {
            const int row = m0 + tid;
            const bool ok = row < L;
            const size_t at = (size_t)hq * T + off + (ok ? row : 0);
            cp_async4(smem_addr(sL + st * BM + tid), lse + at, ok);
            cp_async4(smem_addr(sD + st * BM + tid), dvec + at, ok);
        }
    };
    load_step(0, 0);
    cp_async_commit();

    const int g = lane >> 2, t4 = lane & 3;
    const int krow = warp * 16; /* this warp's 16 keys inside the tile */
    float dK[DT][4], dV[DT][4];
#pragma unroll
    for (int j = 0; j < DT; j++) {
        dK[j][0] = dK[j][1] = dK[j][2] = dK[j][3] = 0.0f;
        dV[j][0] = dV[j][1] = dV[j][2] = dV[j][3] = 0.0f;
    }

    for (int i = 0; i < steps; i++) {
        const int st = i & 1;
        cp_async_next(i + 1 < steps, [&] { load_step(i + 1, st ^ 1); });
        __syncthreads();
        const bf16 *cQ = sQ + st * BM * LDS, *cdO = sdO + st * BM * LDS;
        const float *cL = sL + st * BM, *cD = sD + st * BM;
        const int m0 = (m_first + i % per_head) * BM;

        /* S^T = K Q^T: 16 keys x 64 queries per warp. */
        float s[NT][4];
        strip_mma_abt<NT, D, LDS>(s, sK + krow * LDS, cQ, lane);

        /* P^T = exp(scale s - lse), masked on the diagonal and last tiles. */
        const bool edge = (m0 == m_first * BM) || (m0 + BM > L);
        strip_dkdv_p(s, cL, edge, n0 + krow, m0, L, g, t4, scale_log2);

        /* dV += P^T dO, dP^T = V dO^T. */
        strip_mma_ab<BM / 16, D, LDS>(dV, s, cdO, lane);
        float dp_[NT][4];
        strip_mma_abt<NT, D, LDS>(dp_, sV + krow * LDS, cdO, lane);

        /* dS^T = P^T (dP^T - Dvec), then dK += dS^T Q. */
        strip_dkdv_ds(s, dp_, cD, t4);
        strip_mma_ab<BM / 16, D, LDS>(dK, dp_, cQ, lane);
        __syncthreads();
    }

    strip_store_dkdv(dk, dv, dK, dV, n0 + krow, off, L, ldk, kvh, g, t4, scale);
}

/* ---- backward: dQ --------------------------------------------------------------------- */

template <int D>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dq(bf16 *__restrict__ dq, const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
                const bf16 *__restrict__ k, const bf16 *__restrict__ v, const float *__restrict__ lse,
                const float *__restrict__ dvec, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq, int Hkv,
                float scale, float scale_log2) {
    using cfg = bwd_cfg<D>;
    constexpr int BM = cfg::BM, BN = cfg::BN, LDS = cfg::LDS, NT = BN / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = (bf16 *)smem;
    bf16 *sdO = sQ + BM * LDS;
    bf16 *sK = sdO + BM * LDS; /* two stages */
    bf16 *sV = sK + 2 * BN * LDS; /* two stages */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_qtile tq;
    if (!attn_qtile_find<BM, BN>(tq, cu, n_seqs, Hq, Hkv)) return;
    const int h = tq.h, kvh = tq.kvh, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;
    const size_t hoff = (size_t)off * ldq + (size_t)h * D;
    const bf16 *kb = k + (size_t)off * ldk + (size_t)kvh * D;
    const bf16 *vb = v + (size_t)off * ldk + (size_t)kvh * D;

    load_tile<BM, D>(sQ, q + hoff, ldq, q0, L, tid);
    load_tile<BM, D>(sdO, dout + hoff, ldq, q0, L, tid);
    load_tile<BN, D>(sK, kb, ldk, (nkv - 1) * BN, L, tid);
    load_tile<BN, D>(sV, vb, ldk, (nkv - 1) * BN, L, tid);
    cp_async_commit();

    const int g = lane >> 2, t4 = lane & 3, wrow = warp * 16;
    float lrow[2], drow[2];
    strip_load_rowstats(lrow, drow, lse, dvec, q0 + wrow, off, L, h, T, g);
    float dQ[DT][4];
#pragma unroll
    for (int j = 0; j < DT; j++) dQ[j][0] = dQ[j][1] = dQ[j][2] = dQ[j][3] = 0.0f;

    for (int it = 0; it < nkv; it++) {
        const int nb = nkv - 1 - it, stage = it & 1;
        cp_async_next(it + 1 < nkv, [&] {
            load_tile<BN, D>(sK + (stage ^ 1) * BN * LDS, kb, ldk, (nb - 1) * BN, L, tid);
            load_tile<BN, D>(sV + (stage ^ 1) * BN * LDS, vb, ldk, (nb - 1) * BN, L, tid);
        });
        __syncthreads();
        const bf16 *cK = sK + stage * BN * LDS, *cV = sV + stage * BN * LDS;

        /* S = Q K^T and dP = dO V^T share the k-loop over D. */
        float s[NT][4], dp_[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
            dp_[j][0] = dp_[j][1] = dp_[j][2] = dp_[j][3] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[4], ao[4];
            ldsm_x4(a[0], a[1], a[2], a[3], smem_addr(sQ + (wrow + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8));
            ldsm_x4(ao[0], ao[1], ao[2], ao[3],
                    smem_addr(sdO + (wrow + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8));
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                const int r = (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8;
                uint32_t b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3, smem_addr(cK + r));
                mma_bf16(s[2 * np], a, b0, b1);
                mma_bf16(s[2 * np + 1], a, b2, b3);
                ldsm_x4(b0, b1, b2, b3, smem_addr(cV + r));
                mma_bf16(dp_[2 * np], ao, b0, b1);
                mma_bf16(dp_[2 * np + 1], ao, b2, b3);
            }
        }

        /* dS = P (dP - Dvec) with P = exp(scale s - lse), causal mask. */
        const int k0 = nb * BN;
        strip_dq_ds(s, dp_, lrow, drow, k0 + BN - 1 > q0 + wrow, q0 + wrow, k0, g, t4, scale_log2);

        /* dQ += dS K. */
        strip_mma_ab<BN / 16, D, LDS>(dQ, dp_, cK, lane);
        __syncthreads();
    }

    strip_store_dq(dq, dQ, q0 + wrow, off, L, ldq, h, g, t4, scale);
}

/* ---- host side ------------------------------------------------------------------------ */

static void attn_check(const char *op, const void *const *ptrs, int nptr, int n_seqs, int T, int Hq, int Hkv, int D,
                       float scale) {
    if (n_seqs < 0 || T < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
        DK_ABORT("%s: bad shape n_seqs=%d T=%d Hq=%d Hkv=%d (need Hq %% Hkv == 0)", op, n_seqs, T, Hq, Hkv);
    if (D != 16 && D != 32 && D != 64 && D != 128)
        DK_ABORT("%s: head_dim %d has no CUDA kernel (16, 32, 64 and 128 do; the CPU backend takes any)", op, D);
    if (!(scale > 0.0f) || !isfinite(scale)) DK_ABORT("%s: scale %g must be positive and finite", op, (double)scale);
    for (int i = 0; i < nptr; i++)
        if (!is_aligned16(ptrs[i]))
            DK_ABORT("%s: act buffer %d (%p) is not 16-byte aligned, which the tile loads need", op, i, ptrs[i]);
}

/* Upper bound of the tile entries over all sequences: sum ceil(L_s / tile)
 * <= ceil(T / tile) + n_seqs. Checked against the 1-D grid limit. */
static unsigned attn_grid(const char *op, int T, int n_seqs, int tile, int heads) {
    long long entries = ((long long)T + tile - 1) / tile + n_seqs;
    long long blocks = entries * heads;
    if (blocks > INT_MAX) DK_ABORT("%s: %lld blocks exceed the grid limit (T=%d n_seqs=%d)", op, blocks, T, n_seqs);
    return (unsigned)blocks;
}

/* Padding is usually a few rows or none, so a small grid-stride grid does. */
static void attn_pad_launch(ops_ctx *ctx, attn_pad_job job, const int32_t *cu, int n_seqs, int T, int backward) {
    attn_pad<<<grid_for(ctx, (size_t)T * 64, 256, 2), 256, 0, ctx_stream(ctx)>>>(job, cu, n_seqs, T, backward);
    CUDA_LAUNCH_CHECK();
}

template <int D>
static void fwd_launch(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                       const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, float scale_log2) {
    using cfg = fwd_cfg<D, ATTN_FWD_MT>;
    auto kern = attn_fwd<D, ATTN_FWD_MT>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM));
    unsigned grid = attn_grid("attention_forward", T, n_seqs, cfg::BM, Hq);
    kern<<<grid, ATTN_THREADS, cfg::SMEM, ctx_stream(ctx)>>>(out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale_log2);
    CUDA_LAUNCH_CHECK();
}

template <int D>
static void bwd_launch(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                       const bf16 *v, const bf16 *out, const float *lse, float *dvec, const int32_t *cu, int n_seqs,
                       int T, int Hq, int Hkv, float scale) {
    using cfg = bwd_cfg<D>;
    cudaStream_t st = ctx_stream(ctx);
    const float scale_log2 = scale * LOG2E_F;
    const size_t rows = (size_t)T * Hq;
    attn_bwd_dot<D><<<div_up(rows, 8), 256, 0, st>>>(dvec, dout, out, cu, n_seqs, T, Hq);
    CUDA_LAUNCH_CHECK();
    if (D >= 64 && attn_wgmma_ok(ctx) &&
        attn_bwd_wgmma(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, D, scale))
        return;

    auto kdkdv = attn_bwd_dkdv<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kdkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM_DKDV));
    unsigned g1 = attn_grid("attention_backward", T, n_seqs, cfg::BN, Hkv);
    kdkdv<<<g1, ATTN_THREADS, cfg::SMEM_DKDV, st>>>(dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale,
                                                    scale_log2);
    CUDA_LAUNCH_CHECK();

    auto kdq = attn_bwd_dq<D>;
    CUDA_CHECK(cudaFuncSetAttribute(kdq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM_DQ));
    unsigned g2 = attn_grid("attention_backward", T, n_seqs, cfg::BM, Hq);
    kdq<<<g2, ATTN_THREADS, cfg::SMEM_DQ, st>>>(dq, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale,
                                               scale_log2);
    CUDA_LAUNCH_CHECK();
}

extern "C" void cuda_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k,
                                       const void *v, const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv,
                                       int D, float scale) {
    const void *ptrs[] = {out, q, k, v};
    attn_check("attention_forward", ptrs, 4, n_seqs, T, Hq, Hkv, D, scale);
    /* Before any launch, so that a bad pin stops the run with nothing queued. */
    if (ctx->tuning.attn_fwd < 0 || ctx->tuning.attn_fwd > 2)
        DK_ABORT("ops_tuning.attn_fwd = %d: expected 0, 1 or 2", ctx->tuning.attn_fwd);
    if (T == 0) return;
    attn_pad_job job = {};
    job.buf[0] = (bf16 *)out;
    job.row[0] = Hq * D;
    job.nbuf = 1;
    job.f = lse;
    job.fh = Hq;
    attn_pad_launch(ctx, job, cu_seqlens, n_seqs, T, 0);
    if (n_seqs == 0) return;
    if (D >= 64 && attn_wgmma_ok(ctx) &&
        attn_fwd_wgmma(ctx, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, cu_seqlens, n_seqs,
                       T, Hq, Hkv, D, scale))
        return;
    const float sl2 = scale * LOG2E_F;
    bf16 *o = (bf16 *)out;
    const bf16 *qb = (const bf16 *)q, *kb = (const bf16 *)k, *vb = (const bf16 *)v;
    switch (D) {
    case 16: fwd_launch<16>(ctx, o, lse, qb, kb, vb, cu_seqlens, n_seqs, T, Hq, Hkv, sl2); break;
    case 32: fwd_launch<32>(ctx, o, lse, qb, kb, vb, cu_seqlens, n_seqs, T, Hq, Hkv, sl2); break;
    case 64: fwd_launch<64>(ctx, o, lse, qb, kb, vb, cu_seqlens, n_seqs, T, Hq, Hkv, sl2); break;
    default: fwd_launch<128>(ctx, o, lse, qb, kb, vb, cu_seqlens, n_seqs, T, Hq, Hkv, sl2); break;
    }
}

extern "C" void cuda_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                        const void *k, const void *v, const void *out, const float *lse,
                                        const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D,
                                        float scale) {
    const void *ptrs[] = {dq, dk, dv, dout, q, k, v, out};
    attn_check("attention_backward", ptrs, 8, n_seqs, T, Hq, Hkv, D, scale);
    if (ctx->tuning.attn_bwd < 0 || ctx->tuning.attn_bwd > 2)
        DK_ABORT("ops_tuning.attn_bwd = %d: expected 0, 1 or 2", ctx->tuning.attn_bwd);
    if (T == 0) return;
    float *dvec = (float *)ctx_scratch(ctx, (size_t)Hq * T * sizeof(float), "attention_backward");
    attn_pad_job job = {};
    job.buf[0] = (bf16 *)dq;
    job.row[0] = Hq * D;
    job.buf[1] = (bf16 *)dk;
    job.row[1] = Hkv * D;
    job.buf[2] = (bf16 *)dv;
    job.row[2] = Hkv * D;
    job.nbuf = 3;
    attn_pad_launch(ctx, job, cu_seqlens, n_seqs, T, 1);
    if (n_seqs == 0) return;
    bf16 *gq = (bf16 *)dq, *gk = (bf16 *)dk, *gv = (bf16 *)dv;
    const bf16 *go = (const bf16 *)dout, *qb = (const bf16 *)q, *kb = (const bf16 *)k, *vb = (const bf16 *)v;
    const bf16 *ob = (const bf16 *)out;
    switch (D) {
    case 16: bwd_launch<16>(ctx, gq, gk, gv, go, qb, kb, vb, ob, lse, dvec, cu_seqlens, n_seqs, T, Hq, Hkv, scale);
        break;
    case 32: bwd_launch<32>(ctx, gq, gk, gv, go, qb, kb, vb, ob, lse, dvec, cu_seqlens, n_seqs, T, Hq, Hkv, scale);
        break;
    case 64: bwd_launch<64>(ctx, gq, gk, gv, go, qb, kb, vb, ob, lse, dvec, cu_seqlens, n_seqs, T, Hq, Hkv, scale);
        break;
    default: bwd_launch<128>(ctx, gq, gk, gv, go, qb, kb, vb, ob, lse, dvec, cu_seqlens, n_seqs, T, Hq, Hkv, scale);
        break;
    }
}
