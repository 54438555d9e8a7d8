/* attention_wgmma.cu: the flash attention kernels of attention.cu rewritten
 * for Hopper (sm_90a): warpgroup MMA (wgmma), TMA loads and warp
 * specialization. Same algorithms as there: online softmax walking the key
 * tiles from the diagonal back, and the deterministic backward in two
 * passes (dK / dV per key block, dQ per query block, no atomics).
 *
 * Why this shape. With mma.sync every warp pulls each K / V fragment out of
 * shared memory itself (ldmatrix), and those reads bound the kernels (ncu on
 * the H200, mma.sync dK/dV pass: L1 75% busy, SM 46%); wgmma lets the four
 * warps of a warpgroup issue one 64-row product whose operands the tensor
 * cores read straight from shared memory through matrix descriptors. A
 * first wgmma version with one warpgroup per block (64 x 64 tiles, its own
 * cp.async loads) reached 0.65x / 0.72x of torch SDPA (forward /
 * forward+backward, B=4 H=32 KV=8 S=4096 D=128): the tensor cores idled
 * while the same warps loaded tiles and did the softmax. So every kernel
 * here runs three warpgroups: one producer thread issues TMA copies into a
 * ring of stages (full / empty mbarriers), and two consumer warpgroups own
 * 64 rows each of a 128-row block, so each streamed tile feeds 128 rows;
 * in the forward the consumers pass an issue token through named barriers
 * so one issues its products while the other does its softmax (ping-pong),
 * and registers move from the producer to the consumers (setmaxnreg).
 * Measured on the H200 at that shape (build/bench_attention): forward
 * 1.43 -> 0.91 ms (1.0x SDPA, 600 TFLOP/s), forward+backward 5.7 -> 4.45 ms
 * (0.92x). ncu: tensor pipes busy 67% in the forward, 63% in both backward
 * passes (with the token); the backward's remaining cost is its 7 products
 * where a non-deterministic one does 5 (the dQ pass recomputes S and dP).
 *
 * Layout. Every [rows, D] tile lives in shared memory in the 128-byte
 * swizzled layout the descriptors describe: D/64 blocks of [rows, 64]
 * elements with a 128-byte row pitch, the 16-byte chunk c of row r stored at
 * position c ^ (r % 8) of its row (atoms of 8 rows x 128 bytes, 1024-byte
 * aligned). The same bytes serve as
 *   K-major operand (rows = M or N, d = the reduction): descriptor start
 *     + 32 bytes per k16 step inside a block, + rows * 128 per block;
 *     stride between 8-row groups (SBO) 1024;
 *   MN-major operand (rows = the reduction, d = N): start + 16 rows * 128
 *     bytes per k16 step, 64-column blocks rows * 128 apart (LBO), 8-row
 *     groups 1024 apart (SBO).
 * So S = Q K^T reads K K-major, O += P V reads V MN-major, and the backward
 * uses Q, dO, K, V both ways without a transposed copy.
 *
 * Accumulators follow the wgmma fragment layout: warp w of the warpgroup
 * holds rows 16w..16w+15, lane (g = lane/4, t = lane%4) holds columns
 * 8j + 2t, +1 of rows g and g + 8 in d[4j .. 4j+3] -- the mma.sync m16n8
 * layout repeated, so the masking and softmax code is the one of
 * attention.cu. Accumulators repack into A fragments (P, dS) as there.
 *
 * Ordering. TMA writes a stage through the async proxy and completes the
 * stage's full mbarrier with its byte count; a consumer that has waited on
 * it may feed the stage to wgmma. The few shared-memory writes the
 * consumers make themselves (zeroing rows past a sequence's end) are
 * followed by fence.proxy.async and a barrier of that warpgroup before its
 * products read them. A stage goes back to the producer when all eight
 * consumer warps have arrived on its empty mbarrier, after the wgmma that
 * read it has been waited for. wgmma runs asynchronously: registers it
 * reads or writes are fenced (wgmma.fence) before the batch and tied to the
 * wait afterwards (reg_fence), so the compiler cannot move a read of an
 * accumulator above the wait; Q and dO are always read through descriptors
 * (fragments kept in registers across loop iterations and fed to wgmma were
 * once seen reassigned by ptxas after their last use inside the loop body).
 *
 * Built for sm_90a only: in other targets (the compute_90 PTX the build also
 * embeds) the kernel bodies trap, and attention.cu never launches them
 * there. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention.cuh"
#include "kernels/wgmma_common.cuh"

#ifndef WG_NO_WGMMA
/* O-shaped accumulator (N = D) += a * MN-major B. */
template <int D>
__device__ __forceinline__ void wg_rs_nd(float (&d)[D / 8][4], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (D == 128) wg_rs_n128<1>(d, a, db);
    else wg_rs_n64<1>(d, a, db);
}

#endif /* !WG_NO_WGMMA */

/* ---- forward ----------------------------------------------------------------------- */

/* The forward is warp-specialized (the FlashAttention-3 scheme). A block owns
 * FW_BM = 128 query rows of one head and runs three warpgroups:
 *   - a producer, whose one thread streams the Q tile and then the K and V
 *     tiles (FW_BN = 128 keys each, FW_STAGES deep) into shared memory with
 *     TMA, each completion counted on a "full" mbarrier;
 *   - two consumers of 64 query rows each, which multiply and hand every
 *     stage back through an "empty" mbarrier.
 * Loads thus never stall the multiplies, and each K / V tile in shared
 * memory feeds 128 rows instead of 64. Two overlaps keep the tensor cores
 * busy through the softmax: inside a consumer, the product S = Q K^T of the
 * next tile is issued before the softmax of the current one, which then
 * runs while P V of the previous tile is still being added (the softmax
 * leaves the output rescale until that product is done); across the two
 * consumers, named barriers hand a token back and forth so that each issues
 * its products while the other does its softmax (ping-pong). The walk over
 * key tiles (diagonal first), the masking and the softmax are those of the
 * other kernels.
 *
 * TMA writes the 128-byte swizzle of the descriptors itself: a box of
 * [rows, 64] elements lands as one 64-column block of the layout above. It
 * reads whole boxes of the packed [T, heads * D] tensors, so the last tile
 * of a sequence also brings rows of the next one (finite activations of
 * this batch) or zeros past T. Keys there lie after every query of the
 * sequence and are masked; the V rows there would meet P = 0, but 0 * NaN
 * is NaN and a caller's padding rows may hold anything, so the consumers
 * zero them in shared memory before their P V. */

