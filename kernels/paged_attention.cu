/* paged_attention.cu: ops_paged_attention on the CUDA backend: new query
 * tokens (decode: one per sequence; continuation prefill: several) against
 * the paged KV cache, flash-attention style on tensor cores.
 *
 * Work unit (one CTA of 4 warps): a sequence, a KV head g, a tile of up to 64
 * query rows and a range of the context (a split). The rows of a tile are
 * (query i, head j of g's group) pairs, so the query heads that share a KV
 * head read each cached page once (GQA). Keys stream through shared memory
 * 64 at a time with cp.async double buffering, following the block table;
 * positions past the tile's causal end are zero-filled, never read.
 *
 * Inside a CTA the 4 warps cover the tile's 16-row slices, and when a tile
 * has fewer slices than warps (decode: one slice holding the G rows of one
 * query) the spare warps take different keys of each 64-key stage instead;
 * their partial softmax states are merged through shared memory at the end.
 * Scores and P.V use mma.sync m16n8k16 (bf16 in, fp32 accumulate) with
 * ldmatrix from an XOR-swizzled tile; the softmax runs in fp32 with exp2.
 * P is rounded to bf16 for the P.V product, as in flash attention.
 *
 * Split-K ("flash decoding"): when the batch alone gives too few CTAs to keep
 * every SM streaming (a simple cost model of the launch picks the count),
 * the context is cut into equal chunks (multiples of 64 keys); each CTA writes a normalised fp32 partial output and its log-sum-exp
 * to ctx->scratch, and a second kernel merges the splits of each (token,
 * head) in split order: deterministic, no atomics.
 *
 * Which (sequence, tile) a CTA serves is found on the device (a warp scan of
 * the tiles per sequence from cu_q), because the per-sequence query counts
 * live in device memory; the host only sizes the grid from T, n_seqs and the
 * block-table width. Head dims other than 32, 64, 128 and 256 take a plain
 * fp32 kernel (one warp per query row, online softmax). */
#include <string.h>

#include "kernels/cuda_common.cuh"
#include "kernels/mma_common.cuh"
#include "kernels/paged_common.cuh"

#define PA_KT 64      /* keys per stage */
#define PA_ROWS 64    /* query rows per CTA tile */
#define PA_WARPS 4
#define PA_THREADS (PA_WARPS * 32)

/* ---- work discovery ----------------------------------------------------------- */

/* Tile z of the launch -> (sequence, tile within it); -1 when z is past the
 * last tile. Run by warp 0; the caller broadcasts. */
__device__ __forceinline__ void find_tile(const pa_args &a, int z, int *seq, int *tile) {
    const int lane = threadIdx.x & 31;
    int base = 0;
    for (int s0 = 0; s0 < a.n_seqs; s0 += 32) {
        const int s = s0 + lane;
        int tiles = 0;
        if (s < a.n_seqs) {
            int q0, q1;
            pa_q_range(a, s, &q0, &q1);
            tiles = ((q1 - q0) * a.G + PA_ROWS - 1) / PA_ROWS;
        }
        int incl = tiles;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int n = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += n;
        }
        unsigned hit = __ballot_sync(0xffffffffu, s < a.n_seqs && base + incl > z);
        if (hit) {
            const int l = __ffs(hit) - 1;
            if (lane == l) *seq = s, *tile = z - (base + incl - tiles);
            return;
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) *seq = -1;
}

/* ---- the tensor-core kernel -------------------------------------------------------- */

/* Element offset of 16-byte chunk c of row r in a swizzled [rows, D] tile. */
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
    constexpr int CH = D / 8, SW = CH < 8 ? CH : 8;
    return r * D + ((c ^ (r % SW)) << 3);
}

