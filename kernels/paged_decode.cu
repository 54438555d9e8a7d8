/* paged_decode.cu: the few-queries side of ops_paged_attention on the CUDA
 * backend (decode steps: one new token per sequence). paged_attention.cu's
 * tensor-core kernel fills 16-row mma tiles with the G query heads of one
 * token (two of sixteen rows at G = 2) and needs 64 KB of shared memory per
 * CTA, so a decode batch leaves it a wave and a fraction of fat CTAs and
 * far less than the copy rate. Here the unit of work is one warp:
 *
 * A CTA of PD_WARPS warps serves (token t, KV head g, split x); its warps
 * take turns over the split's keys, PD_U rows per lane at a time. A key row
 * of D bf16 is D/8 lanes of 16-byte loads, so one warp-wide load covers
 * 32/(D/8) keys; K and V rows go straight from the pages to registers
 * (streamed, read once), no shared memory, so many small CTAs stay resident
 * and the whole grid is usually one wave. Each lane keeps an fp32 online
 * softmax for the G query heads over its own keys; the key slots of a warp
 * and then the warps are merged in a fixed order (deterministic, no
 * atomics), and the CTA writes the bf16 output or, when the context is
 * split across CTAs, the fp32 partial and log-sum-exp that
 * paged_attention.cu's merge kernel combines. Unlike the tensor-core kernel
 * P stays in fp32 for P.V.
 *
 * Any query count per sequence is served correctly (each token has its own
 * causal end), but keys are re-read per token, so the host picks this
 * kernel only when sequences carry few query rows (see cuda_paged_attention).
 * A programmatic dependent launch (cuda_common.cuh) in few-row steps. */
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda_infer.h"
#include "kernels/paged_common.cuh"

#define PD_WARPS 4
#define PD_THREADS (PD_WARPS * 32)
#define PD_MAX_G 8

/* Rows per lane per step: fewer for wide groups, whose q and output
 * registers would otherwise cost occupancy. */
template <int GM>
struct pd_unroll {
    static constexpr int U = GM <= 2 ? 4 : 2;
};

/* With a->counters: the nsplit CTAs of (t, g) count themselves in, and the
 * last to arrive adds the splits' partials in split order with the
 * arithmetic of paged_attention_merge (the same bits), writes the output and
 * resets the counter. A decode step then runs one attention kernel instead
 * of two; the merge kernel's launch and its dependent reads cost as much as
 * the attention itself at batch 1. */