#define FW_BM 128     /* query rows per block (two consumer warpgroups) */
#define FW_BN 128     /* keys per K / V tile */
#define FW_STAGES 2   /* K / V tiles in flight */
#define FW_THREADS 384
#define FW_BAR_PING 1 /* named barriers 1, 2: the consumers' token; 3, 4: a consumer alone */

#ifndef WG_NO_WGMMA

/* Zeroes rows from .. to - 1 of a swizzled [ROWS, D] tile, by the 128
 * threads of one warpgroup, visible to the async proxy after the caller's
 * barrier. */
template <int ROWS, int D>
__device__ __forceinline__ void tile_zero_rows(uint32_t tile, int from, int to, int ctid) {
    for (int i = ctid; i < (to - from) * (D / 8); i += 128) {
        const int r = from + i / (D / 8), c = i % (D / 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + sw_off<ROWS>(r, c)), "r"(0) : "memory");
    }
    fence_async_smem();
}

/* Zeroes rows `from` .. ROWS - 1 of a swizzled [ROWS, D] tile that TMA
 * filled past a sequence's end (see above), by the 128 threads of
 * consumer warpgroup wg, and makes the zeros visible to its tensor cores. */
template <int ROWS, int D>
__device__ __forceinline__ void tile_zero_tail(uint32_t tile, int from, int ctid, int wg) {
    tile_zero_rows<ROWS, D>(tile, from, ROWS, ctid);
    named_sync(FW_BAR_PING + 2 + wg, 128);
}

#endif /* !WG_NO_WGMMA */

template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    attn_fwd_ws(bf16 *__restrict__ out, float *__restrict__ lse, const __grid_constant__ CUtensorMap map_q,
                const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                const int32_t *__restrict__ cu, int n_seqs, int T, int Hq, int Hkv, float scale_log2, int n_idx) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    constexpr int BM = FW_BM, BN = FW_BN, ST = FW_STAGES, NT = BN / 8, DT = D / 8;
    constexpr int QTILE = BM * D * 2, KTILE = BN * D * 2;
    /* Q, K stages, V stages, then the mbarriers: full Q, full K[ST],
     * full V[ST], empty K[ST], empty V[ST], empty Q. */
    const uint32_t sQ = smem_base(), sK = sQ + QTILE, sV = sK + ST * KTILE, bars = sV + ST * KTILE;
    const uint32_t bar_q = bars, bar_fk = bars + 8, bar_fv = bar_fk + 8 * ST, bar_ek = bar_fv + 8 * ST,
                   bar_ev = bar_ek + 8 * ST, bar_eq = bar_ev + 8 * ST;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    if (tid == 0) {
        mbar_init(bar_q, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(bar_fk + 8 * s, 1);
            mbar_init(bar_fv + 8 * s, 1);
            mbar_init(bar_ek + 8 * s, 8); /* one arrival per consumer warp */
            mbar_init(bar_ev + 8 * s, 8);
        }
        mbar_init(bar_eq, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    /* A block runs the tiles idx = blockIdx.x, + gridDim.x, ... below n_idx:
     * one when the grid has a block per tile, several when it is persistent
     * (ops_tuning.attn_fwd = 2), where the producer loads the next tile's Q
     * and first K / V stages while the consumers finish the last one. The
     * stage ring and its phases run on across tiles (`base` counts the key
     * tiles streamed before), and Q has its own full / empty pair. */
    if (warp < 4) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (warp != 0) return;
        /* Warp 0 finds each tile (find_tile takes the whole warp), lane 0 loads. */
        int base = 0, n = 0;
        for (int idx = blockIdx.x; idx < n_idx; idx += gridDim.x, n++) {
            attn_qtile tq;
            if (!attn_qtile_at<BM, BN>(tq, idx, cu, n_seqs, Hq, Hkv)) break;
            if (lane == 0) {
                if (n > 0) mbar_wait(bar_eq, (n - 1) & 1);
                mbar_expect(bar_q, QTILE);
                tma_tile<BM, D>(sQ, &map_q, tq.h * D, tq.off + tq.q0, bar_q);
                for (int it = 0; it < tq.nkv; it++) {
                    const int ig = base + it, s = ig % ST, use = ig / ST, row = tq.off + (tq.nkv - 1 - it) * BN;
                    stage_wait_empty(bar_ek + 8 * s, use);
                    mbar_expect(bar_fk + 8 * s, KTILE);
                    tma_tile<BN, D>(sK + s * KTILE, &map_k, tq.kvh * D, row, bar_fk + 8 * s);
                    stage_wait_empty(bar_ev + 8 * s, use);
                    mbar_expect(bar_fv + 8 * s, KTILE);
                    tma_tile<BN, D>(sV + s * KTILE, &map_v, tq.kvh * D, row, bar_fv + 8 * s);
                }
            }
            __syncwarp();
            base += tq.nkv;
        }
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = warp - 4, wg = cw >> 2, ctid = tid - 128 - wg * 128;
    const int wrow = wg * 64 + (cw & 3) * 16, g = lane >> 2, t4 = lane & 3;
    const uint32_t qa = sQ + wg * 64 * 128; /* this warpgroup's 64 rows in each 64-column block */
    const int my_bar = FW_BAR_PING + wg, other_bar = FW_BAR_PING + (wg ^ 1);

    int base = 0, n = 0;
    for (int idx = blockIdx.x; idx < n_idx; idx += gridDim.x, n++) {
        attn_qtile tq;
        if (!attn_qtile_at<BM, BN>(tq, idx, cu, n_seqs, Hq, Hkv)) break;
        const int h = tq.h, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;

        float o[DT][4], s[NT][4], corr[2];
        uint32_t pa[BN / 16][4];
        zero(o);
        zero(s);
        float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f};

        /* Issues S = Q K^T for key tile `it` (stage (base + it) % ST). */
        auto issue_s = [&](int it) {
            const int ig = base + it;
            const uint32_t cK = sK + (ig % ST) * KTILE;
            mbar_wait(bar_fk + 8 * (ig % ST), (ig / ST) & 1);
            reg_fence(s);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) wg_ss_n128(s, desc_k<BM>(qa, kk), desc_k<BN>(cK, kk), kk > 0);
            wg_commit();
        };
        /* Issues O += P V for key tile `it`, after zeroing its V rows past the
         * sequence's end. */
        auto issue_pv = [&](int it) {
            const int ig = base + it, sv = ig % ST, k0 = (nkv - 1 - it) * BN;
            const uint32_t cV = sV + sv * KTILE;
            mbar_wait(bar_fv + 8 * sv, (ig / ST) & 1);
            if (k0 + BN > L) tile_zero_tail<BN, D>(cV, L - k0, ctid, wg);
            reg_fence(o);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) wg_rs_nd<D>(o, pa[kk], desc_mn<BN>(cV, kk));
            wg_commit();
        };
        auto softmax = [&](int it) {
            const int k0 = (nkv - 1 - it) * BN;
            if (k0 + BN - 1 > q0 + wrow) strip_causal_mask(s, q0 + wrow, k0, g, t4);
            strip_softmax_p(s, m_i, l_i, corr, scale_log2);
        };
        auto pack_p = [&] {
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
        };

        mbar_wait(bar_q, n & 1);
        if (wg == 1) named_arrive(other_bar, 256); /* consumer 0 issues first */

        /* The first key tile: S alone. */
        named_sync(my_bar, 256);
        issue_s(0);
        named_arrive(other_bar, 256);
        wg_wait<0>();
        reg_fence(s);
        stage_release(bar_ek + 8 * (base % ST));
        softmax(0);
        pack_p();

        /* Then S of tile it with P V of tile it - 1. */
        for (int it = 1; it < nkv; it++) {
            named_sync(my_bar, 256);
            issue_s(it);
            issue_pv(it - 1);
            named_arrive(other_bar, 256);
            wg_wait<1>();
            reg_fence(s);
            stage_release(bar_ek + 8 * ((base + it) % ST));
            softmax(it);
            wg_wait<0>();
            reg_fence(o);
            stage_release(bar_ev + 8 * ((base + it - 1) % ST));
            strip_rescale(o, corr);
            pack_p();
        }
        /* Every S product of the tile is done: Q may be reloaded. */
        stage_release(bar_eq);

        /* The last P V. Consumer 1's hand-back would have no taker. */
        named_sync(my_bar, 256);
        issue_pv(nkv - 1);
        if (wg == 0) named_arrive(other_bar, 256);
        wg_wait<0>();
        reg_fence(o);
        stage_release(bar_ev + 8 * ((base + nkv - 1) % ST));

        strip_store_out(out, lse, o, m_i, l_i, q0 + wrow, off, L, (size_t)Hq * D, h, T, g, t4, scale_log2);
        base += nkv;
    }
