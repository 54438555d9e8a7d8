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

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

/* ---- small device helpers ------------------------------------------------------ */

/* 2^x on the special-function unit; flushes denormal results to zero, which
 * is harmless for probabilities and saves exp2f's rescaling. exp2(-inf) = 0. */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

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

/* ---- Hopper kernels (attention_wgmma.cu) ------------------------------------------ */

/* 1 when the ctx's GPU runs the wgmma kernels: compute capability 9.0 and
 * this build carries sm_90a code (the CMake build always does). */
int attn_wgmma_ok(const ops_ctx *ctx);
void attn_fwd_wgmma(ops_ctx *ctx, bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                    const int32_t *cu, int n_seqs, int T, int Hq, int Hkv, int D, float scale);
void attn_bwd_wgmma(ops_ctx *ctx, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                    const bf16 *v, const float *lse, const float *dvec, const int32_t *cu, int n_seqs, int T, int Hq,
                    int Hkv, int D, float scale);

#endif
