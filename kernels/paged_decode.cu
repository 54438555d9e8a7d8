/* paged_decode.cu: the few-queries side of ops_paged_attention on the CUDA
 * backend (decode steps: one new token per sequence). paged_attention.cu's
 * tensor-core kernel fills 16-row mma tiles with the G query heads of one
 * token (two of sixteen rows at G = 2) and needs 64 KB of shared memory per
 * CTA, so a decode batch leaves it a wave and a fraction of fat CTAs and
 * far less than the copy rate. Here the unit of work is one warp:
 *
 * A CTA of NW warps serves (token t, KV head g, split x); its warps take
 * turns over the split's keys, U rows per lane at a time. A key row of D
 * bf16 is D/8 lanes of 16-byte loads, so one warp-wide load covers
 * 32/(D/8) keys; K and V rows go straight from the pages to registers
 * (streamed, read once), no shared memory, so many small CTAs stay resident
 * and the whole grid is usually one wave. Each lane keeps an fp32 online
 * softmax for the G query heads over its own keys; the key slots of a warp
 * and then the warps are merged in a fixed order (deterministic, no
 * atomics). Unlike the tensor-core kernel P stays in fp32 for P.V.
 *
 * Splits: the nsplit CTAs of (t, g) form one thread-block cluster, and the
 * split-0 CTA merges the others' (max, sum, unnormalised output) in split
 * order through distributed shared memory and writes the output. A merge
 * through global memory (partials, a fence, an arrival counter, the last
 * CTA's reads) was a chain of L2 round trips that cost a batch-1 decode
 * layer more than the attention itself (on an H200 the op alone went from
 * 11.0 to 5.7 us at batch 1, 1k context). At most PD_MAX_SPLIT splits (the
 * largest cluster), so long contexts give each warp several steps.
 *
 * Groups of sequences that share leading pages (ops_kv_groups): the
 * tensor-core kernel of paged_attention.cu first reads each group's shared
 * keys once for all its queries (an mma tile of sequences x heads) into
 * fp32 partials; each CTA here then starts its sequence past them and adds
 * those partials into its output (pd_finish), so 16 samples of one prompt
 * read the prompt's pages once, not 16 times.
 *
 * A short batch over a long context leaves few warps an SM (batch 1 at 32k:
 * 8 KV heads x 16 splits), and a warp that loads a step's rows and then
 * waits on them spends the kernel waiting: there each warp requests its
 * next step's rows before the current step's math (PF). Measured on an H100,
 * Qwen3-1.7B shape at batch 1, 32k context: 70.3 -> 62.7 us a layer (1.91 ->
 * 2.14 TB/s of K/V); at batch 64, 640 context, where many CTAs share each
 * SM, it cost 0.9 us a layer, so it is left out there (pd_prefetch).
 *
 * Any query count per sequence is served correctly (each token has its own
 * causal end), but keys are re-read per token, so the host picks this
 * kernel only when sequences carry few query rows (see cuda_paged_attention).
 * A programmatic dependent launch (cuda_common.cuh) in few-row steps. */
#include <cooperative_groups.h>
#include <pthread.h>

#include "kernels/cuda_common.cuh"
#include "kernels/paged_common.cuh"

namespace cg = cooperative_groups;

#define PD_MAX_G 8
#define PD_MAX_SPLIT 16 /* a non-portable cluster size; 8 where the GPU refuses it */

/* Rows per lane per step: fewer for wide groups, whose q and output
 * registers would otherwise cost occupancy. */
__host__ __device__ constexpr int pd_unroll(int GM) { return GM <= 2 ? 4 : 2; }

/* Whether CTAs of nw warps (8 or 16; 4 always) fit: their warp states in
 * static shared memory, and at 16 warps (128 registers a thread) groups of
 * up to 4 heads, as wider ones spill; up to 2 where each warp also holds
 * its next rows (pf, see the kernel), as 4 then spill. */
__host__ __device__ constexpr bool pd_wide_fits(int D, int GM, int nw, bool pf) {
    return nw * GM * D * (int)sizeof(float) <= 32768 && (nw < 16 || GM <= (pf ? 2 : 4));
}

/* Row (t, head)'s output at dim d from this kernel's keys (max mx, sum L
 * and unnormalised O, log2 domain) and, where its sequence starts past a
 * group's skip shared keys, the group pass's normalised partials of those
 * keys (weights 2^lse), added in split order after the kernel's own. */