#endif
}

/* ---- backward ------------------------------------------------------------------------------
 * Both passes are warp-specialized like the forward: a producer warpgroup
 * streams tiles with TMA through full / empty mbarriers and two consumer
 * warpgroups share each tile. Unlike the forward, the consumers run free,
 * without the ping-pong token: with it, forward+backward at the benchmark
 * shape took 4.69 ms, without 4.45 ms (the backward's elementwise part is
 * short next to its four / three products, so the token mostly made one
 * warpgroup wait). */

#define BW_STAGES 2  /* streamed tiles in flight */
#define BW_STEP 64   /* query rows per step of the dK / dV pass, keys per tile of the dQ pass */
#define BW_OWN 128   /* rows a block owns: keys (dK / dV pass), queries (dQ pass) */


#ifndef WG_NO_WGMMA
/* The key-block kernels' producer, one step: the (Q, dO) tiles of query
 * head hq from row m0 by TMA (thread 0) and their lse / Dvec rows by
 * cp.async (warps 1 and 2, one value a lane) into stage s of the rows at
 * sLD, all counted on the stage's full barrier. */
template <int BM, int D>
__device__ __forceinline__ void bw_load_step(uint32_t cQ, uint32_t cdO, uint32_t sLD, int s, uint32_t full,
                                             const CUtensorMap *map_q, const CUtensorMap *map_do, const float *lse,
                                             const float *dvec, int hq, int m0, int off, int L, int T, int tid,
                                             int warp) {
    if (tid == 0) {
        mbar_expect(full, 2 * BM * D * 2);
        tma_tile<BM, D>(cQ, map_q, hq * D, off + m0, full);
        tma_tile<BM, D>(cdO, map_do, hq * D, off + m0, full);
    }
    if (warp == 1 || warp == 2) {
        const int r = tid - 32, row = m0 + r;
        const bool ok = row < L;
        const size_t at = (size_t)hq * T + off + (ok ? row : 0);
        const uint32_t dst = sLD + (s * 2 * BM + r) * 4;
        cp_async4(dst, lse + at, ok);
        cp_async4(dst + BM * 4, dvec + at, ok);
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(full) : "memory");
    }
}

/* The key-block kernels' producer loop: stage i % ST of each step i gets
 * the tiles of (query head, first row) = step_at(i) once the consumers have
 * handed that stage back. */
template <int BM, int D, int ST, class StepAt>
__device__ __forceinline__ void bw_produce(int steps, StepAt step_at, uint32_t sQ, uint32_t sdO, uint32_t sLD,
                                           uint32_t bar_f, uint32_t bar_e, const CUtensorMap *map_q,
                                           const CUtensorMap *map_do, const float *lse, const float *dvec, int off,
                                           int L, int T, int tid, int warp) {
    constexpr int QTILE = BM * D * 2;
    for (int i = 0; i < steps; i++) {
        const int s = i % ST;
        const int2 at = step_at(i);
        stage_wait_empty(bar_e + 8 * s, i / ST);
        bw_load_step<BM, D>(sQ + s * QTILE, sdO + s * QTILE, sLD, s, bar_f + 8 * s, map_q, map_do, lse, dvec, at.x,
                            at.y, off, L, T, tid, warp);
    }
}

/* S^T = K Q^T and dP^T = V dO^T of a warpgroup's 64 keys (ka, va) and the
 * step's BM queries, all operands K-major from shared memory; waited for. */
template <int BM, int BN, int D>
__device__ __forceinline__ void bw_sdp(float (&s)[BM / 8][4], float (&dp)[BM / 8][4], uint32_t ka, uint32_t va,
                                       uint32_t cQ, uint32_t cdO) {
    reg_fence(s);
    reg_fence(dp);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(s, desc_k<BN>(ka, kk), desc_k<BM>(cQ, kk), kk > 0);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(dp, desc_k<BN>(va, kk), desc_k<BM>(cdO, kk), kk > 0);
    wg_commit();
    wg_wait<0>();
    reg_fence(s);
    reg_fence(dp);
}

