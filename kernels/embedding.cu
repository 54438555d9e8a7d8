/* embedding.cu: token embedding lookup and its deterministic gradient on the
 * CUDA backend.
 *
 * Forward: out[t, :] = table[ids[t], :], one thread per 16-byte vector of an
 * output row. A negative id (which the CPU backend refuses) gives a zero row.
 *
 * Backward: dtable[ids[t], :] += dout[t, :], bit-identical from run to run,
 * without atomics:
 *  1. sort the keys (id << 32 | t) in scratch (emb_sort_keys), so the
 *     tokens of one id are adjacent and in token order (negative ids sort
 *     last and are skipped);
 *  2. cut the sorted order into windows of P positions; a thread per (window,
 *     8 columns) adds up each run of equal ids inside its window in order. A
 *     run that lies inside the window is added to its dtable row at once; the
 *     pieces of a run that crosses a window edge go to two partial slots per
 *     window (the piece continuing a run from before, the piece starting a
 *     run that continues after);
 *  3. the thread of the window where a crossing run starts adds its pieces in
 *     window order and adds the total to the dtable row.
 * Every dtable row is written by one thread per column chunk, every sum has a
 * fixed order, and no run, however long (a padding token repeated thousands
 * of times), keeps one thread busy for more than P tokens in step 2. */
#include "kernels/cuda_common.cuh"

#define EMB_THREADS 256

/* ---- forward ------------------------------------------------------------------------ */

__global__ void embedding_fwd_vec(bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                  const bf16 *__restrict__ table, size_t nvec, int cv) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += 2 * stride) {
        /* Two vectors per step, both row loads in flight before the stores. */
        const size_t j = i + stride;
        const int ia = ids[i / cv], ib = j < nvec ? ids[j / cv] : -1;
        uint4 a = ia >= 0 ? *(const uint4 *)(table + ((size_t)ia * cv + i % cv) * 8) : make_uint4(0, 0, 0, 0);
        uint4 b = ib >= 0 ? *(const uint4 *)(table + ((size_t)ib * cv + j % cv) * 8) : make_uint4(0, 0, 0, 0);
        st_stream(out + 8 * i, a);
        if (j < nvec) st_stream(out + 8 * j, b);
    }
}

__global__ void embedding_fwd_scalar(bf16 *out, const int32_t *ids, const bf16 *table, size_t total, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / C, c = i % C;
        const int id = ids[t];
        out[i] = id >= 0 ? table[(size_t)id * C + c] : __float2bfloat16_rn(0.0f);
    }
}