template <int D>
__device__ void pd_merge_last(const pa_args &a, int t, int g, int row_end) {
    __shared__ int last;
    __threadfence(); /* this CTA's partials are visible before it counts */
    __syncthreads();
    int *cnt = a.counters + (size_t)t * a.Hkv + g;
    if (threadIdx.x == 0) {
        last = atomicAdd(cnt, 1) == a.nsplit - 1;
        if (last) *cnt = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int nx = min(a.nsplit, (row_end + a.chunk - 1) / a.chunk); /* the splits that hold keys */
    const size_t stride = (size_t)a.T * a.Hq;                       /* between splits, in rows */
    for (int idx = threadIdx.x; idx < a.G * D; idx += PD_THREADS) {
        const int j = idx / D, d = idx % D;
        const size_t row0 = (size_t)t * a.Hq + (size_t)g * a.G + j;
        float mx = -INFINITY;
        for (int x = 0; x < nx; x++) mx = fmaxf(mx, __ldcg(a.part_lse + row0 + x * stride));
        float acc = 0.0f, wsum = 0.0f;
        for (int x = 0; x < nx; x++) {
            const float w = exp2f(__ldcg(a.part_lse + row0 + x * stride) - mx);
            wsum += w;
            acc = fmaf(w, __ldcg(a.part_o + (row0 + x * stride) * D + d), acc);
        }
        a.out[row0 * D + d] = __float2bfloat16_rn(acc * (1.0f / wsum));
    }
}

template <int D, int GM>
__global__ void __launch_bounds__(PD_THREADS) paged_decode(pa_args a) {
    constexpr int LPK = D / 8;              /* lanes per key row */
    constexpr int KPL = 32 / LPK;           /* keys per warp-wide load */
    constexpr int U = pd_unroll<GM>::U;     /* loads per lane per step */
    constexpr int KPS = KPL * U;            /* keys per warp step */
    __shared__ float sh_o[PD_WARPS][GM][D];
    __shared__ float sh_ml[PD_WARPS][GM][2];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / LPK, part = lane % LPK;
    const int t = blockIdx.x / a.Hkv, g = blockIdx.x % a.Hkv, split = blockIdx.y;
    /* Before pdl_wait this kernel reads only what no kernel of the step
     * writes: the step's metadata (uploaded before its first kernel) and the
     * K/V rows of earlier tokens. So the sequence lookup, the block table
     * and the first step of old keys are in flight while the kernel before
     * (qkv_to_cache) still runs; at batch 1 they are most of this kernel's
     * chain of dependent loads. */
    const int s = pa_seq_of(a, t);
    if (s >= a.n_seqs) { /* padding token: zero (split runs without counters leave it to the merge) */
        pdl_wait();
        pdl_launch_dependents();
        if (a.nsplit == 1 || (a.counters && split == 0))
            for (int i = threadIdx.x; i < a.G * D; i += PD_THREADS)
                a.out[((size_t)t * a.Hq + (size_t)g * a.G) * D + i] = __float2bfloat16_rn(0.0f);
        return;
    }
    const int nq = a.cu_q[s + 1] - a.cu_q[s], i = t - a.cu_q[s];
    const int row_end = a.ctx_lens[s] - nq + i + 1;
    const int k_begin = split * a.chunk, k_end = min(k_begin + a.chunk, row_end);
    if (k_begin >= k_end) { /* the merge reads only the splits that hold keys */
        pdl_wait();
        pdl_launch_dependents();
        if (a.counters) pd_merge_last<D>(a, t, g, row_end);
        return;
    }
    const int G = a.G;
    const int fresh = a.ctx_lens[s] - nq; /* keys from here on are this step's, written by the kernel before */
    const size_t tok_stride = (size_t)a.Hkv * D, head_off = (size_t)g * D + (size_t)part * 8;
    const int32_t *pages = a.bt + (size_t)s * a.max_pages;
    uint4 kr[U], vr[U];
    bool ok[U];
    /* A warp step's rows start at key k0: clear_rows marks which hold keys
     * and zeroes them, load_rows loads those among them in [lo, hi). */
    auto clear_rows = [&](int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            ok[u] = k0 + u * KPL + sub < k_end;
            kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
        }
    };
    auto load_rows = [&](int k0, int lo, int hi) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = k0 + u * KPL + sub;
            if (ok[u] && p >= lo && p < hi) {
                const size_t off =
                    ((size_t)pages[p / a.page_size] * a.page_size + p % a.page_size) * tok_stride + head_off;
                kr[u] = ld_stream(a.kc + off);
                vr[u] = ld_stream(a.vc + off);
            }
        }
    };
    const int k_first = k_begin + warp * KPS;
    clear_rows(k_first);
    load_rows(k_first, 0, fresh);
    pdl_wait(); /* q and the new tokens' K/V are the kernel before's output */
    pdl_launch_dependents();
    load_rows(k_first, fresh, k_end);

    /* This lane's 8 dims of each query head of the group, pre-scaled. */
    float qf[GM][8];
#pragma unroll
    for (int j = 0; j < GM; j++) {
        if (j < G) {
            const bf16 *qr = a.q + ((size_t)t * a.Hq + (size_t)g * G + j) * D + part * 8;
            bf16x8_to_f32(*(const uint4 *)qr, qf[j]);
#pragma unroll
            for (int e = 0; e < 8; e++) qf[j][e] *= a.scale_log2;
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) qf[j][e] = 0.0f;
        }
    }
    float m[GM], l[GM], o[GM][8];
#pragma unroll
    for (int j = 0; j < GM; j++) {
        m[j] = -INFINITY, l[j] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) o[j][e] = 0.0f;
    }

    for (int k0 = k_first; k0 < k_end; k0 += PD_WARPS * KPS) {
        if (k0 != k_first) { /* the first step's rows are loaded above */
            clear_rows(k0);
            load_rows(k0, 0, k_end);
        }
        /* Scores: 8-dim partial dots summed over the key's LPK lanes. */
        float sc[U][GM];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            bf16x8_to_f32(kr[u], kf);
#pragma unroll
            for (int j = 0; j < GM; j++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) d = fmaf(qf[j][e], kf[e], d);
#pragma unroll
                for (int x = LPK >> 1; x > 0; x >>= 1) d += __shfl_xor_sync(0xffffffffu, d, x);
                sc[u][j] = ok[u] ? d : -INFINITY;
            }
        }
        /* Online softmax of this lane's keys, one rescale per step. */
        float c[GM];
#pragma unroll
        for (int j = 0; j < GM; j++) {
            float mx = m[j];
#pragma unroll
            for (int u = 0; u < U; u++) mx = fmaxf(mx, sc[u][j]);
            const float ref = mx == -INFINITY ? 0.0f : mx;
            c[j] = exp2f(m[j] - ref);
            m[j] = mx;
            l[j] *= c[j];
#pragma unroll
            for (int u = 0; u < U; u++) {
                sc[u][j] = exp2f(sc[u][j] - ref);
                l[j] += sc[u][j];
            }
#pragma unroll
            for (int e = 0; e < 8; e++) o[j][e] *= c[j];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float vf[8];
            bf16x8_to_f32(vr[u], vf);
#pragma unroll
            for (int j = 0; j < GM; j++)
#pragma unroll
                for (int e = 0; e < 8; e++) o[j][e] = fmaf(sc[u][j], vf[e], o[j][e]);
        }
    }

    /* Merge the warp's key slots (lanes part, part + LPK, ...). Both lanes
     * of a pair compute the same sums in the same order. */