/* Thread 0 of a dK / dV block: the K / V barrier and each stage's full and
 * empty barriers (the caller adds its own, then the init fence). */
template <int ST>
__device__ __forceinline__ void bw_bars_init(uint32_t bar_kv, uint32_t bar_f, uint32_t bar_e) {
    mbar_init(bar_kv, 1);
    for (int s = 0; s < ST; s++) {
        mbar_init(bar_f + 8 * s, 1 + 64); /* the TMA thread, 64 lse / Dvec lanes */
        mbar_init(bar_e + 8 * s, 8);
    }
}

/* One thread: ROWS rows of two tensors (K and V, or Q and dO) from column
 * col, row row, into the tiles ta and tb, both onto the barrier bar. */
template <int ROWS, int D>
__device__ __forceinline__ void tma_tile_pair(uint32_t ta, uint32_t tb, const CUtensorMap *map_a,
                                              const CUtensorMap *map_b, int col, int row, uint32_t bar) {
    mbar_expect(bar, 2 * (uint32_t)ROWS * D * 2);
    tma_tile<ROWS, D>(ta, map_a, col, row, bar);
    tma_tile<ROWS, D>(tb, map_b, col, row, bar);
}

/* The head of a dK / dV step, shared by both backwards: waits for the
 * stage's (Q, dO) tile (full barrier bar at this parity), zeroes its rows
 * past the sequence's end L, takes S^T and dP^T for this warpgroup's keys,
 * then turns them into P^T (in s) and dS^T = P^T (dP^T - Dvec) (in dp),
 * masked where the tile meets these keys' diagonal or the sequence's end. */
template <int BM, int BN, int D>
__device__ __forceinline__ void bw_step_grads(float (&s)[BM / 8][4], float (&dp)[BM / 8][4], uint32_t ka, uint32_t va,
                                              uint32_t cQ, uint32_t cdO, const float *cL, const float *cD, uint32_t bar,
                                              uint32_t parity, int m0, int n0, int krow, int L, int g, int t4,
                                              int ctid, int wg, float scale_log2) {
    mbar_wait(bar, parity);
    if (m0 + BM > L) {
        tile_zero_tail<BM, D>(cQ, L - m0, ctid, wg);
        tile_zero_tail<BM, D>(cdO, L - m0, ctid, wg);
    }
    bw_sdp<BM, BN, D>(s, dp, ka, va, cQ, cdO);
    const bool edge = (m0 < n0 + BN) || (m0 + BM > L);
    strip_dkdv_p(s, cL, edge, n0 + krow, m0, L, g, t4, scale_log2);
    strip_dkdv_ds(s, dp, cD, t4);
}

/* Issues dV += P^T dO and dK += dS^T Q (dO and Q MN-major) from P^T in s
 * and dS^T in dp, packed into pa and da, which must live until the caller
 * has waited for the products. */
template <int BM, int D>
__device__ __forceinline__ void bw_issue_dvdk(float (&dV)[D / 8][4], float (&dK)[D / 8][4], const float (&s)[BM / 8][4],
                                              const float (&dp)[BM / 8][4], uint32_t (&pa)[BM / 16][4],
                                              uint32_t (&da)[BM / 16][4], uint32_t cQ, uint32_t cdO) {
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        acc_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
        acc_to_a(da[kk], dp[2 * kk], dp[2 * kk + 1]);
    }
    reg_fence(dV);
    reg_fence(dK);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) wg_rs_nd<D>(dV, pa[kk], desc_mn<BM>(cdO, kk));
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) wg_rs_nd<D>(dK, da[kk], desc_mn<BM>(cQ, kk));
    wg_commit();
}
#endif /* !WG_NO_WGMMA */

/* dK, dV: a block owns BW_OWN keys of one kv head (consumer warpgroup c:
 * keys 64c..64c+63, warp w of it 16 more) and walks the group's query heads,
 * each over its query tiles of BW_STEP rows from the first one that sees
 * these keys on, as attn_bwd_dkdv does. The producer streams (Q, dO) tiles
 * by TMA and their lse / Dvec rows by cp.async (two warps, one value a lane,
 * arriving on the same mbarrier). */
template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    attn_bwd_dkdv_ws(bf16 *__restrict__ dk, bf16 *__restrict__ dv, const __grid_constant__ CUtensorMap map_q,
                     const __grid_constant__ CUtensorMap map_do, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const float *__restrict__ lse,
                     const float *__restrict__ dvec, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq,
                     int Hkv, float scale, float scale_log2) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    constexpr int BM = BW_STEP, BN = BW_OWN, ST = BW_STAGES, NT = BM / 8;
    constexpr int KTILE = BN * D * 2, QTILE = BM * D * 2;
    /* K, V, stages of Q, stages of dO, stages of lse and Dvec rows, mbarriers
     * (K and V; full[ST]; empty[ST]). */
    const uint32_t sK = smem_base(), sV = sK + KTILE, sQ = sV + KTILE, sdO = sQ + ST * QTILE;
    const uint32_t sLD = sdO + ST * QTILE, bars = sLD + ST * 2 * BM * 4;
    const uint32_t bar_kv = bars, bar_f = bars + 8, bar_e = bar_f + 8 * ST;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const float *sL = (const float *)(smem_raw + (sLD - smem_addr(smem_raw)));

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_ktile tk;
    if (!attn_ktile_find<BM, BN>(tk, cu, n_seqs, Hq, Hkv)) return;
    const int kvh = tk.kvh, off = tk.off, L = tk.L, n0 = tk.n0, group = Hq / Hkv;
    const int m_first = tk.m_first, per_head = tk.per_head, steps = tk.steps;

    if (tid == 0) {
        bw_bars_init<ST>(bar_kv, bar_f, bar_e);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (tid == 0) tma_tile_pair<BN, D>(sK, sV, &map_k, &map_v, kvh * D, off + n0, bar_kv);
        if (warp == 0 && lane != 0) return;
        if (warp == 3) return;
        /* The group's heads in order, each over its query tiles from the diagonal. */
        auto step_at = [&](int i) { return make_int2(kvh * group + i / per_head, (m_first + i % per_head) * BM); };
        bw_produce<BM, D, ST>(steps, step_at, sQ, sdO, sLD, bar_f, bar_e, &map_q, &map_do, lse, dvec, off, L, T, tid,
                              warp);
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int cw = warp - 4, wg = cw >> 2, ctid = tid - 128 - wg * 128;
    const int krow = wg * 64 + (cw & 3) * 16, g = lane >> 2, t4 = lane & 3;
    const uint32_t ka = sK + wg * 64 * 128, va = sV + wg * 64 * 128; /* this warpgroup's 64 keys */

    float dK[D / 8][4], dV[D / 8][4], s[NT][4], dp[NT][4];
    zero(dK);
    zero(dV);
    zero(s);
    zero(dp);

    mbar_wait(bar_kv, 0);

    for (int i = 0; i < steps; i++) {
        const int st = i % ST, m0 = (m_first + i % per_head) * BM;
        const uint32_t cQ = sQ + st * QTILE, cdO = sdO + st * QTILE;
        const float *cL = sL + st * 2 * BM, *cD = cL + BM;
        bw_step_grads<BM, BN, D>(s, dp, ka, va, cQ, cdO, cL, cD, bar_f + 8 * st, (i / ST) & 1, m0, n0, krow, L, g, t4,
                                 ctid, wg, scale_log2);

        uint32_t pa[BM / 16][4], da[BM / 16][4];
        bw_issue_dvdk<BM, D>(dV, dK, s, dp, pa, da, cQ, cdO);
        wg_wait<0>();
        reg_fence(dV);
        reg_fence(dK);
        stage_release(bar_e + 8 * st);
    }

    strip_store_dkdv(dk, dv, dK, dV, n0 + krow, off, L, (size_t)Hkv * D, kvh, g, t4, scale);
#endif
}