extern "C" void cuda_embedding_forward(ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T,
                                       int C) {
    if (T <= 0 || C <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    if (C % 8 == 0 && is_aligned16(out) && is_aligned16(table)) {
        size_t nvec = (size_t)T * C / 8;
        embedding_fwd_vec<<<grid_resident(ctx, embedding_fwd_vec, EMB_THREADS, 0, div_up(nvec, EMB_THREADS)), EMB_THREADS,
                            0, st>>>((bf16 *)out, ids,
                                                                                      (const bf16 *)table, nvec,
                                                                                      C / 8);
    } else {
        size_t total = (size_t)T * C;
        embedding_fwd_scalar<<<grid_for(ctx, total, EMB_THREADS, 8), EMB_THREADS, 0, st>>>(
            (bf16 *)out, ids, (const bf16 *)table, total, C);
    }
    CUDA_LAUNCH_CHECK();
}

/* ---- backward: sort of the (id, token) keys ---------------------------------------- */

#define SORT_TILE 512    /* keys one block sorts in shared memory */
#define SORT_THREADS 256 /* a compare-exchange each per network step */
#define RANK_TILES 4     /* other tiles one rank block counts against */
#define NO_ID 0xffffffffu
#define NO_KEY (~0ull)

/* Compare-exchange of the pair (i, i + j) for stage k: ascending where
 * (i & k) == 0. p is the pair's index. */
__device__ __forceinline__ void bitonic_pair(uint64_t *a, unsigned p, unsigned j, unsigned k) {
    unsigned i = (p / j) * 2 * j + (p % j), l = i + j;
    uint64_t x = a[i], y = a[l];
    bool up = (i & k) == 0;
    if ((x > y) == up) {
        a[i] = y;
        a[l] = x;
    }
}

/* Block b makes the keys of tokens b * SORT_TILE .. (NO_KEY past T, so
 * they sort last), sorts them with a bitonic network in shared memory and
 * starts each key's rank at its place in the tile. */
__global__ void __launch_bounds__(SORT_THREADS) emb_sort_tiles(uint64_t *tkeys, int *rank, const int32_t *ids, int T) {
    __shared__ uint64_t s[SORT_TILE];
    const int base = blockIdx.x * SORT_TILE;
    for (int i = threadIdx.x; i < SORT_TILE; i += blockDim.x) {
        const int t = base + i;
        uint64_t key = NO_KEY;
        if (t < T) key = (uint64_t)(ids[t] >= 0 ? (uint32_t)ids[t] : NO_ID) << 32 | (uint32_t)t;
        s[i] = key;
    }
    __syncthreads();
    for (unsigned k = 2; k <= SORT_TILE; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            bitonic_pair(s, threadIdx.x, j, k);
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < SORT_TILE; i += blockDim.x) {
        tkeys[base + i] = s[i];
        rank[base + i] = i;
    }
}

/* Keys of a sorted tile below x: binary lifting over SORT_TILE entries. */
__device__ __forceinline__ int tile_count_below(const uint64_t *a, uint64_t x) {
    int c = 0;
#pragma unroll
    for (int step = SORT_TILE / 2; step > 0; step >>= 1)
        if (a[c + step - 1] < x) c += step;
    return c + (a[c] < x);
}

/* Block (i, g): each key of tile i counts the keys below it in tiles
 * g * RANK_TILES .. (but i) and adds that to its rank. Keys are distinct
 * (the token index is in them), so the finished rank is the key's place in
 * the sorted order; integer atomics make it the same whatever the order
 * the blocks run in. Work and L2 reads grow as T^2 / SORT_TILE: about 16 MB
 * of reads at T = 32768. */
__global__ void __launch_bounds__(SORT_THREADS) emb_rank_tiles(int *rank, const uint64_t *__restrict__ tkeys, int nt) {
    __shared__ uint64_t s[RANK_TILES][SORT_TILE];
    const int i = blockIdx.x, j0 = blockIdx.y * RANK_TILES, nj = min(RANK_TILES, nt - j0);
    for (int u = 0; u < nj; u++)
        for (int e = threadIdx.x; e < SORT_TILE; e += blockDim.x) s[u][e] = tkeys[(size_t)(j0 + u) * SORT_TILE + e];
    __syncthreads();
    for (int e = threadIdx.x; e < SORT_TILE; e += blockDim.x) {
        const uint64_t x = tkeys[(size_t)i * SORT_TILE + e];
        if (x == NO_KEY) continue;
        int c = 0;
        for (int u = 0; u < nj; u++)
            if (j0 + u != i) c += tile_count_below(s[u], x);
        if (c) atomicAdd(&rank[(size_t)i * SORT_TILE + e], c);
    }
}

__global__ void emb_scatter_keys(uint64_t *keys, const uint64_t *__restrict__ tkeys, const int *__restrict__ rank,
                                 int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint64_t x = tkeys[i];
        if (x != NO_KEY) keys[rank[i]] = x;
    }
}

/* keys[0 .. T) = the (id, token) keys in ascending order (negative ids as
 * NO_ID, last): tiles sorted in shared memory, then every key ranked by
 * binary searches in the other tiles and moved to its place. Three
 * launches whatever T; a bitonic network over the whole array took 85 us
 * at T = 8192 on an H200, most of it two blocks sorting 4096 keys each. */
static void emb_sort_keys(ops_ctx *ctx, uint64_t *keys, uint64_t *tkeys, int *rank, const int32_t *ids, int T) {
    cudaStream_t st = ctx_stream(ctx);
    const int nt = (int)div_up((size_t)T, SORT_TILE);
    emb_sort_tiles<<<nt, SORT_THREADS, 0, st>>>(tkeys, rank, ids, T);
    CUDA_LAUNCH_CHECK();
    if (nt > 1) {
        emb_rank_tiles<<<dim3(nt, div_up((size_t)nt, RANK_TILES)), SORT_THREADS, 0, st>>>(rank, tkeys, nt);
        CUDA_LAUNCH_CHECK();
    }
    emb_scatter_keys<<<grid_for(ctx, (size_t)nt * SORT_TILE, 256, 8), 256, 0, st>>>(keys, tkeys, rank,
                                                                                       nt * SORT_TILE);
    CUDA_LAUNCH_CHECK();
}

