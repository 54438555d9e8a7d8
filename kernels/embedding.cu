/* embedding.cu: token embedding lookup and its deterministic gradient on the
 * CUDA backend.
 *
 * Forward: out[t, :] = table[ids[t], :], one thread per 16-byte vector of an
 * output row. A negative id (which the CPU backend refuses) gives a zero row.
 *
 * Backward: dtable[ids[t], :] += dout[t, :], bit-identical from run to run,
 * without atomics:
 *  1. sort the keys (id << 32 | t) with a bitonic network in scratch, so the
 *     tokens of one id are adjacent and in token order (negative ids and the
 *     padding of the network sort last and are skipped);
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

/* ---- backward: bitonic sort of (id, token) keys ------------------------------------- */

#define SORT_TILE 4096 /* keys sorted in shared memory by one block (32 KB) */
#define SORT_THREADS 1024
#define NO_ID 0xffffffffu

__global__ void emb_make_keys(uint64_t *keys, const int32_t *ids, int T, int n2) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += gridDim.x * blockDim.x) {
        uint32_t id = NO_ID;
        if (i < T && ids[i] >= 0) id = (uint32_t)ids[i];
        keys[i] = i < T ? ((uint64_t)id << 32 | (uint32_t)i) : ~0ull;
    }
}

/* Compare-exchange of the pair (i, i + j) for stage k: ascending where
 * (i & k) == 0. p is the pair's index. */
__device__ __forceinline__ void bitonic_pair(uint64_t *a, unsigned p, unsigned j, unsigned k, unsigned base) {
    unsigned i = (p / j) * 2 * j + (p % j), l = i + j;
    uint64_t x = a[i], y = a[l];
    bool up = ((base + i) & k) == 0;
    if ((x > y) == up) {
        a[i] = y;
        a[l] = x;
    }
}

/* Stages k = 2 .. kmax (or just k = kmax's merges j < tile when merge_only)
 * on a tile of `tile` keys in shared memory. */
__global__ void __launch_bounds__(SORT_THREADS)
    bitonic_tile(uint64_t *keys, unsigned tile, unsigned kmax, int merge_only) {
    __shared__ uint64_t s[SORT_TILE];
    const unsigned base = blockIdx.x * tile;
    for (unsigned i = threadIdx.x; i < tile; i += blockDim.x) s[i] = keys[base + i];
    __syncthreads();
    for (unsigned k = merge_only ? kmax : 2; k <= kmax; k <<= 1) {
        for (unsigned j = (merge_only ? tile : k) >> 1; j > 0; j >>= 1) {
            for (unsigned p = threadIdx.x; p < tile / 2; p += blockDim.x) bitonic_pair(s, p, j, k, base);
            __syncthreads();
        }
    }
    for (unsigned i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = s[i];
}

/* One stage step with a pair distance j >= tile, over the whole array. */
__global__ void bitonic_global(uint64_t *keys, unsigned npairs, unsigned j, unsigned k) {
    for (unsigned p = blockIdx.x * blockDim.x + threadIdx.x; p < npairs; p += gridDim.x * blockDim.x)
        bitonic_pair(keys, p, j, k, 0);
}

static void bitonic_sort(ops_ctx *ctx, uint64_t *keys, unsigned n2) {
    cudaStream_t st = ctx_stream(ctx);
    unsigned tile = n2 < SORT_TILE ? n2 : SORT_TILE;
    unsigned threads = tile / 2 < SORT_THREADS ? tile / 2 : SORT_THREADS;
    if (threads < 1) threads = 1;
    bitonic_tile<<<n2 / tile, threads, 0, st>>>(keys, tile, tile, 0);
    CUDA_LAUNCH_CHECK();
    for (unsigned k = 2 * tile; k <= n2; k <<= 1) {
        for (unsigned j = k >> 1; j >= tile; j >>= 1) {
            bitonic_global<<<grid_for(ctx, n2 / 2, 256, 8), 256, 0, st>>>(keys, n2 / 2, j, k);
            CUDA_LAUNCH_CHECK();
        }
        bitonic_tile<<<n2 / tile, threads, 0, st>>>(keys, tile, k, 1);
        CUDA_LAUNCH_CHECK();
    }
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
    unsigned n2 = 1;
    while (n2 < (unsigned)T) n2 <<= 1;
    const size_t key_bytes = ((size_t)n2 * sizeof(uint64_t) + 255) & ~(size_t)255;
    /* Window length: 32 positions, doubled until the two partial slots per
     * window fit the scratch. */
    int P = 32;
    while ((size_t)2 * div_up((size_t)T, P) * C * sizeof(float) + key_bytes > ctx->scratch_size && P < T) P *= 2;
    const int nwin = (int)div_up((size_t)T, P);
    char *scratch = (char *)ctx_scratch(ctx, key_bytes + (size_t)2 * nwin * C * sizeof(float),
                                        "ops_embedding_backward");
    uint64_t *keys = (uint64_t *)scratch;
    float *head = (float *)(scratch + key_bytes), *tail = head + (size_t)nwin * C;

    emb_make_keys<<<grid_for(ctx, n2, 256, 8), 256, 0, st>>>(keys, ids, T, (int)n2);
    CUDA_LAUNCH_CHECK();
    bitonic_sort(ctx, keys, n2);

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