template <int D>
__global__ void __launch_bounds__(PA_THREADS) paged_attention_mma(pa_args a) {
    constexpr int CH = D / 8;       /* 16-byte chunks per row */
    constexpr int NT = D / 8;       /* n-tiles of the output */
    constexpr int KS = D / 16;      /* k-steps of the scores */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sk = (bf16 *)smem_raw;               /* [2][PA_KT][D] */
    bf16 *sv = sk + 2 * PA_KT * D;             /* [2][PA_KT][D] */
    __shared__ int sh_seq, sh_tile;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tq = lane & 3;
    const int g = blockIdx.y, split = blockIdx.x;

    /* Padding rows after the last sequence's queries are zero (the group
     * pass writes partials only). */
    if (!a.prefix && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
        const int covered = a.cu_q[a.n_seqs];
        for (size_t i = (size_t)covered * a.Hq * D + tid; i < (size_t)a.T * a.Hq * D; i += PA_THREADS)
            a.out[i] = __float2bfloat16_rn(0.0f);
    }
    if (warp == 0) find_tile(a, blockIdx.z, &sh_seq, &sh_tile);
    __syncthreads();
    const int s = sh_seq;
    if (s < 0) return;
    int q0, q1;
    pa_q_range(a, s, &q0, &q1);
    const int nq = q1 - q0, len = a.ctx_lens[s];
    const int M = nq * a.G, row0 = sh_tile * PA_ROWS;
    const int Mt = min(PA_ROWS, M - row0);
    /* The tile's last row sees keys < kv_end; a group's queries see all its keys. */
    const int kv_end = a.prefix ? len : len - nq + (row0 + Mt - 1) / a.G + 1;
    const int k_begin = split * a.chunk;
    const int k_end = min(k_begin + a.chunk, kv_end);
    if (k_begin >= k_end) return;
    const int n_stages = (k_end - k_begin + PA_KT - 1) / PA_KT;

    /* Warp roles: slices of 16 rows; spare warps split each stage's keys. */
    const int n_slices = (Mt + 15) / 16;
    const int kw = n_slices == 1 ? 4 : (n_slices == 2 ? 2 : 1);
    const int slice = warp % n_slices, kpart = warp / n_slices;
    const bool active = kpart < kw;
    const int keys_per_warp = PA_KT / kw; /* 16, 32 or 64 */

    /* This thread's two rows (gid, gid + 8 of the slice): query index and
     * causal limit; rows past the tile see nothing. */
    int lim[2];
    const bf16 *qrow[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = row0 + slice * 16 + gid + 8 * h;
        if (active && r < row0 + Mt) {
            const int i = r / a.G, j = r % a.G;
            lim[h] = a.prefix ? len - 1 : len - nq + i;
            qrow[h] = a.q + ((size_t)(q0 + i) * a.Hq + (size_t)g * a.G + j) * D;
        } else {
            lim[h] = -1;
            qrow[h] = NULL;
        }
    }
    /* Q as mma A fragments, straight from global memory (read once). */
    uint32_t qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        const int d0 = kk * 16 + tq * 2;
        qa[kk][0] = qrow[0] ? *(const uint32_t *)(qrow[0] + d0) : 0u;
        qa[kk][1] = qrow[1] ? *(const uint32_t *)(qrow[1] + d0) : 0u;
        qa[kk][2] = qrow[0] ? *(const uint32_t *)(qrow[0] + d0 + 8) : 0u;
        qa[kk][3] = qrow[1] ? *(const uint32_t *)(qrow[1] + d0 + 8) : 0u;
    }

    const size_t head_off = (size_t)g * D, tok_stride = (size_t)a.Hkv * D;
    const int32_t *pages = a.bt + (size_t)s * a.max_pages;
    auto load_stage = [&](int buf, int k0) {
        bf16 *dk = sk + buf * PA_KT * D, *dv = sv + buf * PA_KT * D;
        for (int i = tid; i < PA_KT * CH; i += PA_THREADS) {
            const int r = i / CH, c = i % CH, p = k0 + r;
            const bool ok = p < k_end;
            size_t off = 0;
            if (ok) {
                const int32_t page = pages[p / a.page_size];
                off = ((size_t)page * a.page_size + p % a.page_size) * tok_stride + head_off + (size_t)c * 8;
            }
            cp_async16(dk + swz<D>(r, c), a.kc + off, ok);
            cp_async16(dv + swz<D>(r, c), a.vc + off, ok);
        }
    };

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    load_stage(0, k_begin);
    cp_async_commit();
    if (n_stages > 1) load_stage(1, k_begin + PA_KT);
    cp_async_commit();

    for (int st = 0; st < n_stages; st++) {
        cp_async_wait<1>();
        __syncthreads();
        const int buf = st & 1, k0 = k_begin + st * PA_KT;
        const bf16 *tk = sk + buf * PA_KT * D, *tv = sv + buf * PA_KT * D;
        if (active) {
            /* Sub-blocks of up to 32 keys keep the score registers small. */
            for (int kb0 = kpart * keys_per_warp; kb0 < (kpart + 1) * keys_per_warp; kb0 += 32) {
                const int nkb = min(32, keys_per_warp) / 8; /* n-tiles of 8 keys: 2 or 4 */
                if (k0 + kb0 >= k_end) break;
                float sc[4][4];
#pragma unroll
                for (int n = 0; n < 4; n++) {
                    sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
                    if (n >= nkb) continue;
                    const int key = kb0 + n * 8 + (lane & 7);
#pragma unroll
                    for (int kk = 0; kk < KS; kk += 2) {
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4(b0, b1, b2, b3, tk + swz<D>(key, kk * 2 + (lane >> 3)));
                        mma_bf16(sc[n], qa[kk], b0, b1);
                        mma_bf16(sc[n], qa[kk + 1], b2, b3);
                    }
                }
                /* Online softmax over this sub-block, rows gid and gid + 8. */
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < 4; n++) {
                    if (n >= nkb) continue;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int h = e >> 1, pos = k0 + kb0 + n * 8 + tq * 2 + (e & 1);
                        float v = sc[n][e] * a.scale_log2;
                        if (pos > lim[h]) v = -INFINITY;
                        sc[n][e] = v;
                        mx[h] = fmaxf(mx[h], v);
                    }
                }
                float corr[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
                    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
                    const float m_new = fmaxf(m_run[h], mx[h]);
                    const float ref = m_new == -INFINITY ? 0.0f : m_new;
                    corr[h] = exp2f(m_run[h] - ref);
                    m_run[h] = m_new;
                    l_run[h] *= corr[h];
                    mx[h] = ref;
                }
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    o[n][0] *= corr[0], o[n][1] *= corr[0];
                    o[n][2] *= corr[1], o[n][3] *= corr[1];
                }
                uint32_t pa[2][4]; /* P as A fragments, 16 keys per k-step */