__device__ __forceinline__ float pd_finish(const pa_args &a, int skip, size_t row, int d, float mx, float L,
                                           float O) {
    if (skip > 0) {
        const int nx = min(a.pre_n, (skip + a.pre_chunk - 1) / a.pre_chunk);
        const size_t stride = (size_t)a.T * a.Hq;
        float ref = mx;
        for (int x = 0; x < nx; x++) ref = fmaxf(ref, a.pre_lse[row + x * stride]);
        if (ref == -INFINITY) ref = 0.0f;
        const float f = exp2f(mx - ref);
        L *= f, O *= f;
        for (int x = 0; x < nx; x++) {
            const float w = exp2f(a.pre_lse[row + x * stride] - ref);
            L += w;
            O = fmaf(w, a.pre_o[(row + x * stride) * a.D + d], O);
        }
    }
    return L > 0.0f ? O / L : 0.0f;
}

template <int D, int GM, int NW, bool PF>
__global__ void __launch_bounds__(NW * 32) paged_decode(pa_args a) {
    constexpr int LPK = D / 8;          /* lanes per key row */
    constexpr int KPL = 32 / LPK;       /* keys per warp-wide load */
    constexpr int U = pd_unroll(GM);    /* loads per lane per step */
    constexpr int KPS = KPL * U;        /* keys per warp step */
    __shared__ float sh_o[NW][GM][D];   /* sh_o[0] then holds the CTA's output for the cluster merge */
    __shared__ float sh_ml[NW][GM][2];
    __shared__ float cl_ml[GM][2]; /* the CTA's (max, sum) for the cluster merge */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / LPK, part = lane % LPK;
    const int t = blockIdx.x / a.Hkv, g = blockIdx.x % a.Hkv, split = blockIdx.y;
    const int G = a.G;
    /* Before pdl_wait this kernel reads only what no kernel of the step
     * writes: the step's metadata (uploaded before its first kernel) and
     * the K/V rows of earlier tokens. So the sequence lookup, the block
     * table and the first step of old keys are in flight while the kernel
     * before (qkv_to_cache) still runs; at batch 1 they are most of this
     * kernel's chain of dependent loads. */
    const int s = pa_seq_of(a, t);
    if (s >= a.n_seqs) { /* padding token: zero; the cluster (same t and g) returns as one */
        pdl_wait();
        pdl_launch_dependents();
        if (split == 0)
            for (int i = threadIdx.x; i < G * D; i += NW * 32)
                a.out[((size_t)t * a.Hq + (size_t)g * G) * D + i] = __float2bfloat16_rn(0.0f);
        return;
    }
    const int nq = a.cu_q[s + 1] - a.cu_q[s], i = t - a.cu_q[s];
    const int row_end = a.ctx_lens[s] - nq + i + 1;
    /* A sequence in a group starts past the shared keys, which the group
     * pass has read (pd_finish adds them). */
    const int skip = a.skip ? a.skip[s] : 0;
    const int k_begin = skip + split * a.chunk, k_end = min(k_begin + a.chunk, row_end);
    const int fresh = a.ctx_lens[s] - nq; /* keys from here on are this step's, written by the kernel before */
    const size_t tok_stride = (size_t)a.Hkv * D, head_off = (size_t)g * D + (size_t)part * 8;
    const int32_t *pages = a.bt + (size_t)s * a.max_pages;
    uint4 kr[U], vr[U];
    bool ok[U];
    /* A warp step's rows start at key k0: clear_rows marks which hold keys
     * and zeroes them, load_rows loads those among them in [lo, hi). */
    auto clear_rows = [&](uint4(&kx)[U], uint4(&vx)[U], bool(&okx)[U], int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            okx[u] = k0 + u * KPL + sub < k_end;
            kx[u] = vx[u] = make_uint4(0u, 0u, 0u, 0u);
        }
    };
    auto load_rows = [&](uint4(&kx)[U], uint4(&vx)[U], const bool(&okx)[U], int k0, int lo, int hi) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = k0 + u * KPL + sub;
            if (okx[u] && p >= lo && p < hi) {
                const size_t off =
                    ((size_t)pages[p / a.page_size] * a.page_size + p % a.page_size) * tok_stride + head_off;
                kx[u] = ld_stream(a.kc + off);
                vx[u] = ld_stream(a.vc + off);
            }
        }
    };
    const int k_first = k_begin + warp * KPS;
    clear_rows(kr, vr, ok, k_first);
    load_rows(kr, vr, ok, k_first, 0, fresh);

    pdl_wait(); /* q and the new tokens' K/V are the kernel before's output */
    pdl_launch_dependents();

    load_rows(kr, vr, ok, k_first, fresh, k_end);
    /* PF: the next step's rows are requested before this step's math (a
     * second set of registers), so a warp always has loads in flight; where
     * few warps share an SM (a short batch over a long context) a warp's
     * wait on each step's loads is otherwise the kernel's time. */
    uint4 kn[PF ? U : 1], vn[PF ? U : 1];
    bool okn[PF ? U : 1];

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

    for (int k0 = k_first; k0 < k_end; k0 += NW * KPS) {
        if constexpr (PF) {
            if (k0 != k_first) { /* the rows prefetched last step */
#pragma unroll
                for (int u = 0; u < U; u++) kr[u] = kn[u], vr[u] = vn[u], ok[u] = okn[u];
            }
            const int k1 = k0 + NW * KPS;
            if (k1 < k_end) {
                clear_rows(kn, vn, okn, k1);
                load_rows(kn, vn, okn, k1, 0, k_end);
            }
        } else if (k0 != k_first) { /* the first step's rows are loaded above */
            clear_rows(kr, vr, ok, k0);
            load_rows(kr, vr, ok, k0, 0, k_end);
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

    /* Merge the warps in warp order: the output, or with splits this CTA's
     * state for the cluster merge (each (j, d) is one thread's). */
    for (int idx = threadIdx.x; idx < G * D; idx += NW * 32) {
        const int j = idx / D, d = idx % D;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++) mx = fmaxf(mx, sh_ml[w][j][0]);
        const float ref = mx == -INFINITY ? 0.0f : mx;
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float f = exp2f(sh_ml[w][j][0] - ref);
            L += sh_ml[w][j][1] * f;
            O += sh_o[w][j][d] * f;
        }
        if (a.nsplit == 1) {
            const size_t row = (size_t)t * a.Hq + (size_t)g * G + j;
            a.out[row * D + d] = __float2bfloat16_rn(pd_finish(a, skip, row, d, mx, L, O));
        } else {
            sh_o[0][j][d] = O;
            if (d == 0) cl_ml[j][0] = mx, cl_ml[j][1] = L;
        }
    }
    if (a.nsplit == 1) return;

    /* The cluster merge: split 0 reads every split's state (all loads in
     * flight at once) and adds them in split order; the second barrier
     * keeps each CTA's shared memory alive until it has. */
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (split == 0) {
        for (int idx = threadIdx.x; idx < G * D; idx += NW * 32) {
            const int j = idx / D, d = idx % D;
            float ms[PD_MAX_SPLIT], ls[PD_MAX_SPLIT], os[PD_MAX_SPLIT];
#pragma unroll
            for (int x = 0; x < PD_MAX_SPLIT; x++) {
                ms[x] = -INFINITY, ls[x] = os[x] = 0.0f;
                if (x < a.nsplit) {
                    const float *rml = cluster.map_shared_rank(&cl_ml[j][0], x);
                    ms[x] = rml[0], ls[x] = rml[1];
                    os[x] = *cluster.map_shared_rank(&sh_o[0][j][d], x);
                }
            }
            float mx = -INFINITY;
#pragma unroll
            for (int x = 0; x < PD_MAX_SPLIT; x++) mx = fmaxf(mx, ms[x]);
            const float ref = mx == -INFINITY ? 0.0f : mx;
            float L = 0.0f, O = 0.0f;
#pragma unroll
            for (int x = 0; x < PD_MAX_SPLIT; x++) {
                const float f = exp2f(ms[x] - ref);
                L += ls[x] * f;
                O += os[x] * f;
            }
            const size_t row = (size_t)t * a.Hq + (size_t)g * G + j;
            a.out[row * D + d] = __float2bfloat16_rn(pd_finish(a, skip, row, d, mx, L, O));
        }
    }
    cluster.sync();
}

