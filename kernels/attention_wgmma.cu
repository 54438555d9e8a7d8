/* attention_wgmma.cu: the flash attention kernels of attention.cu rewritten
 * for Hopper's warpgroup MMA (wgmma, sm_90a). Same algorithms, same tiles
 * (64 query rows x 64 keys), same order of every sum, same deterministic
 * backward in two passes; what changes is who feeds the tensor cores. With
 * mma.sync every warp pulls each K / V fragment out of shared memory itself
 * (ldmatrix) for its 16 rows, and those reads, not the multiplies, bound the
 * kernels (ncu on the H200, mma.sync dK/dV pass: L1 75% busy, SM 46%).
 * wgmma lets the four warps of a warpgroup issue one 64-row product whose
 * operands the tensor cores read straight from shared memory through matrix
 * descriptors, once for all 64 rows. Measured on the H200 at B=4 H=32 KV=8
 * S=4096 D=128: forward 1.90 -> 1.43 ms, forward+backward 8.6 -> 5.7 ms.
 * What still limits them: one warpgroup per block does its softmax while
 * its tensor cores idle (two blocks per SM overlap only partly), and the
 * loads are issued by the same warps; a producer warp with TMA and two
 * ping-ponging consumer warpgroups (FlashAttention-3) would close most of
 * the remaining gap.
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
 * Ordering. cp.async writes are made visible to the tensor cores' async
 * proxy by fence.proxy.async in every writing thread before the barrier.
 * wgmma runs asynchronously: registers it reads or writes are fenced
 * (wgmma.fence) before the batch and tied to the wait afterwards
 * (reg_fence), so the compiler cannot move a read of an accumulator above
 * the wait; fragments the tensor cores read from registers (Q, P, dS) are
 * computed in the same iteration and left untouched until the wait. (Q is
 * read through a descriptor too: fragments kept in registers across loop
 * iterations and fed to wgmma were seen reassigned by ptxas after their
 * last use inside the loop body, i.e. corrupted on the next iteration.)
 *
 * Built for sm_90a only: in other targets (the compute_90 PTX the build also
 * embeds) the kernel bodies trap, and attention.cu never launches them
 * there. */
#include <math.h>
#include <stdio.h>

#include "kernels/attention.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_NO_WGMMA 1 /* this device pass cannot emit wgmma */
#endif

#define WG_BM 64 /* query rows per tile (one warpgroup) */
#define WG_BN 64 /* keys per tile */

#ifndef ATTN_NO_WGMMA

/* The asm operands of the 64 columns (eight n8 tiles from n-tile j) of a
 * wgmma accumulator: per thread 4 floats per n8 tile, in the m16n8 order. */
#define WG_ACC_N8(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define WG_ACC_N64(d, j)                                                                                         \
    WG_ACC_N8(d, j), WG_ACC_N8(d, j + 1), WG_ACC_N8(d, j + 2), WG_ACC_N8(d, j + 3), WG_ACC_N8(d, j + 4),         \
        WG_ACC_N8(d, j + 5), WG_ACC_N8(d, j + 6), WG_ACC_N8(d, j + 7)

/* d (+)= a (registers) * B (descriptor), m64n64k16; TRANS_B = 1: B is MN-major. */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
        : WG_ACC_N64(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TRANS_B), "r"(1));
}

/* d (+)= a (registers) * B (descriptor), m64n128k16; TRANS_B = 1: B is MN-major. */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
        : WG_ACC_N64(d, 0), WG_ACC_N64(d, 8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TRANS_B), "r"(1));
}

/* d += A (descriptor, K-major) * B (descriptor, K-major), m64n64k16. */
__device__ __forceinline__ void wg_ss_n64(float (&d)[8][4], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC_N64(d, 0)
        : "l"(da), "l"(db), "r"(1));
}