#pragma unroll
    for (int x = LPK; x < 32; x <<= 1) {
#pragma unroll
        for (int j = 0; j < GM; j++) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m[j], x);
            const float l2 = __shfl_xor_sync(0xffffffffu, l[j], x);
            const float mx = fmaxf(m[j], m2), ref = mx == -INFINITY ? 0.0f : mx;
            const float f1 = exp2f(m[j] - ref), f2 = exp2f(m2 - ref);
            const bool low = (lane & x) == 0; /* fixed operand order for the pair */
            l[j] = low ? l[j] * f1 + l2 * f2 : l2 * f2 + l[j] * f1;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float o2 = __shfl_xor_sync(0xffffffffu, o[j][e], x);
                o[j][e] = low ? o[j][e] * f1 + o2 * f2 : o2 * f2 + o[j][e] * f1;
            }
            m[j] = mx;
        }
    }
    if (sub == 0) {
#pragma unroll
        for (int j = 0; j < GM; j++) {
#pragma unroll
            for (int e = 0; e < 8; e++) sh_o[warp][j][part * 8 + e] = o[j][e];
            if (part == 0) sh_ml[warp][j][0] = m[j], sh_ml[warp][j][1] = l[j];
        }
    }
    __syncthreads();

    /* Merge the warps in warp order and write. */
    for (int idx = threadIdx.x; idx < G * D; idx += PD_THREADS) {
        const int j = idx / D, d = idx % D;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < PD_WARPS; w++) mx = fmaxf(mx, sh_ml[w][j][0]);
        const float ref = mx == -INFINITY ? 0.0f : mx;
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < PD_WARPS; w++) {
            const float f = exp2f(sh_ml[w][j][0] - ref);
            L += sh_ml[w][j][1] * f;
            O += sh_o[w][j][d] * f;
        }
        const size_t head = (size_t)g * G + j;
        const float v = L > 0.0f ? O / L : 0.0f;
        if (a.nsplit == 1) {
            a.out[((size_t)t * a.Hq + head) * D + d] = __float2bfloat16_rn(v);
        } else {
            const size_t row = ((size_t)split * a.T + t) * a.Hq + head;
            a.part_o[row * D + d] = v;
            if (d == 0) a.part_lse[row] = L > 0.0f ? mx + log2f(L) : -INFINITY;
        }
    }
    if (a.nsplit > 1 && a.counters) pd_merge_last<D>(a, t, g, row_end);
}

/* The instance serving (D, G). */
typedef void (*pd_kernel)(pa_args);
template <int D>
static pd_kernel kernel_for_g(int G) {
    if (G <= 1) return paged_decode<D, 1>;
    if (G <= 2) return paged_decode<D, 2>;
    if (G <= 4) return paged_decode<D, 4>;
    return paged_decode<D, 8>;
}
static pd_kernel kernel_for(int D, int G) {
    switch (D) {
    case 32: return kernel_for_g<32>(G);
    case 64: return kernel_for_g<64>(G);
    case 128: return kernel_for_g<128>(G);
    default: return kernel_for_g<256>(G);
    }
}

int cuda_paged_decode_fits(int D, int G) {
    return (D == 32 || D == 64 || D == 128 || D == 256) && G >= 1 && G <= PD_MAX_G;
}

/* Splits: as many as keep every CTA of the launch resident at once (one
 * wave: no CTA waits for another to finish), with each warp given at least
 * two steps of keys per split. A batch that already fills the GPU is not
 * split. */
int cuda_paged_decode_splits(const ops_ctx *ctx, long T, int Hkv, int D, int G, int max_ctx) {
    const int per_sm = cuda_kernel_per_sm(ctx, (const void *)kernel_for(D, G), PD_THREADS, 0);
    const long slots = (long)cuda_sm_count(ctx) * per_sm;
    const long units = T * Hkv;
    const long align = cuda_paged_decode_chunk_align(D);
    long n = slots / units;
    const long most = (max_ctx + 2 * align - 1) / (2 * align);
    if (n > most) n = most;
    return n < 1 ? 1 : (int)n;
}

/* One step of keys for every warp of a CTA, at the smaller unroll. */
int cuda_paged_decode_chunk_align(int D) { return PD_WARPS * (32 / (D / 8)) * 2; }

void cuda_paged_decode_launch(ops_ctx *ctx, const pa_args *a) {
    dim3 grid((unsigned)((long)a->T * a->Hkv), (unsigned)a->nsplit);
    cuda_launch_pdl(ctx_stream(ctx), cuda_pdl_rows(a->T), kernel_for(a->D, a->G), grid, dim3(PD_THREADS), 0, *a);
}