#pragma unroll
                for (int n = 0; n < 4; n++) {
                    if (n >= nkb) continue;
                    const float p0 = exp2f(sc[n][0] - mx[0]), p1 = exp2f(sc[n][1] - mx[0]);
                    const float p2 = exp2f(sc[n][2] - mx[1]), p3 = exp2f(sc[n][3] - mx[1]);
                    l_run[0] += p0 + p1;
                    l_run[1] += p2 + p3;
                    pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(p0, p1);
                    pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
                }
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    if (kk * 2 >= nkb) continue;
                    const int key = kb0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
                    for (int n = 0; n < NT; n += 2) {
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4_t(b0, b1, b2, b3, tv + swz<D>(key, n + (lane >> 4)));
                        mma_bf16(o[n], pa[kk], b0, b1);
                        mma_bf16(o[n + 1], pa[kk], b2, b3);
                    }
                }
            }
        }
        __syncthreads();
        if (st + 2 < n_stages) load_stage(buf, k_begin + (st + 2) * PA_KT);
        cp_async_commit();
    }
    cp_async_wait<0>();

    /* Row sums over the 4 lanes that share a row. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
        l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    }

    /* Merge the warps that split the keys of one slice (kw > 1), through the
     * now idle stage buffers, in warp order. */
    if (kw > 1) {
        float *xo = (float *)smem_raw; /* [warp][lane][NT * 4 + 4] */
        constexpr int STRIDE = NT * 4 + 4;
        __syncthreads();
        if (active) {
            float *mine = xo + ((size_t)warp * 32 + lane) * STRIDE;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) mine[n * 4 + e] = o[n][e];
            mine[NT * 4 + 0] = m_run[0], mine[NT * 4 + 1] = m_run[1];
            mine[NT * 4 + 2] = l_run[0], mine[NT * 4 + 3] = l_run[1];
        }
        __syncthreads();
        if (!active || kpart != 0) return;
        float m_all[2] = {m_run[0], m_run[1]};
        for (int w = 1; w < kw; w++) {
            const float *th = xo + ((size_t)(slice + w * n_slices) * 32 + lane) * STRIDE;
            m_all[0] = fmaxf(m_all[0], th[NT * 4 + 0]);
            m_all[1] = fmaxf(m_all[1], th[NT * 4 + 1]);
        }
        float ref[2], f[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            ref[h] = m_all[h] == -INFINITY ? 0.0f : m_all[h];
            f[h] = exp2f(m_run[h] - ref[h]);
            l_run[h] *= f[h];
        }