/* Shared-memory matrix descriptor, 128-byte swizzle; lbo, sbo in bytes. */
__device__ __forceinline__ uint64_t gdesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/* k16 step kk of a K-major operand stored as a swizzled [ROWS, D] tile. */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_k(uint32_t tile, int kk) {
    return gdesc(tile + (kk >> 2) * (ROWS * 128) + (kk & 3) * 32, 16, 1024);
}

/* k16 step kk (rows 16kk..16kk+15) of an MN-major operand, same storage. */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mn(uint32_t tile, int kk) {
    return gdesc(tile + kk * 16 * 128, ROWS * 128, 1024);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(r[i][e])::"memory");
}

template <int N>
__device__ __forceinline__ void zero(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) r[i][0] = r[i][1] = r[i][2] = r[i][3] = 0.0f;
}

/* O-shaped accumulator (N = D) += a * MN-major B. */
template <int D>
__device__ __forceinline__ void wg_rs_nd(float (&d)[D / 8][4], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (D == 128) wg_rs_n128<1>(d, a, db);
    else wg_rs_n64<1>(d, a, db);
}

/* Byte offset of 16-byte chunk c of row r in a swizzled [ROWS, D] tile. */
template <int ROWS>
__device__ __forceinline__ uint32_t sw_off(int r, int c) {
    return (uint32_t)((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* load_tile of attention.cuh into the swizzled layout. */
template <int ROWS, int D>
__device__ __forceinline__ void load_tile_sw(uint32_t s, const bf16 *g, size_t ld, int row0, int end, int tid) {
    constexpr int CH = D / 8;
    static_assert((ROWS * CH) % ATTN_THREADS == 0, "tile must split evenly over the block");
#pragma unroll
    for (int it = 0; it < ROWS * CH / ATTN_THREADS; it++) {
        const int i = it * ATTN_THREADS + tid, r = i / CH, c = i % CH, row = row0 + r;
        const bool ok = row < end;
        cp_async16(s + sw_off<ROWS>(r, c), g + (size_t)(ok ? row : 0) * ld + c * 8, ok);
    }
}

/* The dynamic shared memory rounded up to the 1024-byte swizzle atom. */
__device__ __forceinline__ uint32_t smem_base() {
    extern __shared__ __align__(16) unsigned char smem[];
    return (smem_addr(smem) + 1023u) & ~1023u;
}

#endif /* !ATTN_NO_WGMMA */

#define WG_TILE(D) (64 * (D) * 2) /* bytes of one [64, D] bf16 tile */

/* ---- forward ----------------------------------------------------------------------- */

template <int D>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_fwd_wg(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ q,
                const bf16 *__restrict__ k, const bf16 *__restrict__ v, const int32_t *__restrict__ cu, int n_seqs,
                int T, int Hq, int Hkv, float scale_log2) {
#ifdef ATTN_NO_WGMMA
    __trap();
#else
    constexpr int BM = WG_BM, BN = WG_BN, TILE = WG_TILE(D), NT = BN / 8, DT = D / 8;
    const uint32_t sQ = smem_base(), sK = sQ + TILE, sV = sQ + 3 * TILE; /* K, V: two stages */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_qtile tq;
    if (!attn_qtile_find<BM, BN>(tq, cu, n_seqs, Hq, Hkv)) return;
    const int h = tq.h, kvh = tq.kvh, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;
    const bf16 *kb = k + (size_t)off * ldk + (size_t)kvh * D;
    const bf16 *vb = v + (size_t)off * ldk + (size_t)kvh * D;

    load_tile_sw<BM, D>(sQ, q + (size_t)off * ldq + (size_t)h * D, ldq, q0, L, tid);
    load_tile_sw<BN, D>(sK, kb, ldk, (nkv - 1) * BN, L, tid);
    load_tile_sw<BN, D>(sV, vb, ldk, (nkv - 1) * BN, L, tid);
    cp_async_commit();

    const int wrow = warp * 16, g = lane >> 2, t4 = lane & 3;
    float o[DT][4];
    zero(o);
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.0f, 0.0f};

    for (int it = 0; it < nkv; it++) {
        const int nb = nkv - 1 - it, stage = it & 1;
        cp_async_next(it + 1 < nkv, [&] {
            load_tile_sw<BN, D>(sK + (stage ^ 1) * TILE, kb, ldk, (nb - 1) * BN, L, tid);
            load_tile_sw<BN, D>(sV + (stage ^ 1) * TILE, vb, ldk, (nb - 1) * BN, L, tid);
        });
        fence_async_smem();
        __syncthreads();
        const uint32_t cK = sK + stage * TILE, cV = sV + stage * TILE;

        float s[NT][4];
        zero(s);
        reg_fence(s);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(s, desc_k<BM>(sQ, kk), desc_k<BN>(cK, kk));
        wg_commit();
        wg_wait0();
        reg_fence(s);

        const int k0 = nb * BN;
        if (k0 + BN - 1 > q0 + wrow) strip_causal_mask(s, q0 + wrow, k0, g, t4);
        strip_softmax(s, o, m_i, l_i, scale_log2);

        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
        reg_fence(o);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wg_rs_nd<D>(o, pa[kk], desc_mn<BN>(cV, kk));
        wg_commit();
        wg_wait0();
        reg_fence(o);
        __syncthreads(); /* this stage is refilled by the next iteration's prefetch */
    }

    strip_store_out(out, lse, o, m_i, l_i, q0 + wrow, off, L, ldq, h, T, g, t4, scale_log2);
#endif
}

/* ---- backward: dK, dV ------------------------------------------------------------------ */

/* A block owns 64 keys of one kv head (warp w: keys 16w..16w+15) and walks
 * the group's query heads in order, each over its query tiles from the
 * diagonal on, as attn_bwd_dkdv does. */
template <int D>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dkdv_wg(bf16 *__restrict__ dk, bf16 *__restrict__ dv, const bf16 *__restrict__ dout,
                     const bf16 *__restrict__ q, const bf16 *__restrict__ k, const bf16 *__restrict__ v,
                     const float *__restrict__ lse, const float *__restrict__ dvec, const int32_t *__restrict__ cu,
                     int n_seqs, int T, int Hq, int Hkv, float scale, float scale_log2) {
#ifdef ATTN_NO_WGMMA
    __trap();
#else
    constexpr int BM = WG_BM, BN = WG_BN, TILE = WG_TILE(D), NT = BM / 8;
    /* K, V, then two stages of (Q, dO), then two stages of (lse, Dvec) rows. */
    const uint32_t sK = smem_base(), sV = sK + TILE, sQ = sK + 2 * TILE, sdO = sK + 4 * TILE;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sL = (float *)(smem_raw + (sK + 6 * TILE - smem_addr(smem_raw)));
    float *sD = sL + 2 * BM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_ktile tk;
    if (!attn_ktile_find<BM, BN>(tk, cu, n_seqs, Hq, Hkv)) return;
    const int kvh = tk.kvh, off = tk.off, L = tk.L, n0 = tk.n0, group = Hq / Hkv;
    const int m_first = tk.m_first, per_head = tk.per_head, steps = tk.steps;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;

    load_tile_sw<BN, D>(sK, k + (size_t)off * ldk + (size_t)kvh * D, ldk, n0, L, tid);
    load_tile_sw<BN, D>(sV, v + (size_t)off * ldk + (size_t)kvh * D, ldk, n0, L, tid);
    auto load_step = [&](int i, int st) {
        const int hq = kvh * group + i / per_head, m0 = (m_first + i % per_head) * BM;
        const size_t hoff = (size_t)off * ldq + (size_t)hq * D;
        load_tile_sw<BM, D>(sQ + st * TILE, q + hoff, ldq, m0, L, tid);
        load_tile_sw<BM, D>(sdO + st * TILE, dout + hoff, ldq, m0, L, tid);
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

    const int g = lane >> 2, t4 = lane & 3, krow = warp * 16;
    float dK[D / 8][4], dV[D / 8][4];
    zero(dK);
    zero(dV);

    for (int i = 0; i < steps; i++) {
        const int st = i & 1;
        cp_async_next(i + 1 < steps, [&] { load_step(i + 1, st ^ 1); });
        fence_async_smem();
        __syncthreads();
        const uint32_t cQ = sQ + st * TILE, cdO = sdO + st * TILE;
        const float *cL = sL + st * BM, *cD = sD + st * BM;
        const int m0 = (m_first + i % per_head) * BM;

        /* S^T = K Q^T and dP^T = V dO^T, both operands K-major from shared memory. */
        float s[NT][4], dp[NT][4];
        zero(s);
        zero(dp);
        reg_fence(s);
        reg_fence(dp);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(s, desc_k<BN>(sK, kk), desc_k<BM>(cQ, kk));
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(dp, desc_k<BN>(sV, kk), desc_k<BM>(cdO, kk));
        wg_commit();
        wg_wait0();
        reg_fence(s);
        reg_fence(dp);

        /* P^T, then dS^T = P^T (dP^T - Dvec). */
        const bool edge = (m0 == m_first * BM) || (m0 + BM > L);
        strip_dkdv_p(s, cL, edge, n0 + krow, m0, L, g, t4, scale_log2);
        strip_dkdv_ds(s, dp, cD, t4);

        /* dV += P^T dO and dK += dS^T Q, dO and Q MN-major. */
        uint32_t pa[BM / 16][4], da[BM / 16][4];
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
        wg_wait0();
        reg_fence(dV);
        reg_fence(dK);
        __syncthreads();
    }

    strip_store_dkdv(dk, dv, dK, dV, n0 + krow, off, L, ldk, kvh, g, t4, scale);
#endif
}

/* ---- backward: dQ ------------------------------------------------------------------------ */

template <int D>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_bwd_dq_wg(bf16 *__restrict__ dq, const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
                   const bf16 *__restrict__ k, const bf16 *__restrict__ v, const float *__restrict__ lse,
                   const float *__restrict__ dvec, const int32_t *__restrict__ cu, int n_seqs, int T, int Hq, int Hkv,
                   float scale, float scale_log2) {
#ifdef ATTN_NO_WGMMA
    __trap();
#else
    constexpr int BM = WG_BM, BN = WG_BN, TILE = WG_TILE(D), NT = BN / 8;
    /* Q, dO, then two stages of K and of V. */
    const uint32_t sQ = smem_base(), sdO = sQ + TILE, sK = sQ + 2 * TILE, sV = sQ + 4 * TILE;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    attn_qtile tq;
    if (!attn_qtile_find<BM, BN>(tq, cu, n_seqs, Hq, Hkv)) return;
    const int h = tq.h, kvh = tq.kvh, off = tq.off, L = tq.L, q0 = tq.q0, nkv = tq.nkv;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D;
    const size_t hoff = (size_t)off * ldq + (size_t)h * D;
    const bf16 *kb = k + (size_t)off * ldk + (size_t)kvh * D;
    const bf16 *vb = v + (size_t)off * ldk + (size_t)kvh * D;

    load_tile_sw<BM, D>(sQ, q + hoff, ldq, q0, L, tid);
    load_tile_sw<BM, D>(sdO, dout + hoff, ldq, q0, L, tid);
    load_tile_sw<BN, D>(sK, kb, ldk, (nkv - 1) * BN, L, tid);
    load_tile_sw<BN, D>(sV, vb, ldk, (nkv - 1) * BN, L, tid);
    cp_async_commit();

    const int g = lane >> 2, t4 = lane & 3, wrow = warp * 16;
    float lrow[2], drow[2];
    strip_load_rowstats(lrow, drow, lse, dvec, q0 + wrow, off, L, h, T, g);
    float dQ[D / 8][4];
    zero(dQ);

    for (int it = 0; it < nkv; it++) {
        const int nb = nkv - 1 - it, stage = it & 1;
        cp_async_next(it + 1 < nkv, [&] {
            load_tile_sw<BN, D>(sK + (stage ^ 1) * TILE, kb, ldk, (nb - 1) * BN, L, tid);
            load_tile_sw<BN, D>(sV + (stage ^ 1) * TILE, vb, ldk, (nb - 1) * BN, L, tid);
        });
        fence_async_smem();
        __syncthreads();
        const uint32_t cK = sK + stage * TILE, cV = sV + stage * TILE;

        /* S = Q K^T and dP = dO V^T, all K-major from shared memory. */
        float s[NT][4], dp[NT][4];
        zero(s);
        zero(dp);
        reg_fence(s);
        reg_fence(dp);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(s, desc_k<BM>(sQ, kk), desc_k<BN>(cK, kk));
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) wg_ss_n64(dp, desc_k<BM>(sdO, kk), desc_k<BN>(cV, kk));
        wg_commit();
        wg_wait0();
        reg_fence(s);
        reg_fence(dp);

        const int k0 = nb * BN;
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
        wg_wait0();
        reg_fence(dQ);
        __syncthreads();
    }

    strip_store_dq(dq, dQ, q0 + wrow, off, L, ldq, h, g, t4, scale);
#endif
}

/* ---- host side ------------------------------------------------------------------------ */

int attn_wgmma_ok(const ops_ctx *ctx) {
    if (ATTN_FORCE_MMA) return 0;
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->gpu));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->gpu));
    return major == 9 && minor == 0;
}