/* dQ: a block owns BW_OWN query rows of one head (consumer warpgroup c:
 * rows 64c..64c+63) and walks the key tiles of BW_STEP keys from the
 * diagonal back, as attn_bwd_dq does; the producer streams K and V. */
template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    attn_bwd_dq_ws(bf16 *__restrict__ dq, const __grid_constant__ CUtensorMap map_q,
                   const __grid_constant__ CUtensorMap map_do, const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_v, const float *__restrict__ lse,
                   const float *__restrict__ dvec, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq, int Hkv,
                   float scale, float scale_log2) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    constexpr int BM = BW_OWN, BN = BW_STEP, ST = BW_STAGES, NT = BN / 8;
    constexpr int QTILE = BM * D * 2, KTILE = BN * D * 2;
    /* Q, dO, stages of K, stages of V, mbarriers (Q and dO; full[ST]; empty[ST]). */
    const uint32_t sQ = smem_base(), sdO = sQ + QTILE, sK = sdO + QTILE, sV = sK + ST * KTILE;
    const uint32_t bars = sV + ST * KTILE, bar_q = bars, bar_f = bars + 8, bar_e = bar_f + 8 * ST;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_qtile tq;
    if (!attn_qtile_find<BM, BN>(tq, cu, n_seqs, Hq, Hkv)) return;
    const int h = tq.h, kvh = tq.kvh, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;

    if (tid == 0) {
        mbar_init(bar_q, 1);
        for (int s = 0; s < ST; s++) {
            mbar_init(bar_f + 8 * s, 1);
            mbar_init(bar_e + 8 * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            tma_tile_pair<BM, D>(sQ, sdO, &map_q, &map_do, h * D, off + q0, bar_q);
            for (int it = 0; it < nkv; it++) {
                const int s = it % ST, use = it / ST, row = off + (nkv - 1 - it) * BN;
                stage_wait_empty(bar_e + 8 * s, use);
                tma_tile_pair<BN, D>(sK + s * KTILE, sV + s * KTILE, &map_k, &map_v, kvh * D, row, bar_f + 8 * s);
            }
        }
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = warp - 4, wg = cw >> 2, ctid = tid - 128 - wg * 128;
    const int wrow = wg * 64 + (cw & 3) * 16, g = lane >> 2, t4 = lane & 3;
    const uint32_t qa = sQ + wg * 64 * 128, doa = sdO + wg * 64 * 128;

    float lrow[2], drow[2];
    strip_load_rowstats(lrow, drow, lse, dvec, q0 + wrow, off, L, h, T, g);
    float dQ[D / 8][4], s[NT][4], dp[NT][4];
    zero(dQ);
    zero(s);
    zero(dp);

    mbar_wait(bar_q, 0);

    for (int it = 0; it < nkv; it++) {
        const int st = it % ST, k0 = (nkv - 1 - it) * BN;
        const uint32_t cK = sK + st * KTILE, cV = sV + st * KTILE;
        mbar_wait(bar_f + 8 * st, (it / ST) & 1);
        if (k0 + BN > L) {
            tile_zero_tail<BN, D>(cK, L - k0, ctid, wg);
            tile_zero_tail<BN, D>(cV, L - k0, ctid, wg);
        }

        /* S = Q K^T and dP = dO V^T, all K-major from shared memory. */
        reg_fence(s);
        reg_fence(dp);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(s, desc_k<BM>(qa, kk), desc_k<BN>(cK, kk), kk > 0);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(dp, desc_k<BM>(doa, kk), desc_k<BN>(cV, kk), kk > 0);
        wg_commit();
        wg_wait<0>();
        reg_fence(s);
        reg_fence(dp);

        strip_dq_ds(s, dp, lrow, drow, k0 + BN - 1 > q0 + wrow, q0 + wrow, k0, g, t4, scale_log2);

        /* dQ += dS K, K MN-major. */
        uint32_t da[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) acc_to_a(da[kk], dp[2 * kk], dp[2 * kk + 1]);
        reg_fence(dQ);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wg_rs_nd<D>(dQ, da[kk], desc_mn<BN>(cK, kk));
        wg_commit();
        wg_wait<0>();
        reg_fence(dQ);
        stage_release(bar_e + 8 * st);
    }

    strip_store_dq(dq, dQ, q0 + wrow, off, L, (size_t)Hq * D, h, g, t4, scale);
#endif
}

/* ---- one-pass backward (ops_tuning.attn_bwd = 2) -------------------------------------------
 * The dK / dV kernel above, which also adds each step's share of dQ: five
 * products a step where the two passes make seven (the dQ pass recomputes
 * S and dP). After dS^T of its 128 keys for the step's 64 queries, each
 * consumer warpgroup stores its 64 key rows of it as bf16 [keys, queries]
 * in shared memory; once both have (a named barrier), that tile is the
 * MN-major A operand of share = dS K, of which each warpgroup multiplies
 * its half of the head dim (64 columns; B = its 64-column block of the K
 * tile, MN-major). The share goes to shared memory in the accumulator's own
 * register order (float4 j of thread t of warpgroup c at (8c + j) * 128 + t,
 * conflict-free) and from there, in one bulk copy by a writer thread of the
 * producer warpgroup, into an fp32 accumulator in ctx->scratch laid out the
 * same way per (query head, 64-row tile entry). attn_bwd_dq_unpack then
 * scales it into dq.
 *
 * Determinism: a query tile's shares are added in the order of their key
 * tiles, 0 first, whatever the timing. A flag per (query head, tile entry)
 * counts the shares in; the writer of key tile n waits until it reads n,
 * adds its share (key tile 0 stores, so the accumulator needs no clearing),
 * waits for the copy's writes and raises the flag. The blocks of a
 * sequence's lower key tiles have lower block indices and so were started
 * first: none waits on a block that cannot start. Every block walks its
 * query tiles from the sequence's last one down, the group's query heads
 * inside each tile, so the blocks of one sequence and kv head that run at
 * once meet each (head, tile) at the same step, the lower key tile just
 * ahead; walking up from the diagonal instead would start key tile n two
 * tiles behind n - 1 and make each wait on the last.
 *
 * Keys past the sequence's end meet only masked scores, but the K and V
 * rows TMA brought there may hold anything (0 * NaN is NaN, and dQ sums
 * over those key rows), so the consumers zero them once at the start.
 *
 * Head dim 128 only: the halves of the head dim are the two warpgroups'. */
#define B1_BAR_DS 5 /* named barrier: both consumer warpgroups have stored dS^T */

template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    attn_bwd_fused_ws(bf16 *__restrict__ dk, bf16 *__restrict__ dv, float *__restrict__ dq_acc,
                      int *__restrict__ dq_flag, int n_entries, const __grid_constant__ CUtensorMap map_q,
                      const __grid_constant__ CUtensorMap map_do, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, const float *__restrict__ lse,
                      const float *__restrict__ dvec, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq,
                      int Hkv, float scale, float scale_log2) {
#ifdef WG_NO_WGMMA
    __trap();
#else
    static_assert(D == 128, "each consumer warpgroup owns one 64-column half of the head dim");
    constexpr int BM = BW_STEP, BN = BW_OWN, ST = BW_STAGES, NT = BM / 8;
    constexpr int KTILE = BN * D * 2, QTILE = BM * D * 2, DSTILE = BN * BM * 2, DQTILE = BM * D * 4;
    /* K, V, stages of Q, stages of dO, two dS^T tiles, the dQ share, stages
     * of lse and Dvec rows, mbarriers (K and V; full[ST]; empty[ST]; share
     * full; share empty). */
    const uint32_t sK = smem_base(), sV = sK + KTILE, sQ = sV + KTILE, sdO = sQ + ST * QTILE;
    const uint32_t sDS = sdO + ST * QTILE, sDQ = sDS + 2 * DSTILE, sLD = sDQ + DQTILE, bars = sLD + ST * 2 * BM * 4;
    const uint32_t bar_kv = bars, bar_f = bars + 8, bar_e = bar_f + 8 * ST, bar_qf = bar_e + 8 * ST,
                   bar_qe = bar_qf + 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const float *sL = (const float *)(smem_raw + (sLD - smem_addr(smem_raw)));

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_ktile tk;
    if (!attn_ktile_find<BM, BN>(tk, cu, n_seqs, Hq, Hkv)) return;
    const int kvh = tk.kvh, off = tk.off, L = tk.L, n0 = tk.n0, group = Hq / Hkv, steps = tk.steps;
    const int last_tile = tk.m_first + tk.per_head - 1; /* the sequence's last query tile */
    /* Step i: (query head, first row); query tiles from the last down, the
     * group's heads inside each. */
    auto step_at = [&](int i) { return make_int2(kvh * group + i % group, (last_tile - i / group) * BM); };

    if (tid == 0) {
        bw_bars_init<ST>(bar_kv, bar_f, bar_e);
        mbar_init(bar_qf, 8); /* one arrival per consumer warp */
        mbar_init(bar_qe, 1); /* the writer */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp < 4) {
        /* ---- producer: TMA thread, lse / Dvec warps, dQ writer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) tma_tile_pair<BN, D>(sK, sV, &map_k, &map_v, kvh * D, off + n0, bar_kv);
        if (warp == 3) {
            const int first = tile_entry_first(cu, tk.seq, BM), kt = n0 / BN;
            if (lane != 0) return;
            for (int i = 0; i < steps; i++) {
                const int2 at = step_at(i);
                const size_t e = (size_t)at.x * n_entries + first + at.y / BM;
                float *dst = dq_acc + e * (BM * D);
                mbar_wait(bar_qf, i & 1);
                if (kt > 0) {
                    while (flag_load_acquire(dq_flag + e) != kt) __nanosleep(64);
                    fence_async_global();
                    bulk_reduce_add_f32(dst, sDQ, DQTILE);
                } else {
                    bulk_store(dst, sDQ, DQTILE);
                }
                bulk_commit();
                bulk_wait_read();
                mbar_arrive(bar_qe);
                bulk_wait();
                fence_async_global();
                flag_add_release(dq_flag + e, 1);
            }
            return;
        }
        if (warp == 0 && lane != 0) return;
        bw_produce<BM, D, ST>(steps, step_at, sQ, sdO, sLD, bar_f, bar_e, &map_q, &map_do, lse, dvec, off, L, T, tid,
                              warp);
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = warp - 4, wg = cw >> 2, ctid = tid - 128 - wg * 128;
    const int krow = wg * 64 + (cw & 3) * 16, g = lane >> 2, t4 = lane & 3;
    const uint32_t ka = sK + wg * 64 * 128, va = sV + wg * 64 * 128; /* this warpgroup's 64 keys */
    const uint32_t kh = sK + wg * BN * 128; /* this warpgroup's 64 columns of K, all its keys */

    float dK[D / 8][4], dV[D / 8][4], s[NT][4], dp[NT][4], dq[8][4];
    zero(dK);
    zero(dV);
    zero(s);
    zero(dp);
    zero(dq);

    mbar_wait(bar_kv, 0);
    if (n0 + BN > L) {
        const int from = max(L - n0, wg * 64), to = wg * 64 + 64;
        if (from < to) {
            tile_zero_rows<BN, D>(sK, from, to, ctid);
            tile_zero_rows<BN, D>(sV, from, to, ctid);
        }
        named_sync(FW_BAR_PING + 2 + wg, 128);
    }

    for (int i = 0; i < steps; i++) {
        const int st = i % ST, m0 = step_at(i).y;
        const uint32_t cQ = sQ + st * QTILE, cdO = sdO + st * QTILE, cS = sDS + (i & 1) * DSTILE;
        const float *cL = sL + st * 2 * BM, *cD = cL + BM;
        bw_step_grads<BM, BN, D>(s, dp, ka, va, cQ, cdO, cL, cD, bar_f + 8 * st, (i / ST) & 1, m0, n0, krow, L, g, t4,
                                 ctid, wg, scale_log2);

        /* dS^T into this step's [keys, queries] tile: row = key, the
         * 16-byte chunk j = queries 8j .. 8j + 7. */
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 2; r++)
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(cS + sw_off<BN>(krow + g + 8 * r, j) + t4 * 4),
                             "r"(pack_bf16(dp[j][2 * r], dp[j][2 * r + 1]))
                             : "memory");
        fence_async_smem();

        uint32_t pa[BM / 16][4], da[BM / 16][4];
        bw_issue_dvdk<BM, D>(dV, dK, s, dp, pa, da, cQ, cdO);

        /* share = dS K over all 128 keys, once both halves of dS^T are in:
         * A = the dS^T tile read MN-major, B = K read MN-major. */
        named_sync(B1_BAR_DS, 256);
        reg_fence(dq);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wg_ss_n64t<1, 1>(dq, desc_mn<BN>(cS, kk), desc_mn<BN>(kh, kk), kk > 0);
        wg_commit();
        wg_wait<0>();
        reg_fence(dV);
        reg_fence(dK);
        reg_fence(dq);
        stage_release(bar_e + 8 * st);

        /* The share to the writer, once it has copied out the last one. */
        stage_wait_empty(bar_qe, i);
#pragma unroll
        for (int j = 0; j < 8; j++)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(sDQ + ((wg * 8 + j) * 128 + ctid) * 16),
                         "f"(dq[j][0]), "f"(dq[j][1]), "f"(dq[j][2]), "f"(dq[j][3])
                         : "memory");
        fence_async_smem();
        stage_release(bar_qf);
    }

    strip_store_dkdv(dk, dv, dK, dV, n0 + krow, off, L, (size_t)Hkv * D, kvh, g, t4, scale);