#pragma unroll
        for (int n = 0; n < NT; n++) o[n][0] *= f[0], o[n][1] *= f[0], o[n][2] *= f[1], o[n][3] *= f[1];
        for (int w = 1; w < kw; w++) {
            const float *th = xo + ((size_t)(slice + w * n_slices) * 32 + lane) * STRIDE;
            const float f0 = exp2f(th[NT * 4 + 0] - ref[0]), f1 = exp2f(th[NT * 4 + 1] - ref[1]);
            l_run[0] += th[NT * 4 + 2] * f0;
            l_run[1] += th[NT * 4 + 3] * f1;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                o[n][0] += th[n * 4 + 0] * f0, o[n][1] += th[n * 4 + 1] * f0;
                o[n][2] += th[n * 4 + 2] * f1, o[n][3] += th[n * 4 + 3] * f1;
            }
        }
        m_run[0] = m_all[0], m_run[1] = m_all[1];
    }
    if (!active) return;

    /* Normalise and store: bf16 output, or an fp32 partial and its lse. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = row0 + slice * 16 + gid + 8 * h;
        if (r >= row0 + Mt) continue;
        const int i = r / a.G, j = r % a.G;
        const size_t t = (size_t)(q0 + i), head = (size_t)g * a.G + j;
        const float inv = l_run[h] > 0.0f ? 1.0f / l_run[h] : 0.0f;
        if (a.nsplit == 1 && !a.prefix) {
            bf16 *dst = a.out + (t * a.Hq + head) * D;
#pragma unroll
            for (int n = 0; n < NT; n++)
                *(__nv_bfloat162 *)(dst + n * 8 + tq * 2) =
                    __floats2bfloat162_rn(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
        } else {
            const size_t row = ((size_t)split * a.T + t) * a.Hq + head;
            float *dst = a.part_o + row * D;
#pragma unroll
            for (int n = 0; n < NT; n++)
                *(float2 *)(dst + n * 8 + tq * 2) = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
            if (tq == 0) a.part_lse[row] = l_run[h] > 0.0f ? m_run[h] + log2f(l_run[h]) : -INFINITY;
        }
    }
}

/* ---- the plain kernel (any head dim) --------------------------------------------- */

/* One warp per (token, query head); lanes stride the head dim; keys in
 * order with an online softmax in fp32. Writes a partial like the tensor
 * core kernel when split. */
__global__ void paged_attention_plain(pa_args a) {
    const int D = a.D;
    const int lane = threadIdx.x & 31;
    const int rowid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int t = rowid / a.Hq, head = rowid % a.Hq, split = blockIdx.y;
    if (t >= a.T) return;
    const int s = pa_seq_of(a, t);
    if (s >= a.n_seqs) {
        if (split == 0)
            for (int d = lane; d < D; d += 32) a.out[((size_t)t * a.Hq + head) * D + d] = __float2bfloat16_rn(0.0f);
        return;
    }
    const int nq = a.cu_q[s + 1] - a.cu_q[s], i = t - a.cu_q[s];
    const int last = a.ctx_lens[s] - nq + i;
    const int k_begin = split * a.chunk, k_end = min(k_begin + a.chunk, last + 1);
    if (k_begin >= k_end) return;
    const int g = head / a.G;
    const bf16 *qr = a.q + ((size_t)t * a.Hq + head) * D;
    const int32_t *pages = a.bt + (size_t)s * a.max_pages;
    float acc[8] = {0}; /* D <= 256 */
    float m = -INFINITY, l = 0.0f;
    for (int p = k_begin; p < k_end; p++) {
        const size_t slot = (size_t)pages[p / a.page_size] * a.page_size + p % a.page_size;
        const bf16 *kr = a.kc + (slot * a.Hkv + g) * D, *vr = a.vc + (slot * a.Hkv + g) * D;
        float dot = 0.0f;
        for (int d = lane, k = 0; d < D; d += 32, k++) dot += __bfloat162float(qr[d]) * __bfloat162float(kr[d]);
        dot = warp_sum(dot) * a.scale_log2;
        const float m_new = fmaxf(m, dot), c = exp2f(m - m_new), w = exp2f(dot - m_new);
        l = l * c + w;
        for (int d = lane, k = 0; d < D; d += 32, k++) acc[k] = acc[k] * c + w * __bfloat162float(vr[d]);
        m = m_new;
    }
    const float inv = 1.0f / l;
    if (a.nsplit == 1) {
        for (int d = lane, k = 0; d < D; d += 32, k++)
            a.out[((size_t)t * a.Hq + head) * D + d] = __float2bfloat16_rn(acc[k] * inv);
    } else {
        const size_t row = ((size_t)split * a.T + t) * a.Hq + head;
        for (int d = lane, k = 0; d < D; d += 32, k++) a.part_o[row * D + d] = acc[k] * inv;
        if (lane == 0) a.part_lse[row] = m + log2f(l);
    }
}