/* Upper bound of the tile entries over all sequences (see attention.cu). */
static unsigned wg_grid(int T, int n_seqs, int tile, int heads) {
    long long blocks = (((long long)T + tile - 1) / tile + n_seqs) * heads;
    if (blocks > 0x7fffffffLL)
        DK_ABORT("attention: %lld blocks exceed the grid limit (T=%d n_seqs=%d)", blocks, T, n_seqs);
    return (unsigned)blocks;
}

template <typename K>
static void wg_smem(K kern, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int D>
static void fwd_wg(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                   const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, float scale) {
    const size_t smem = 5 * (size_t)WG_TILE(D) + 1024; /* Q, 2 x (K, V), alignment slack */
    wg_smem(attn_fwd_wg<D>, smem);
    attn_fwd_wg<D><<<wg_grid(T, n_seqs, WG_BM, Hq), ATTN_THREADS, smem, ctx_stream(ctx)>>>(
        out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale * LOG2E_F);
    CUDA_LAUNCH_CHECK();
}

template <int D>
static void bwd_wg(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                   const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                   int Hkv, float scale) {
    cudaStream_t st = ctx_stream(ctx);
    const float sl2 = scale * LOG2E_F;
    const size_t smem_kv = 6 * (size_t)WG_TILE(D) + 4 * WG_BM * sizeof(float) + 1024;
    wg_smem(attn_bwd_dkdv_wg<D>, smem_kv);
    attn_bwd_dkdv_wg<D><<<wg_grid(T, n_seqs, WG_BN, Hkv), ATTN_THREADS, smem_kv, st>>>(
        dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale, sl2);
    CUDA_LAUNCH_CHECK();
    const size_t smem_q = 6 * (size_t)WG_TILE(D) + 1024;
    wg_smem(attn_bwd_dq_wg<D>, smem_q);
    attn_bwd_dq_wg<D><<<wg_grid(T, n_seqs, WG_BM, Hq), ATTN_THREADS, smem_q, st>>>(
        dq, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale, sl2);
    CUDA_LAUNCH_CHECK();
}

void attn_fwd_wgmma(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                    const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    if (D == 64) fwd_wg<64>(ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale);
    else fwd_wg<128>(ctx, out, lse, q, k, v, cu, n_seqs, T, Hq, Hkv, scale);
}

void attn_bwd_wgmma(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                    const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                    int Hkv, int D, float scale) {
    if (D == 64) bwd_wg<64>(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale);
    else bwd_wg<128>(ctx, dq, dk, dv, dout, q, k, v, lse, dvec, cu, n_seqs, T, Hq, Hkv, scale);
}
