/* attention.cuh: what the two halves of the CUDA attention share: tile
 * sizes, fragment helpers on top of mma_common.cuh, the varlen tile
 * lookup, and the entry points of the Hopper kernels (attention_wgmma.cu)
 * that attention.cu dispatches to on sm_90. */
#ifndef DK_ATTENTION_CUH
#define DK_ATTENTION_CUH

#include "kernels/cuda_common.cuh"
#include "kernels/mma_common.cuh"

#define ATTN_THREADS 128 /* 4 warps per block in every kernel here */
#define ATTN_BN 64       /* key / value rows per tile */
#define ATTN_BWD_BM 64   /* query rows per tile in the backward */
/* m16 row tiles per warp in the mma.sync forward: 2 means 32 query rows per
 * warp and 128 per block, which halves the shared-memory reads per
 * multiply-add compared with 16 rows (each K / V fragment feeds two mma).
 * On the H200 at B=4 H=32 KV=8 S=4096 D=128: 1.90 ms against 2.47 ms. */
#define ATTN_FWD_MT 2
/* 1: use the mma.sync kernels on Hopper too (how the fallback is tested on
 * an H200); 0: Hopper runs the wgmma kernels of attention_wgmma.cu. */
#ifndef ATTN_FORCE_MMA
#define ATTN_FORCE_MMA 0
#endif

/* ---- small device helpers (fast_exp2, LOG2E_F: cuda_common.cuh) ----------------- */

/* The accumulators of n-tiles 2kk and 2kk+1 (16 columns) of a 16-row strip,
 * repacked as the A fragment of the next mma over those 16 columns. */
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack_bf16(c0[0], c0[1]);
    a[1] = pack_bf16(c0[2], c0[3]);
    a[2] = pack_bf16(c1[0], c1[1]);
    a[3] = pack_bf16(c1[2], c1[3]);
}

/* Copies rows row0 .. row0+ROWS-1 (tokens of the sequence, row stride ld
 * elements) of a [*, D] head slice into shared memory with row stride D + 8;
 * rows at or past `end` are zero-filled so that no stale value, NaN
 * included, can leak into a product. */
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, size_t ld, int row0, int end, int tid) {
    constexpr int CH = D / 8, LDS = D + 8;
    static_assert((ROWS * CH) % ATTN_THREADS == 0, "tile must split evenly over the block");
#pragma unroll
    for (int it = 0; it < ROWS * CH / ATTN_THREADS; it++) {
        const int i = it * ATTN_THREADS + tid, r = i / CH, c = i % CH, row = row0 + r;
        const bool ok = row < end;
        cp_async16(smem_addr(s + r * LDS + c * 8), g + (size_t)(ok ? row : 0) * ld + c * 8, ok);
    }
}

/* One step of a two-stage cp.async pipeline: while there is a next tile
 * (more), load_next() issues its copies into the other stage and the wait
 * leaves them in flight; on the last step everything is waited for. The
 * caller's __syncthreads() then publishes the current stage. */