/* ---- host ------------------------------------------------------------------------ */

typedef void (*pd_kernel)(pa_args);

template <int D, int GM, bool PF>
static pd_kernel kernel_for_nw(int nw) {
    if constexpr (pd_wide_fits(D, GM, 16, PF)) {
        if (nw == 16) return paged_decode<D, GM, 16, PF>;
    }
    if constexpr (pd_wide_fits(D, GM, 8, PF)) {
        if (nw == 8) return paged_decode<D, GM, 8, PF>;
    }
    return paged_decode<D, GM, 4, PF>;
}
template <int D, bool PF>
static pd_kernel kernel_for_g(int G, int nw) {
    if (G <= 1) return kernel_for_nw<D, 1, PF>(nw);
    if (G <= 2) return kernel_for_nw<D, 2, PF>(nw);
    if (G <= 4) return kernel_for_nw<D, 4, PF>(nw);
    if (G <= 5) return kernel_for_nw<D, 5, PF>(nw);
    return kernel_for_nw<D, 8, PF>(nw);
}
template <bool PF>
static pd_kernel kernel_for_pf(int D, int G, int nw) {
    switch (D) {
    case 32: return kernel_for_g<32, PF>(G, nw);
    case 64: return kernel_for_g<64, PF>(G, nw);
    case 128: return kernel_for_g<128, PF>(G, nw);
    default: return kernel_for_g<256, PF>(G, nw);
    }
}
static pd_kernel kernel_for(int D, int G, int nw, int pf) {
    return pf ? kernel_for_pf<true>(D, G, nw) : kernel_for_pf<false>(D, G, nw);
}
/* Query heads a kernel instance holds per KV head: 5 is Qwen3-14B's
 * 40 / 8, which padded to 8 took 244 registers a thread (8 warps an SM). */