/* ---- backward: windowed run sums ------------------------------------------------------- */

template <int VEC>
__device__ __forceinline__ void emb_load(float acc[VEC], const bf16 *p) {
    if (VEC == 8) {
        bf16x8_to_f32(ld_stream(p), acc);
    } else {
        acc[0] = __bfloat162float(*p);
    }
}

template <int VEC>
__device__ __forceinline__ void emb_add_row(float *dst, const float acc[VEC]) {
    if (VEC == 8) {
        float4 a = *(float4 *)dst, b = *(float4 *)(dst + 4);
        a.x += acc[0], a.y += acc[1], a.z += acc[2], a.w += acc[3];
        b.x += acc[4], b.y += acc[5], b.z += acc[6], b.w += acc[7];
        *(float4 *)dst = a;
        *(float4 *)(dst + 4) = b;
    } else {
        dst[0] += acc[0];
    }
}

/* Two 16-byte stores for a chunk of 8: as 8 scalar stores each store
 * instruction of a warp would write 4 bytes into each of 32 sectors. */
template <int VEC>
__device__ __forceinline__ void emb_put(float *dst, const float acc[VEC]) {
    if (VEC == 8) {
        *(float4 *)dst = make_float4(acc[0], acc[1], acc[2], acc[3]);
        *(float4 *)(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
        dst[0] = acc[0];
    }
}

__device__ __forceinline__ uint32_t key_id(uint64_t k) { return (uint32_t)(k >> 32); }

template <int VEC>
__device__ __forceinline__ void emb_load_f32(float v[VEC], const float *p) {
    if (VEC == 8) {
        const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        v[0] = p[0];
    }
}

#define EMB_U 4 /* window positions whose loads are in flight together */

/* Step 2. Block (x, w): window w, columns of thread x. head / tail are
 * [nwin][C] partial slots. The window's positions are taken EMB_U at a
 * time: their dout chunks and the dtable chunks of their ids are loaded
 * first, all in flight together, then added in position order. A dtable
 * chunk read ahead is safe: within this kernel only the thread that owns a
 * run wholly inside its window writes that run's row. */
template <int VEC>
__global__ void __launch_bounds__(128)
    emb_window_sums(float *dtable, float *head, float *tail, const uint64_t *__restrict__ keys,
                    const bf16 *__restrict__ dout, int T, int C, int P) {
    extern __shared__ uint64_t wkeys[]; /* the window's P keys */
    const int w = blockIdx.y, start = w * P, end = min(start + P, T), n = end - start;
    for (int i = threadIdx.x; i < n; i += blockDim.x) wkeys[i] = keys[start + i];
    __syncthreads();
    const int col = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (col >= C) return;
    const uint32_t before = start > 0 ? key_id(keys[start - 1]) : NO_ID;
    const uint32_t after = end < T ? key_id(keys[end]) : NO_ID;
    uint32_t cur = key_id(wkeys[0]);
    if (cur == NO_ID) return; /* only invalid ids and padding from here on */
    bool cur_before = cur == before;
    float acc[VEC], base[VEC]; /* the run's sum; its dtable chunk as read */
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = base[k] = 0.0f;
    /* The run of `cur` ends: its sum goes to a partial slot when it crosses
     * the window's start or (at the window's end) its end, else onto its row. */
    auto flush = [&](bool at_end) {
        if (cur_before) {
            emb_put<VEC>(head + (size_t)w * C + col, acc);
        } else if (at_end && cur == after) {
            emb_put<VEC>(tail + (size_t)w * C + col, acc);
        } else {
            float out[VEC];
#pragma unroll
            for (int k = 0; k < VEC; k++) out[k] = base[k] + acc[k];
            emb_put<VEC>(dtable + (size_t)cur * C + col, out);
        }
    };
    for (int p0 = 0; p0 < n; p0 += EMB_U) {
        float v[EMB_U][VEC], d[EMB_U][VEC];
#pragma unroll
        for (int u = 0; u < EMB_U; u++) {
            const int p = p0 + u;
#pragma unroll
            for (int k = 0; k < VEC; k++) v[u][k] = d[u][k] = 0.0f;
            if (p < n) {
                const uint64_t key = wkeys[p];
                emb_load<VEC>(v[u], dout + (size_t)(uint32_t)key * C + col);
                if (key_id(key) != NO_ID) emb_load_f32<VEC>(d[u], dtable + (size_t)key_id(key) * C + col);
            }
        }
#pragma unroll
        for (int u = 0; u < EMB_U; u++) {
            const int p = p0 + u;
            if (p >= n) break;
            const uint32_t id = key_id(wkeys[p]);
            if (p == 0) {
#pragma unroll
                for (int k = 0; k < VEC; k++) base[k] = d[u][k];
            } else if (id != cur) {
                flush(false);
                if (id == NO_ID) return; /* invalid ids sort last: nothing after them */
                cur = id;
                cur_before = false;
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] = 0.0f, base[k] = d[u][k];
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += v[u][k];
        }
    }
    flush(true);
}

/* Step 3. Thread (x, w): if window w's last run starts in it and continues
 * past its end, add tail[w] + head[w+1] + ... over the windows the run spans. */
template <int VEC>
__global__ void __launch_bounds__(128)
    emb_cross_sums(float *dtable, const float *head, const float *tail, const uint64_t *__restrict__ keys, int T,
                   int C, int P, int nwin) {
    const int w = blockIdx.y, start = w * P, end = min(start + P, T);
    const int col = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (col >= C || end >= T) return;
    const uint32_t id = key_id(keys[end - 1]);
    if (id == NO_ID || key_id(keys[end]) != id) return; /* no run crosses the end */
    if (start > 0 && key_id(keys[start - 1]) == id && key_id(keys[start]) == id) return; /* begun earlier */
    float acc[VEC], v[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = tail[(size_t)w * C + col + k];
    for (int w2 = w + 1; w2 < nwin; w2++) {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = head[(size_t)w2 * C + col + k];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] += v[k];
        const int e2 = min((w2 + 1) * P, T);
        if (e2 >= T || key_id(keys[e2]) != id) break; /* the run ends inside window w2 */
    }
    emb_add_row<VEC>(dtable + (size_t)id * C + col, acc);
}

extern "C" void cuda_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T,
                                        int C) {
    if (T <= 0 || C <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    const size_t nk = div_up((size_t)T, SORT_TILE) * SORT_TILE; /* keys in whole tiles */
    const size_t key_bytes = ((size_t)T * sizeof(uint64_t) + 255) & ~(size_t)255;
    const size_t tile_bytes = ((nk * (sizeof(uint64_t) + sizeof(int))) + 255) & ~(size_t)255;
    /* Window length: 32 positions, doubled until the two partial slots per
     * window fit the scratch beside the keys. */
    int P = 32;
    while ((size_t)2 * div_up((size_t)T, P) * C * sizeof(float) + key_bytes + tile_bytes > ctx->scratch_size && P < T)
        P *= 2;
    const int nwin = (int)div_up((size_t)T, P);
    char *scratch = (char *)ctx_scratch(ctx, key_bytes + tile_bytes + (size_t)2 * nwin * C * sizeof(float),
                                        "ops_embedding_backward");
    uint64_t *keys = (uint64_t *)scratch, *tkeys = (uint64_t *)(scratch + key_bytes);
    int *rank = (int *)(tkeys + nk);
    float *head = (float *)(scratch + key_bytes + tile_bytes), *tail = head + (size_t)nwin * C;

    emb_sort_keys(ctx, keys, tkeys, rank, ids, T);

    const int vec = (C % 8 == 0 && is_aligned16(dtable) && is_aligned16(dout)) ? 8 : 1;
    dim3 grid(div_up((size_t)C, (size_t)128 * vec), (unsigned)nwin);
    size_t smem = (size_t)P * sizeof(uint64_t);
    if (smem > 48 * 1024) DK_ABORT("ops_embedding_backward: window of %d keys exceeds shared memory", P);
    if (vec == 8) {
        emb_window_sums<8><<<grid, 128, smem, st>>>(dtable, head, tail, keys, (const bf16 *)dout, T, C, P);
        CUDA_LAUNCH_CHECK();
        emb_cross_sums<8><<<grid, 128, 0, st>>>(dtable, head, tail, keys, T, C, P, nwin);
    } else {
        emb_window_sums<1><<<grid, 128, smem, st>>>(dtable, head, tail, keys, (const bf16 *)dout, T, C, P);
        CUDA_LAUNCH_CHECK();
        emb_cross_sums<1><<<grid, 128, 0, st>>>(dtable, head, tail, keys, T, C, P, nwin);
    }
    CUDA_LAUNCH_CHECK();
}