#endif
}

/* dq = scale * the one-pass accumulator: a block per (64-row tile entry,
 * query head) reads the [64, D] tile in the consumers' register order,
 * puts it in row order in shared memory and writes the rows inside the
 * sequence as bf16, 16 bytes a thread. */
template <int D>
__global__ void __launch_bounds__(256) attn_bwd_dq_unpack(bf16 *__restrict__ dq, const float *__restrict__ dq_acc,
                                                          int n_entries, const int32_t *__restrict__ cu, int n_seqs,
                                                          int Hq, float scale) {
    constexpr int BM = BW_STEP, PITCH = D + 8; /* 8 floats of padding: the float2 stores below spread over banks */
    __shared__ __align__(16) float tile[BM * PITCH];
    const int2 loc = find_tile(cu, n_seqs, blockIdx.x, BM);
    if (loc.x < 0) return;
    const int off = cu[loc.x], L = cu[loc.x + 1] - off, m0 = loc.y * BM, h = blockIdx.y;
    const float4 *src = (const float4 *)(dq_acc + ((size_t)h * n_entries + blockIdx.x) * (BM * D));
    for (int f = threadIdx.x; f < BM * D / 4; f += 256) {
        const float4 v = src[f];
        const int t = f & 127, j = (f >> 7) & 7, half = f >> 10, l = t & 31;
        const int r = (t >> 5) * 16 + (l >> 2), col = half * 64 + j * 8 + (l & 3) * 2;
        *(float2 *)&tile[r * PITCH + col] = make_float2(v.x, v.y);
        *(float2 *)&tile[(r + 8) * PITCH + col] = make_float2(v.z, v.w);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < BM * D / 8; c += 256) {
        const int r = c / (D / 8), q8 = c % (D / 8);
        if (m0 + r >= L) continue;
        const float4 a = *(const float4 *)&tile[r * PITCH + q8 * 8], b = *(const float4 *)&tile[r * PITCH + q8 * 8 + 4];
        const uint4 o = make_uint4(pack_bf16(a.x * scale, a.y * scale), pack_bf16(a.z * scale, a.w * scale),
                                   pack_bf16(b.x * scale, b.y * scale), pack_bf16(b.z * scale, b.w * scale));
        *(uint4 *)(dq + (size_t)(off + m0 + r) * Hq * D + (size_t)h * D + q8 * 8) = o;
    }
}