static int g_max(int G) { return G <= 1 ? 1 : G <= 2 ? 2 : G <= 4 ? 4 : G <= 5 ? 5 : 8; }

/* Whether a step's kernel prefetches each warp's next rows (PF above):
 * chosen where the (token, KV head) units are fewer than the SMs, so the
 * splits of a long context, not many resident CTAs, must keep the loads
 * in flight, and groups are of at most 2 heads. Wider groups lose the
 * 16-warp CTAs with it (pd_wide_fits), and Qwen3-8B (4 heads) at batch 1,
 * 8k context on an H200 read a layer in 32.4 us with it (8 warps a CTA)
 * against 31.4 without (16). ctx->tuning.decode_prefetch pins it. */
static int pd_prefetch(const ops_ctx *ctx, long T, int Hkv, int G) {
    const int forced = ctx->tuning.decode_prefetch;
    if (forced < -1 || forced > 1)
        DK_ABORT("ops_tuning.decode_prefetch = %d: expected 0 (chosen), 1 (on) or -1 (off)", forced);
    return forced ? forced > 0 : T * Hkv < cuda_sm_count(ctx) && g_max(G) <= 2;
}

int cuda_paged_decode_fits(int D, int G) {
    return (D == 32 || D == 64 || D == 128 || D == 256) && G >= 1 && G <= PD_MAX_G;
}

/* How many clusters of n CTAs (1 .. PD_MAX_SPLIT) of kernel k can be
 * resident at once: a cluster's CTAs share one GPC, so wide CTAs in large
 * clusters may fit fewer clusters than the CTA count suggests. 0 where the
 * GPU refuses that size (past the portable 8 on some). Asked once a kernel
 * and device (which also sets the kernel's non-portable attribute). */
static int pd_clusters_resident(const ops_ctx *ctx, pd_kernel k, int nw, int n) {
    static struct {
        pd_kernel k;
        int dev, resident[PD_MAX_SPLIT + 1];
    } seen[64];
    static int n_seen;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_seen && !(seen[i].k == k && seen[i].dev == ctx->gpu)) i++;
    if (i == n_seen) {
        if (n_seen == 64) DK_ABORT("paged_decode: more than 64 kernels and devices to plan for");
        seen[i].k = k, seen[i].dev = ctx->gpu;
        const int wide = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
        for (int c = 1; c <= PD_MAX_SPLIT; c++) {
            int clusters = 0;
            if (c <= 8 || wide) {
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute attr[1];
                attr[0].id = cudaLaunchAttributeClusterDimension;
                attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = c, attr[0].val.clusterDim.z = 1;
                cfg.gridDim = dim3(1, c), cfg.blockDim = dim3(nw * 32), cfg.attrs = attr, cfg.numAttrs = 1;
                if (cudaOccupancyMaxActiveClusters(&clusters, k, &cfg) != cudaSuccess) clusters = 0;
            }
            seen[i].resident[c] = clusters;
        }
        (void)cudaGetLastError(); /* a refusal above is an answer, not an error */
        n_seen++;
    }
    const int r = seen[i].resident[n];
    pthread_mutex_unlock(&lock);
    return r;
}