template <typename F>
__device__ __forceinline__ void cp_async_next(bool more, F load_next) {
    if (more) {
        load_next();
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* Which sequence the idx-th tile entry belongs to, entries numbered sequence
 * by sequence with ceil(len / tile) entries each. Every lane of the warp
 * calls it and gets (sequence, tile index inside it), or (-1, 0) past the
 * last entry. A 32-wide prefix sum per step over the sequence lengths. */
__device__ __forceinline__ int2 find_tile(const int32_t *cu, int n_seqs, int idx, int tile) {
    const int lane = threadIdx.x & 31;
    int base = 0;
    for (int s0 = 0; s0 < n_seqs; s0 += 32) {
        const int s = s0 + lane;
        int nt = 0;
        if (s < n_seqs) nt = (cu[s + 1] - cu[s] + tile - 1) / tile;
        int incl = nt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        const int total = __shfl_sync(0xffffffffu, incl, 31);
        if (idx < base + total) {
            const unsigned hit = __ballot_sync(0xffffffffu, idx < base + incl);
            const int l = __ffs(hit) - 1;
            const int excl = __shfl_sync(0xffffffffu, incl - nt, l);
            return make_int2(s0 + l, idx - base - excl);
        }
        base += total;
    }
    return make_int2(-1, 0);
}

/* How many tile entries (ceil(len / tile) per sequence) the sequences
 * before `seq` have: the first entry of `seq` in find_tile's numbering.
 * Every lane of the warp calls it. */
__device__ __forceinline__ int tile_entry_first(const int32_t *cu, int seq, int tile) {
    const int lane = threadIdx.x & 31;
    int sum = 0;
    for (int s = lane; s < seq; s += 32) sum += (cu[s + 1] - cu[s] + tile - 1) / tile;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum;
}

/* Where a block of the forward or of the dQ pass works. Blocks are numbered
 * (tile entry, query head) with the head fastest, so the query heads that
 * share a kv head run side by side; within a sequence the heaviest tile (the
 * last rows, which see the most keys) comes first. False for a surplus
 * block past the last entry. */
struct attn_qtile {
    int h, kvh; /* query head, and the kv head it reads */
    int off, L; /* first token and length of the sequence */
    int q0;     /* first query row of the tile inside the sequence */
    int nkv;    /* key tiles at or before the tile's last row */
};
/* The tile of block number idx (a persistent block visits several). */
template <int BM, int BN>
__device__ __forceinline__ bool attn_qtile_at(attn_qtile &t, int idx, const int32_t *cu, int n_seqs, int Hq, int Hkv) {
    t.h = idx % Hq;
    const int2 loc = find_tile(cu, n_seqs, idx / Hq, BM);
    if (loc.x < 0) return false;
    t.off = cu[loc.x];
    t.L = cu[loc.x + 1] - t.off;
    t.q0 = ((t.L + BM - 1) / BM - 1 - loc.y) * BM;
    t.kvh = t.h / (Hq / Hkv);
    t.nkv = (min(t.L, t.q0 + BM) + BN - 1) / BN;
    return true;
}
template <int BM, int BN>
__device__ __forceinline__ bool attn_qtile_find(attn_qtile &t, const int32_t *cu, int n_seqs, int Hq, int Hkv) {
    return attn_qtile_at<BM, BN>(t, blockIdx.x, cu, n_seqs, Hq, Hkv);
}

/* Where a block of the dK / dV pass works: BN keys from n0 of kv head kvh,
 * blocks numbered (tile entry, kv head) with the kv head fastest and the
 * first key tile of a sequence (the one most query tiles see) first. The
 * block visits `steps` (query head, query tile) pairs: the group's heads in
 * order, each over its per_head query tiles from m_first (the diagonal) on. */
struct attn_ktile {
    int kvh, off, L, n0;
    int seq;                    /* the sequence, and the key tile's index in it: n0 / BN */
    int m_first, per_head, steps;
};
template <int BM, int BN>
__device__ __forceinline__ bool attn_ktile_find(attn_ktile &t, const int32_t *cu, int n_seqs, int Hq, int Hkv) {
    t.kvh = blockIdx.x % Hkv;
    const int2 loc = find_tile(cu, n_seqs, blockIdx.x / Hkv, BN);
    if (loc.x < 0) return false;
    t.off = cu[loc.x];
    t.L = cu[loc.x + 1] - t.off;
    t.seq = loc.x;
    t.n0 = loc.y * BN;
    t.m_first = t.n0 / BM;
    t.per_head = (t.L + BM - 1) / BM - t.m_first;
    t.steps = (Hq / Hkv) * t.per_head;
    return true;
}

/* ---- strip math ------------------------------------------------------------------------
 * What the mma.sync and the wgmma kernels compute alike on a strip: 16 rows
 * of a warp held as m16n8 accumulators acc[n][4], where lane (g = lane / 4,
 * t4 = lane % 4) holds columns 8n + 2 t4 and 8n + 2 t4 + 1 of row g in
 * acc[n][0..1] and of row g + 8 in acc[n][2..3]. Both instruction families
 * leave their products in this layout. */

/* Causal mask: -inf where the key (col0 + column) comes after the query
 * (row0 + row). */
template <int NT>
__device__ __forceinline__ void strip_causal_mask(float (&s)[NT][4], int row0, int col0, int g, int t4) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = row0 + g + (e >> 1) * 8, col = col0 + j * 8 + t4 * 2 + (e & 1);
            if (col > row) s[j][e] = -INFINITY;
        }
}