/* ---- host side ------------------------------------------------------------------------ */

int attn_wgmma_ok(const ops_ctx *ctx) {
    return !ATTN_FORCE_MMA && cuda_is_sm90(ctx);
}

/* Upper bound of the tile entries over all sequences (see attention.cu). */
static unsigned wg_grid(int T, int n_seqs, int tile, int heads) {
    long long blocks = (((long long)T + tile - 1) / tile + n_seqs) * heads;
    if (blocks > 0x7fffffffLL)
        DK_ABORT("attention: %lld blocks exceed the grid limit (T=%d n_seqs=%d)", blocks, T, n_seqs);
    return (unsigned)blocks;
}


template <int D>
static void fwd_ws(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                   const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, float scale) {
    /* Q, FW_STAGES x (K, V), the mbarriers, alignment slack. */
    const size_t smem = (size_t)(FW_BM + 2 * FW_STAGES * FW_BN) * D * 2 + 8 * (2 + 4 * FW_STAGES) + 1024;
    wg_smem(attn_fwd_ws<D>, smem);
    const CUtensorMap mq = tmap_rows(q, Hq * D, T, FW_BM), mk = tmap_rows(k, Hkv * D, T, FW_BN),
                      mv = tmap_rows(v, Hkv * D, T, FW_BN);
    /* A block per tile, or with attn_fwd = 2 one per SM walking the tiles
     * (heaviest first, as numbered) in strides of the grid. */
    const unsigned n_idx = wg_grid(T, n_seqs, FW_BM, Hq), sms = (unsigned)cuda_sm_count(ctx);
    const unsigned grid = ctx->tuning.attn_fwd == 2 && n_idx > sms ? sms : n_idx;
    attn_fwd_ws<D><<<grid, FW_THREADS, smem, ctx_stream(ctx)>>>(out, lse, mq, mk, mv, cu, n_seqs, T, Hq, Hkv,
                                                                scale * LOG2E_F, (int)n_idx);
    CUDA_LAUNCH_CHECK();
}