/* The largest cluster a kernel can be launched with: PD_MAX_SPLIT where the
 * GPU schedules such clusters of its CTAs, else the portable 8. */
static int pd_cluster_max(const ops_ctx *ctx, pd_kernel k, int nw) {
    return pd_clusters_resident(ctx, k, nw, PD_MAX_SPLIT) > 0 ? PD_MAX_SPLIT : 8;
}

/* Warps a CTA and splits: the most warps in flight that one wave holds.
 * Each split gets at least one step of keys a warp; a batch that already
 * fills the GPU is not split. A benchmark may pin the plan
 * (ctx->tuning.decode_warps and decode_splits, ops.h). */
int cuda_paged_decode_plan(const ops_ctx *ctx, long T, int Hkv, int D, int G, int max_ctx, int *nw, int *pf_out) {
    const int forced_nw = ctx->tuning.decode_warps, forced_splits = ctx->tuning.decode_splits;
    if ((forced_nw != 0 && forced_nw != 4 && forced_nw != 8 && forced_nw != 16) || forced_splits < 0)
        DK_ABORT("ops_tuning.decode_warps = %d, decode_splits = %d: expected 0, 4, 8 or 16 warps and splits >= 0",
                 forced_nw, forced_splits);
    const int pf = pd_prefetch(ctx, T, Hkv, G);
    *pf_out = pf;
    if (forced_nw == 4 || (forced_nw > 4 && pd_wide_fits(D, g_max(G), forced_nw, pf))) {
        *nw = forced_nw;
        const int cap = pd_cluster_max(ctx, kernel_for(D, G, forced_nw, pf), forced_nw);
        return forced_splits < 1 ? 1 : forced_splits > cap ? cap : forced_splits;
    }
    const long units = T * Hkv;
    int best_nw = 4, best_n = 1;
    long best_warps = -1;
    /* 8 first, so that a tie keeps the smaller CTA of the two wide ones. */
    static const int widths[] = {8, 16, 4};
    for (int wi = 0; wi < 3; wi++) {
        const int w = widths[wi];
        if (w > 4 && !pd_wide_fits(D, g_max(G), w, pf)) continue;
        const pd_kernel k = kernel_for(D, G, w, pf);
        const long slots = (long)cuda_sm_count(ctx) * cuda_kernel_per_sm(ctx, (const void *)k, w * 32, 0);
        const long step = (long)w * (32 / (D / 8)) * pd_unroll(g_max(G)); /* keys a CTA step */
        long n = slots / units;
        const long most = (max_ctx + step - 1) / step, cap = pd_cluster_max(ctx, k, w);
        if (n > most) n = most;
        if (n > cap) n = cap;
        /* Fewer splits until the clusters are resident together. */
        while (n > 1 && pd_clusters_resident(ctx, k, w, (int)n) < units) n--;
        if (n < 1) n = 1;
        const long warps = units <= slots ? units * n * w : 0; /* past one wave: ranked last */
        if (warps > best_warps) best_warps = warps, best_nw = w, best_n = (int)n;
    }
    *nw = best_nw;
    return best_n;
}

/* One step of keys for every warp of a CTA, at the smaller unroll. */
int cuda_paged_decode_chunk_align(int D, int nw) { return nw * (32 / (D / 8)) * 2; }

void cuda_paged_decode_launch(ops_ctx *ctx, const pa_args *a, int nw, int pf) {
    const pd_kernel k = kernel_for(a->D, a->G, nw, pf);
    if (a->nsplit > 1) {
        const int cap = pd_cluster_max(ctx, k, nw);
        if (a->nsplit > cap) DK_ABORT("paged_decode: %d splits exceed the cluster size %d", a->nsplit, cap);
    }
    cuda_launch_pdl_cluster(ctx_stream(ctx), cuda_pdl_rows(ctx, a->T), a->nsplit, k,
                            dim3((unsigned)((long)a->T * a->Hkv), (unsigned)a->nsplit), dim3((unsigned)nw * 32), 0, *a);
}