/* One online-softmax step of the forward: folds the scores s of a new key
 * tile into the running row max m and row sum l (each lane's partial sum
 * over its columns), leaves P = exp(scale (s - m)) in s and the factor by
 * which the output accumulator must shrink (the max grew) in corr. Split
 * from the rescale so that a kernel can run it while the tensor cores still
 * add into that accumulator. */
template <int NT>
__device__ __forceinline__ void strip_softmax_p(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&corr)[2],
                                                float scale_log2) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT; j++) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        /* A row that has seen only masked keys keeps m = -inf; subtract 0
         * then so that exp2(-inf - -inf) never makes a NaN. */
        const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
        corr[r] = fast_exp2(m[r] * scale_log2 - ms);
        m[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float p0 = fast_exp2(fmaf(s[j][2 * r], scale_log2, -ms));
            const float p1 = fast_exp2(fmaf(s[j][2 * r + 1], scale_log2, -ms));
            s[j][2 * r] = p0;
            s[j][2 * r + 1] = p1;
            sum += p0 + p1;
        }
        l[r] = l[r] * corr[r] + sum;
    }
}

/* Rows g and g + 8 of an output accumulator times corr[0], corr[1]. */
template <int DT>
__device__ __forceinline__ void strip_rescale(float (&o)[DT][4], const float (&corr)[2]) {
#pragma unroll
    for (int j = 0; j < DT; j++) {
        o[j][0] *= corr[0];
        o[j][1] *= corr[0];
        o[j][2] *= corr[1];
        o[j][3] *= corr[1];
    }
}

/* strip_softmax_p with the output accumulator o rescaled at once. */
template <int NT, int DT>
__device__ __forceinline__ void strip_softmax(float (&s)[NT][4], float (&o)[DT][4], float (&m)[2], float (&l)[2],
                                              float scale_log2) {
    float corr[2];
    strip_softmax_p(s, m, l, corr, scale_log2);
    strip_rescale(o, corr);
}

/* Row r (0: g, 1: g + 8) of a [16, 8 DT] accumulator times mul, as bf16
 * into the row that starts at dst (this lane's two columns of each n8 tile). */
template <int DT>
__device__ __forceinline__ void strip_store_row(bf16 *dst, const float (&acc)[DT][4], int r, float mul, int t4) {
#pragma unroll
    for (int j = 0; j < DT; j++)
        *reinterpret_cast<__nv_bfloat162 *>(dst + j * 8 + t4 * 2) =
            __floats2bfloat162_rn(acc[j][2 * r] * mul, acc[j][2 * r + 1] * mul);
}

/* The forward's end for a strip whose first row is `row0` of the sequence
 * starting at token off: out = o / l for the rows inside the sequence
 * (length L), lse = m scale + log l (natural log) beside them. */
template <int DT>
__device__ __forceinline__ void strip_store_out(bf16 *out, float *lse, const float (&o)[DT][4], const float (&m)[2],
                                                const float (&l)[2], int row0, int off, int L, size_t ldq, int h,
                                                int T, int g, int t4, float scale_log2) {
    constexpr int D = DT * 8;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = l[r];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int row = row0 + g + r * 8;
        if (row >= L) continue;
        strip_store_row(out + (size_t)(off + row) * ldq + (size_t)h * D, o, r, 1.0f / sum, t4);
        if (t4 == 0) lse[(size_t)h * T + off + row] = (m[r] * scale_log2 + log2f(sum)) * LN2_F;
    }
}

/* dQ pass: the saved lse (times log2 e) and Dvec of rows row0 + g and
 * row0 + g + 8 of head h (0 past the sequence's length L). */
__device__ __forceinline__ void strip_load_rowstats(float (&lrow)[2], float (&drow)[2], const float *lse,
                                                    const float *dvec, int row0, int off, int L, int h, int T, int g) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        const bool ok = row < L;
        lrow[r] = ok ? lse[(size_t)h * T + off + row] * LOG2E_F : 0.0f;
        drow[r] = ok ? dvec[(size_t)h * T + off + row] : 0.0f;
    }
}