/* Dynamic shared memory of the dK / dV pass: K and V, stages of (Q, dO,
 * lse, Dvec), mbarriers, alignment slack. */
static size_t bw_dkdv_smem(int D) {
    const int own = BW_OWN, step = BW_STEP, nst = BW_STAGES;
    return (size_t)(2 * own + 2 * nst * step) * D * 2 + (size_t)nst * 2 * step * 4 + 8 * (1 + 2 * nst) + 1024;
}

/* The one-pass backward at head dim 128 (see attn_bwd_fused_ws), its flags
 * and accumulator in ctx->scratch after dvec (ops_attention_backward_scratch
 * says where). */
static void bwd_fused(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                      const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                      int Hkv, float scale) {
    constexpr int D = 128, own = BW_OWN, step = BW_STEP;
    cudaStream_t st = ctx_stream(ctx);
    static_assert(BW_STEP == 64, "ops_attention_backward_tiles counts 64-row tiles");
    const int entries = ops_attention_backward_tiles(T, n_seqs);
    const size_t acc_bytes = (size_t)Hq * entries * step * D * sizeof(float);
    char *base = (char *)ctx->scratch;
    int *flags = (int *)(base + ops_attention_backward_scratch(T, n_seqs, Hq, D, 0));
    float *acc = (float *)(base + ops_attention_backward_scratch(T, n_seqs, Hq, D, 1) - acc_bytes);
    CUDA_CHECK(cudaMemsetAsync(flags, 0, (size_t)Hq * entries * sizeof(int), st));
    /* The dK / dV pass's, two dS^T tiles, the dQ share, its two mbarriers. */
    const size_t smem = bw_dkdv_smem(D) + (size_t)2 * own * step * 2 + (size_t)step * D * 4 + 8 * 2;
    wg_smem(attn_bwd_fused_ws<D>, smem);
    const CUtensorMap mq = tmap_rows(q, Hq * D, T, step), mdo = tmap_rows(dout, Hq * D, T, step),
                      mk = tmap_rows(k, Hkv * D, T, own), mv = tmap_rows(v, Hkv * D, T, own);
    attn_bwd_fused_ws<D><<<wg_grid(T, n_seqs, own, Hkv), FW_THREADS, smem, st>>>(
        dk, dv, acc, flags, entries, mq, mdo, mk, mv, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale, scale * LOG2E_F);
    CUDA_LAUNCH_CHECK();
    attn_bwd_dq_unpack<D><<<dim3((unsigned)entries, (unsigned)Hq), 256, 0, st>>>(dq, acc, entries, cu, n_seqs, Hq,
                                                                                 scale);
    CUDA_LAUNCH_CHECK();
}

template <int D>
static void bwd_ws(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                   int Hkv, float scale) {
    if constexpr (D == 128) {
        /* One pass unless the two are pinned, where its accumulator fits
         * the scratch behind dvec (cuda_attention_backward puts dvec first). */
        if (ctx->tuning.attn_bwd != 1 && dvec == (const float *)ctx->scratch && is_aligned16(dq) &&
            ops_attention_backward_scratch(T, n_seqs, Hq, D, 1) <= ctx->scratch_size) {
            bwd_fused(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale);
            return;
        }
    }
    cudaStream_t st = ctx_stream(ctx);
    const float sl2 = scale * LOG2E_F;
    const int own = BW_OWN, step = BW_STEP, nst = BW_STAGES;
    const size_t smem_kv = bw_dkdv_smem(D);
    wg_smem(attn_bwd_dkdv_ws<D>, smem_kv);
    {
        const CUtensorMap mq = tmap_rows(q, Hq * D, T, step), mdo = tmap_rows(dout, Hq * D, T, step),
                          mk = tmap_rows(k, Hkv * D, T, own), mv = tmap_rows(v, Hkv * D, T, own);
        attn_bwd_dkdv_ws<D><<<wg_grid(T, n_seqs, own, Hkv), FW_THREADS, smem_kv, st>>>(
            dk, dv, mq, mdo, mk, mv, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale, sl2);
        CUDA_LAUNCH_CHECK();
    }
    /* Q and dO, stages of (K, V), mbarriers, alignment slack. */
    const size_t smem_q = (size_t)(2 * own + 2 * nst * step) * D * 2 + 8 * (1 + 2 * nst) + 1024;
    wg_smem(attn_bwd_dq_ws<D>, smem_q);
    {
        const CUtensorMap mq = tmap_rows(q, Hq * D, T, own), mdo = tmap_rows(dout, Hq * D, T, own),
                          mk = tmap_rows(k, Hkv * D, T, step), mv = tmap_rows(v, Hkv * D, T, step);
        attn_bwd_dq_ws<D><<<wg_grid(T, n_seqs, own, Hq), FW_THREADS, smem_q, st>>>(
            dq, mq, mdo, mk, mv, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale, sl2);
        CUDA_LAUNCH_CHECK();
    }
}

int attn_fwd_wgmma(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                   const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    /* TMA reads from 16-byte aligned addresses only. */
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) return 0;
    if (D == 64) fwd_ws<64>(ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale);
    else fwd_ws<128>(ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale);
    return 1;
}

int attn_bwd_wgmma(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                   int Hkv, int D, float scale) {
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)dout) & 15) return 0;
    if (D == 64) bwd_ws<64>(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale);
    else bwd_ws<128>(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale);
    return 1;
}