/* ---- merge of the splits ------------------------------------------------------------ */

/* One warp per (token, head): the splits that hold a visible key of the
 * row (x < ceil(row_end / chunk)), weighted by 2^(lse_x - lse). Lane x
 * holds split x's weight (32 splits at a time), so the reads of the
 * partials are independent and in flight together; they are added in split
 * order (deterministic). */
#define PA_MERGE_UNROLL 4
template <int KD> /* ceil(D / 32): head-dim values per lane */
__global__ void paged_attention_merge(pa_args a) {
    const int lane = threadIdx.x & 31, D = a.D;
    const int rowid = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int t = rowid / a.Hq, head = rowid % a.Hq;
    pdl_wait(); /* the partials are the kernel before's output */
    pdl_launch_dependents();
    if (t >= a.T) return;
    const int s = pa_seq_of(a, t);
    bf16 *dst = a.out + ((size_t)t * a.Hq + head) * D;
    if (s >= a.n_seqs) {
        for (int d = lane; d < D; d += 32) dst[d] = __float2bfloat16_rn(0.0f);
        return;
    }
    const int nq = a.cu_q[s + 1] - a.cu_q[s], i = t - a.cu_q[s];
    const int row_end = a.ctx_lens[s] - nq + i + 1;
    const int nx = min(a.nsplit, (row_end + a.chunk - 1) / a.chunk);
    const size_t stride = (size_t)a.T * a.Hq; /* between splits, in rows */
    const size_t row0 = (size_t)t * a.Hq + head;
    float mx = -INFINITY;
    for (int x = lane; x < nx; x += 32) mx = fmaxf(mx, a.part_lse[row0 + (size_t)x * stride]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float acc[KD], wsum = 0.0f;
#pragma unroll
    for (int k = 0; k < KD; k++) acc[k] = 0.0f;
    for (int x0 = 0; x0 < nx; x0 += 32) {
        const int x = x0 + lane;
        const float w_mine = x < nx ? exp2f(a.part_lse[row0 + (size_t)x * stride] - mx) : 0.0f;
        const int n = min(32, nx - x0);
        for (int j0 = 0; j0 < n; j0 += PA_MERGE_UNROLL) {
            float vals[PA_MERGE_UNROLL][KD], w[PA_MERGE_UNROLL];
#pragma unroll
            for (int u = 0; u < PA_MERGE_UNROLL; u++) {
                w[u] = __shfl_sync(0xffffffffu, w_mine, (j0 + u) & 31);
                const float *src = a.part_o + (row0 + (size_t)(x0 + j0 + u) * stride) * D;
#pragma unroll
                for (int k = 0; k < KD; k++) {
                    const int d = lane + 32 * k;
                    vals[u][k] = j0 + u < n && d < D ? src[d] : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < PA_MERGE_UNROLL; u++) {
                if (j0 + u < n) {
                    wsum += w[u];
#pragma unroll
                    for (int k = 0; k < KD; k++) acc[k] = fmaf(w[u], vals[u][k], acc[k]);
                }
            }
        }
    }
    const float inv = 1.0f / wsum;
#pragma unroll
    for (int k = 0; k < KD; k++)
        if (lane + 32 * k < D) dst[lane + 32 * k] = __float2bfloat16_rn(acc[k] * inv);
}

/* A programmatic dependent launch (cuda_common.cuh) behind the split
 * kernel. */
static void launch_merge(const ops_ctx *ctx, const pa_args &a) {
    const dim3 blocks((unsigned)(((long)a.T * a.Hq + 3) / 4)), threads(128);
    void (*k)(pa_args);
    switch ((a.D + 31) / 32) {
    case 1: k = paged_attention_merge<1>; break;
    case 2: k = paged_attention_merge<2>; break;
    case 3: k = paged_attention_merge<3>; break;
    case 4: k = paged_attention_merge<4>; break;
    case 5: k = paged_attention_merge<5>; break;
    case 6: k = paged_attention_merge<6>; break;
    case 7: k = paged_attention_merge<7>; break;
    default: k = paged_attention_merge<8>; break;
    }
    cuda_launch_pdl(ctx_stream(ctx), cuda_pdl_rows(ctx, a.T), k, blocks, threads, 0, a);
}

/* ---- host ------------------------------------------------------------------------ */

/* The tensor-core kernel's shared memory: K and V tiles, two stages. */
#define PA_MMA_SMEM(D) ((size_t)4 * PA_KT * (D) * sizeof(bf16))

template <int D>
static void launch_mma_d(const ops_ctx *ctx, const pa_args &a, int tiles) {
    dim3 grid(a.nsplit, a.Hkv, tiles);
    paged_attention_mma<D><<<grid, PA_THREADS, PA_MMA_SMEM(D), ctx_stream(ctx)>>>(a);
    CUDA_LAUNCH_CHECK();
}
static void launch_mma(const ops_ctx *ctx, const pa_args &a, int tiles) {
    switch (a.D) {
    case 32: launch_mma_d<32>(ctx, a, tiles); break;
    case 64: launch_mma_d<64>(ctx, a, tiles); break;
    case 128: launch_mma_d<128>(ctx, a, tiles); break;
    case 256: launch_mma_d<256>(ctx, a, tiles); break;
    }
}

/* Tiles of the tensor-core kernel over n sequences (or groups) holding T
 * query tokens: sum of ceil(n_q * G / 64) <= (T * G + 63 * n) / 64. */
static long mma_tiles(long T, int G, int n) { return (T * G + 63L * n) / PA_ROWS; }

/* Bytes of one split's fp32 partials (outputs and log-sum-exps). */
static size_t partials_bytes(const pa_args &a) { return (size_t)a.T * a.Hq * (a.D + 1) * sizeof(float); }

/* a's partials for its nsplit splits, in the scratch. */
static void carve_partials(const ops_ctx *ctx, pa_args &a) {
    float *scr = (float *)ctx_scratch(ctx, (size_t)a.nsplit * partials_bytes(a), "ops_paged_attention");
    a.part_o = scr;
    a.part_lse = scr + (size_t)a.nsplit * a.T * a.Hq * a.D;
}

/* CTAs of the tensor-core kernel per multiprocessor; also sets its
 * shared-memory limit, which launch_mma_d relies on. */
template <int D>
static int mma_per_sm_d(const ops_ctx *ctx) {
    return cuda_kernel_per_sm(ctx, (const void *)paged_attention_mma<D>, PA_THREADS, PA_MMA_SMEM(D));
}
static int mma_per_sm(const ops_ctx *ctx, int D) {
    switch (D) {
    case 32: return mma_per_sm_d<32>(ctx);
    case 64: return mma_per_sm_d<64>(ctx);
    case 128: return mma_per_sm_d<128>(ctx);
    case 256: return mma_per_sm_d<256>(ctx);
    }
    return 1;
}

/* How many pieces to cut the context into. CTAs start as slots free up, so
 * a launch takes about (total work / slots) plus one CTA's length (the
 * tail); a CTA costs its 64-key stages plus about one stage of set-up, and
 * splitting adds the merge. The cheapest count wins. */
static int choose_splits(long units, int slots, int max_ctx, int max_split) {
    int best = 1;
    double best_cost = 0.0;
    for (int n = 1; n <= max_split; n++) {
        int used = n;
        const int chunk = split_chunk(max_ctx, PA_KT, &used);
        if (n > 1 && used < n) continue; /* same chunks as a smaller n */
        const double per_cta = chunk / PA_KT + 1.0;
        const double cost = (double)units * n * per_cta / slots + per_cta + (n > 1 ? 1.0 : 0.0);
        if (n == 1 || cost < best_cost) best = n, best_cost = cost;
    }
    return best;
}

/* The group pass before a grouped decode launch (ops_kv_groups): this
 * file's tensor-core kernel over each group's shared keys, its queries the
 * rows of a tile (sequences x query heads), into fp32 partials in scratch
 * that the decode kernel adds in; sets a's skip and pre_* fields. Nothing
 * is queued, and a left as it is, when one split's partials outgrow the
 * scratch: the decode kernel then reads every key itself. */
static void launch_group_pass(ops_ctx *ctx, pa_args &a, const ops_kv_groups *gr) {
    const size_t per_split = partials_bytes(a);
    if (per_split > ctx->scratch_size) return;
    pa_args p = a;
    p.prefix = 1;
    p.g_first = gr->first;
    p.g_end = gr->end;
    p.ctx_lens = gr->len;
    p.bt = gr->block_table;
    p.n_seqs = gr->n;
    const long tiles = mma_tiles(a.T, a.G, gr->n);
    const int slots = cuda_sm_count(ctx) * mma_per_sm(ctx, a.D);
    int nsplit = choose_splits(tiles * a.Hkv, slots, gr->max_len, (gr->max_len + PA_KT - 1) / PA_KT);
    nsplit = splits_in_scratch(ctx, nsplit, per_split);
    p.chunk = split_chunk(gr->max_len, PA_KT, &nsplit);
    p.nsplit = nsplit;
    carve_partials(ctx, p);
    launch_mma(ctx, p, (int)tiles);
    a.skip = gr->skip;
    a.pre_o = p.part_o;
    a.pre_lse = p.part_lse;
    a.pre_n = nsplit;
    a.pre_chunk = p.chunk;
}

/* The decode kernel's launch: its warps and splits, merged on chip (one
 * cluster a token and KV head: no scratch, no second kernel) or, where
 * the plan fills the GPU with more splits than clusters allow, through
 * partials in the scratch and paged_attention_merge. */
static void launch_decode(ops_ctx *ctx, pa_args &a, int max_ctx) {
    int nw = 4, lm = 0, gm = 0;
    int nsplit = cuda_paged_decode_plan(ctx, a.T, a.Hkv, a.D, a.G, max_ctx, a.skip != NULL, &nw, &lm, &gm);
    if (gm) nsplit = splits_in_scratch(ctx, nsplit, partials_bytes(a));
    a.chunk = split_chunk(max_ctx, cuda_paged_decode_chunk_align(a.D, nw), &nsplit);
    a.nsplit = nsplit;
    a.gmerge = gm && nsplit > 1;
    if (a.gmerge) carve_partials(ctx, a);
    cuda_paged_decode_launch(ctx, &a, nw, lm);
    if (a.gmerge) launch_merge(ctx, a);
}

extern "C" void cuda_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                                     const int32_t *block_table, int max_pages, const int32_t *ctx_lens,
                                     const int32_t *cu_q, int n_seqs, int T, int Hq, int Hkv, int D, int page_size,
                                     float scale, const ops_kv_groups *groups) {
    if (n_seqs < 0 || T < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || D <= 0 || D > 256 || page_size <= 0 ||
        max_pages <= 0)
        DK_ABORT("ops_paged_attention: bad shape n_seqs=%d T=%d Hq=%d Hkv=%d D=%d page_size=%d max_pages=%d "
                 "(CUDA: D <= 256)",
                 n_seqs, T, Hq, Hkv, D, page_size, max_pages);
    if (T == 0) return;
    cudaStream_t st = ctx_stream(ctx);
    if (n_seqs == 0) {
        CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)T * Hq * D * sizeof(bf16), st));
        return;
    }
    pa_args a;
    memset(&a, 0, sizeof a); /* no partials unless split below */
    a.out = (bf16 *)out;
    a.q = (const bf16 *)q;
    a.kc = (const bf16 *)k_cache;
    a.vc = (const bf16 *)v_cache;
    a.bt = block_table;
    a.ctx_lens = ctx_lens;
    a.cu_q = cu_q;
    a.max_pages = max_pages;
    a.n_seqs = n_seqs;
    a.T = T;
    a.Hq = Hq;
    a.Hkv = Hkv;
    a.G = Hq / Hkv;
    a.D = D;
    a.page_size = page_size;
    a.scale_log2 = scale * 1.4426950408889634f;
    const bool vec = (D == 32 || D == 64 || D == 128 || D == 256) && is_aligned16(q) && is_aligned16(k_cache) &&
                     is_aligned16(v_cache) && is_aligned16(out);
    /* Few query rows per sequence (decode: G rows of one token) leave most
     * of a 16-row mma tile empty: the warp kernel of paged_decode.cuh serves
     * those; several query tokens per sequence share each key read on
     * tensor cores here. A benchmark or test may pin the kernel
     * (ctx->tuning.paged_kernel, ops.h). */
    int kind = ctx->tuning.paged_kernel;
    if (kind < OPS_PAGED_AUTO || kind > OPS_PAGED_PLAIN)
        DK_ABORT("ops_tuning.paged_kernel = %d: expected an ops_paged_kernel (0..3)", kind);
    if (kind == OPS_PAGED_AUTO) {
        kind = (long)T * a.G < 16L * n_seqs ? OPS_PAGED_DECODE : OPS_PAGED_MMA;
        /* Except wide groups at a batch past one CTA an SM: the warp kernel
         * holds K/V in registers, and at 5 heads a group (Qwen3-14B, padded to
         * an instance of 8) a thread needs 244 of them, which leaves 8 warps an
         * SM and too few loads in flight. At batch 64, 640-token context on an
         * H100 it read 1.2 TB/s (138 us a layer; 123 us with an instance of 5
         * heads) where the tensor-core kernel, staging keys through shared
         * memory, read 2.0 TB/s (84 us); at 4 heads the warp kernel still led
         * (77 against 82 us). Few sequences keep the warp kernel: its
         * cluster splits are what make batch-1 decode fast; so do groups of
         * shared pages, whose shared keys a tensor-core pass reads first. */
        if (kind == OPS_PAGED_DECODE && a.G > 4 && (long)T * Hkv >= cuda_sm_count(ctx) && !(groups && groups->n > 0))
            kind = OPS_PAGED_MMA;
    }
    if (!vec) kind = OPS_PAGED_PLAIN;
    if (kind == OPS_PAGED_DECODE && !cuda_paged_decode_fits(D, a.G)) kind = OPS_PAGED_MMA;
    const int max_ctx = max_pages * page_size;
    if (kind == OPS_PAGED_DECODE) {
        /* Groups change only where keys are read: the other kernels read
         * every sequence's own pages, which gives the same attention. */
        if (groups && groups->n > 0) {
            if (groups->n > n_seqs || groups->max_len <= 0 || groups->max_len > max_ctx)
                DK_ABORT("ops_paged_attention: groups n = %d, max_len = %d for %d sequences of at most %d keys",
                         groups->n, groups->max_len, n_seqs, max_ctx);
            launch_group_pass(ctx, a, groups);
        }
        launch_decode(ctx, a, max_ctx);
        return;
    }
    const long tiles = mma_tiles(T, a.G, n_seqs);
    const long units = kind == OPS_PAGED_MMA ? tiles * Hkv : ((long)T * Hq + 3) / 4;
    const int slots = cuda_sm_count(ctx) * (kind == OPS_PAGED_MMA ? mma_per_sm(ctx, D) : 8);
    int nsplit = choose_splits(units, slots, max_ctx, (max_ctx + PA_KT - 1) / PA_KT);
    /* The partial results must fit the scratch. */
    nsplit = splits_in_scratch(ctx, nsplit, partials_bytes(a));
    a.chunk = split_chunk(max_ctx, PA_KT, &nsplit);
    a.nsplit = nsplit;
    if (nsplit > 1) carve_partials(ctx, a);
    if (kind == OPS_PAGED_MMA) {
        launch_mma(ctx, a, (int)tiles);
    } else {
        dim3 grid((unsigned)(((long)T * Hq + 3) / 4), nsplit);
        paged_attention_plain<<<grid, 128, 0, st>>>(a);
        CUDA_LAUNCH_CHECK();
    }
    if (nsplit > 1) launch_merge(ctx, a);
}