/* dQ pass: dS = P (dP - Dvec) in dp, with P = exp(scale s - lse) from the
 * row's saved lse (lrow, times log2 e) and Dvec (drow); on a tile that
 * reaches the diagonal (diag), P = 0 where the key col0 + column comes after
 * the query row0 + row. */
template <int NT>
__device__ __forceinline__ void strip_dq_ds(const float (&s)[NT][4], float (&dp)[NT][4], const float (&lrow)[2],
                                            const float (&drow)[2], bool diag, int row0, int col0, int g, int t4,
                                            float scale_log2) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
            float p = fast_exp2(fmaf(s[j][e], scale_log2, -lrow[r]));
            if (diag && col0 + j * 8 + t4 * 2 + (e & 1) > row0 + g + r * 8) p = 0.0f;
            dp[j][e] = p * (dp[j][e] - drow[r]);
        }
}

/* dK / dV pass, transposed strip (rows are keys key0.., columns queries
 * m0..): P^T = exp(scale s - lse) into s from the tile's lse row cL; on an
 * edge tile (the diagonal one or the last), 0 where the query precedes the
 * key or lies past the sequence (length L). */
template <int NT>
__device__ __forceinline__ void strip_dkdv_p(float (&s)[NT][4], const float *cL, bool edge, int key0, int m0, int L,
                                             int g, int t4, float scale_log2) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int qc = j * 8 + t4 * 2 + (e & 1);
            float p = fast_exp2(fmaf(s[j][e], scale_log2, -cL[qc] * LOG2E_F));
            if (edge) {
                const int key = key0 + g + (e >> 1) * 8, qry = m0 + qc;
                if (qry < key || qry >= L) p = 0.0f;
            }
            s[j][e] = p;
        }
}

/* dK / dV pass: dS^T = P^T (dP^T - Dvec) into dp, Dvec from the tile's row cD. */
template <int NT>
__device__ __forceinline__ void strip_dkdv_ds(const float (&p)[NT][4], float (&dp)[NT][4], const float *cD, int t4) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dp[j][e] = p[j][e] * (dp[j][e] - cD[j * 8 + t4 * 2 + (e & 1)]);
}

/* The dK / dV pass's end: rows key0 + g (+ 8) of dk (times scale) and dv,
 * those inside the sequence. */
template <int DT>
__device__ __forceinline__ void strip_store_dkdv(bf16 *dk, bf16 *dv, const float (&dK)[DT][4], const float (&dV)[DT][4],
                                                 int key0, int off, int L, size_t ldk, int kvh, int g, int t4,
                                                 float scale) {
    constexpr int D = DT * 8;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key0 + g + r * 8;
        if (key >= L) continue;
        const size_t at = (size_t)(off + key) * ldk + (size_t)kvh * D;
        strip_store_row(dk + at, dK, r, scale, t4);
        strip_store_row(dv + at, dV, r, 1.0f, t4);
    }
}

/* The dQ pass's end: rows row0 + g (+ 8) of dq times scale, those inside
 * the sequence. */
template <int DT>
__device__ __forceinline__ void strip_store_dq(bf16 *dq, const float (&dQ)[DT][4], int row0, int off, int L,
                                               size_t ldq, int h, int g, int t4, float scale) {
    constexpr int D = DT * 8;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + r * 8;
        if (row >= L) continue;
        strip_store_row(dq + (size_t)(off + row) * ldq + (size_t)h * D, dQ, r, scale, t4);
    }
}

/* ---- Hopper kernels (attention_wgmma.cu) ------------------------------------------ */

/* 1 when the ctx's GPU runs the wgmma kernels: compute capability 9.0 and
 * this build carries sm_90a code (the CMake build always does). */
int attn_wgmma_ok(const ops_ctx *ctx);
/* 0 (nothing launched) when q, k or v is not 16-byte aligned for TMA. */
int attn_fwd_wgmma(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                   const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, int D, float scale);
/* 0 (nothing launched) when q, k, v or dout is not 16-byte aligned. */
int attn_bwd_wgmma(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                   int Hkv, int D, float scale);

#endif
