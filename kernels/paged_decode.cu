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
 * order through distributed shared memory and writes the output. Where
 * clusters cannot be resident together in enough of them to fill the GPU
 * (a long context at batch 1), each CTA instead writes its normalised
 * partial and log-sum-exp, and paged_attention.cu's merge kernel adds them
 * (a.gmerge; cuda_paged_decode_plan says when). A merge
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
 * How a warp's rows reach its registers (LM, pd_load_mode):
 * - PD_DIRECT: loaded at the start of their step. Enough where many CTAs
 *   share each SM (a decode batch), as other warps' loads fill the wait.
 * - PD_REGS: the next step's rows are requested before the current step's
 *   math, into a second set of registers. A short batch over a long
 *   context leaves few warps an SM (batch 1 at 32k: 8 KV heads x 16
 *   splits), and a warp that loads a step and then waits on it spends the
 *   kernel waiting. Measured on an H100, Qwen3-1.7B shape at batch 1, 32k
 *   context: 70.3 -> 62.7 us a layer (1.91 -> 2.14 TB/s of K/V).
 * - PD_RING: each thread streams its own rows NS - 1 steps ahead through
 *   a private ring of shared memory (cp.async, one commit group a step).
 *   The loads in flight an SM are no longer bounded by registers: about
 *   160 KB where the two above hold 16-32 KB, which is what HBM needs to
 *   stream at its rate while one CTA sits on each SM. A thread reads back
 *   only the bytes it copied, so the ring needs no barrier, and rows past
 *   the split are zero-filled as the direct loads zero them: every mode
 *   does the same arithmetic and gives the same bits.
 *
 * Any query count per sequence is served correctly (each token has its own
 * causal end), but keys are re-read per token, so the host picks this
 * kernel only when sequences carry few query rows (see cuda_paged_attention).
 * A programmatic dependent launch (cuda_common.cuh) in few-row steps. */
#include <cooperative_groups.h>
#include <pthread.h>

#include "kernels/mma_common.cuh"
#include "kernels/paged_common.cuh"

namespace cg = cooperative_groups;

#define PD_MAX_G 8
#define PD_MAX_SPLIT 16 /* a non-portable cluster size; 8 where the GPU refuses it */
#define PD_DIRECT 0
#define PD_REGS 1
#define PD_RING 2
/* Shared memory of a PD_RING CTA's ring: with the warps' static merge
 * arrays (at most 33 KB) it stays under the 227 KB a CTA may have. */
#define PD_RING_BYTES (192 * 1024)

/* Rows per lane per step: fewer for wide groups, whose q and output
 * registers would otherwise cost occupancy. */
__host__ __device__ constexpr int pd_unroll(int GM) { return GM <= 2 ? 4 : 2; }

/* PD_RING: bytes of one step of a CTA's rows (K and V, U 16-byte loads of
 * each a thread), the steps the ring holds (2 to 8) and its size. */
__host__ __device__ constexpr int pd_ring_step(int GM, int NW) { return 2 * pd_unroll(GM) * NW * 32 * 16; }
__host__ __device__ constexpr int pd_ring_stages(int GM, int NW) {
    return PD_RING_BYTES / pd_ring_step(GM, NW) > 8 ? 8 : PD_RING_BYTES / pd_ring_step(GM, NW);
}
__host__ __device__ constexpr size_t pd_smem(int GM, int NW, int LM) {
    return LM == PD_RING ? (size_t)pd_ring_stages(GM, NW) * pd_ring_step(GM, NW) : 0;
}

/* Whether CTAs of nw warps (8 or 16; 4 always) fit: their warp states in
 * static shared memory, and at 16 warps (128 registers a thread) groups of
 * up to 4 heads, as wider ones spill; up to 2 where each warp also holds
 * its next rows in registers (pf: PD_REGS), as 4 then spill. */
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

extern __shared__ uint4 pd_ring[]; /* PD_RING: [NS][2U][NW * 32], each thread's own 16-byte slots */

template <int D, int GM, int NW, int LM>
__global__ void __launch_bounds__(NW * 32) paged_decode(pa_args a) {
    constexpr bool PF = LM == PD_REGS, RING = LM == PD_RING;
    constexpr int NS = pd_ring_stages(GM, NW), NT = NW * 32;
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
    /* PD_RING: slot c (K rows 0..U-1, V rows U..2U-1) of ring step st is
     * this thread's own; ring_rows copies the rows of the warp step at k0
     * that lie in [lo, hi) into step st's slots, and with zero_tail
     * zero-fills those past the split (as clear_rows zeroes them). It
     * returns whether it copied a row. */
    auto slot = [&](int st, int c) -> uint4 * { return pd_ring + ((size_t)(st * 2 * U + c) * NT + threadIdx.x); };
    auto ring_rows = [&](int st, int k0, int lo, int hi, bool zero_tail) {
        bool any = false;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = k0 + u * KPL + sub;
            if (p >= k_end) {
                if (zero_tail) cp_async16(slot(st, u), a.kc, false), cp_async16(slot(st, U + u), a.vc, false);
            } else if (p >= lo && p < hi) {
                const size_t off =
                    ((size_t)pages[p / a.page_size] * a.page_size + p % a.page_size) * tok_stride + head_off;
                cp_async16(slot(st, u), a.kc + off, true);
                cp_async16(slot(st, U + u), a.vc + off, true);
                any = true;
            }
        }
        return any;
    };
    if constexpr (RING) { /* the first NS - 1 steps of old keys, one commit group each */
#pragma unroll
        for (int j = 0; j < NS - 1; j++) {
            const int k0 = k_first + j * NW * KPS;
            if (k0 < k_end) ring_rows(j, k0, 0, fresh, true);
            cp_async_commit();
        }
    } else {
        clear_rows(kr, vr, ok, k_first);
        load_rows(kr, vr, ok, k_first, 0, fresh);
    }

    pdl_wait(); /* q and the new tokens' K/V are the kernel before's output */
    pdl_launch_dependents();

    /* PD_RING: this step's new rows among those first steps go in one more
     * group (ring_fix), which the first wait below then includes. */
    bool ring_fix = false;
    if constexpr (RING) {
#pragma unroll
        for (int j = 0; j < NS - 1; j++) {
            const int k0 = k_first + j * NW * KPS;
            if (k0 < k_end && ring_rows(j, k0, fresh, k_end, false)) ring_fix = true;
        }
        if (ring_fix) cp_async_commit();
    } else {
        load_rows(kr, vr, ok, k_first, fresh, k_end);
    }
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

    for (int k0 = k_first, step = 0; k0 < k_end; k0 += NW * KPS, step++) {
        if constexpr (RING) {
            /* Step step + NS - 1 goes into the slots read last step (their
             * values are in registers: the compiler barrier keeps those
             * reads before the copies); then this step's group is waited
             * for: all but the newest NS - 1 groups, or at the first step
             * with ring_fix everything but the group just committed. */
            asm volatile("" ::: "memory");
            const int kn0 = k0 + (NS - 1) * NW * KPS;
            if (kn0 < k_end) ring_rows((step + NS - 1) % NS, kn0, 0, k_end, true);
            cp_async_commit();
            if (ring_fix && step == 0) cp_async_wait<1>();
            else cp_async_wait<NS - 1>();
            asm volatile("" ::: "memory");
            clear_rows(kr, vr, ok, k0);
#pragma unroll
            for (int u = 0; u < U; u++) kr[u] = *slot(step % NS, u), vr[u] = *slot(step % NS, U + u);
        } else if constexpr (PF) {
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
     * state for the cluster merge or, with a.gmerge, its normalised
     * partial and log-sum-exp for paged_attention_merge (each (j, d) is one
     * thread's). */
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
        } else if (a.gmerge) {
            const size_t row = (size_t)split * a.T * a.Hq + (size_t)t * a.Hq + (size_t)g * G + j;
            a.part_o[row * D + d] = L > 0.0f ? O / L : 0.0f;
            if (d == 0) a.part_lse[row] = L > 0.0f ? mx + log2f(L) : -INFINITY;
        } else {
            sh_o[0][j][d] = O;
            if (d == 0) cl_ml[j][0] = mx, cl_ml[j][1] = L;
        }
    }
    if (a.nsplit == 1 || a.gmerge) return;

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

template <int D, int GM, int LM>
static pd_kernel kernel_for_nw(int nw) {
    if constexpr (pd_wide_fits(D, GM, 16, LM == PD_REGS)) {
        if (nw == 16) return paged_decode<D, GM, 16, LM>;
    }
    if constexpr (pd_wide_fits(D, GM, 8, LM == PD_REGS)) {
        if (nw == 8) return paged_decode<D, GM, 8, LM>;
    }
    return paged_decode<D, GM, 4, LM>;
}
template <int D, int LM>
static pd_kernel kernel_for_g(int G, int nw) {
    if (G <= 1) return kernel_for_nw<D, 1, LM>(nw);
    if (G <= 2) return kernel_for_nw<D, 2, LM>(nw);
    if (G <= 4) return kernel_for_nw<D, 4, LM>(nw);
    if (G <= 5) return kernel_for_nw<D, 5, LM>(nw);
    return kernel_for_nw<D, 8, LM>(nw);
}
template <int LM>
static pd_kernel kernel_for_lm(int D, int G, int nw) {
    switch (D) {
    case 32: return kernel_for_g<32, LM>(G, nw);
    case 64: return kernel_for_g<64, LM>(G, nw);
    case 128: return kernel_for_g<128, LM>(G, nw);
    default: return kernel_for_g<256, LM>(G, nw);
    }
}
static pd_kernel kernel_for(int D, int G, int nw, int lm) {
    return lm == PD_RING ? kernel_for_lm<PD_RING>(D, G, nw)
           : lm == PD_REGS ? kernel_for_lm<PD_REGS>(D, G, nw)
                           : kernel_for_lm<PD_DIRECT>(D, G, nw);
}
/* Query heads a kernel instance holds per KV head: 5 is Qwen3-14B's
 * 40 / 8, which padded to 8 took 244 registers a thread (8 warps an SM). */
static int g_max(int G) { return G <= 1 ? 1 : G <= 2 ? 2 : G <= 4 ? 4 : G <= 5 ? 5 : 8; }

/* Dynamic shared memory of the (G, nw, lm) instance: its ring. */
static size_t pd_smem_of(int G, int nw, int lm) { return pd_smem(g_max(G), nw, lm); }

/* How a step's kernel loads its rows (LM above): where the (token, KV
 * head) units are fewer than the SMs, so that the splits of a long
 * context, one CTA an SM, must keep the loads in flight, the next rows in
 * registers for groups of up to 2 heads, the shared-memory ring for wider
 * ones (which the second register set would cost their 16-warp CTAs);
 * direct loads where a batch fills the SMs with CTAs. Measured on an H100,
 * batch 1: Qwen3-1.7B at 32k context read a layer in 62.6 us with
 * registers, 69.3 direct, 71.9 through the ring; Qwen3-8B at 8k in 28.2 us
 * through the ring, 29.5 direct, 32.7 with registers (8 warps a CTA).
 * ctx->tuning.decode_prefetch pins it. */
static int pd_load_mode(const ops_ctx *ctx, long T, int Hkv, int G) {
    const int forced = ctx->tuning.decode_prefetch;
    if (forced < -1 || forced > 2)
        DK_ABORT("ops_tuning.decode_prefetch = %d: expected 0 (chosen), -1 (direct loads), 1 (next rows in "
                 "registers) or 2 (a shared-memory ring)",
                 forced);
    if (forced) return forced < 0 ? PD_DIRECT : forced;
    if (T * Hkv >= cuda_sm_count(ctx)) return PD_DIRECT;
    return g_max(G) <= 2 ? PD_REGS : PD_RING;
}

int cuda_paged_decode_fits(int D, int G) {
    return (D == 32 || D == 64 || D == 128 || D == 256) && G >= 1 && G <= PD_MAX_G;
}

/* How many clusters of n CTAs (1 .. PD_MAX_SPLIT) of kernel k can be
 * resident at once: a cluster's CTAs share one GPC, so wide CTAs in large
 * clusters may fit fewer clusters than the CTA count suggests. 0 where the
 * GPU refuses that size (past the portable 8 on some). Asked once a kernel
 * and device (which also sets the kernel's non-portable attribute and,
 * through cuda_kernel_per_sm, its shared-memory limit of smem bytes). */
static int pd_clusters_resident(const ops_ctx *ctx, pd_kernel k, int nw, size_t smem, int n) {
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
        cuda_kernel_per_sm(ctx, (const void *)k, nw * 32, smem);
        const int wide = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
        for (int c = 1; c <= PD_MAX_SPLIT; c++) {
            int clusters = 0;
            if (c <= 8 || wide) {
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute attr[1];
                attr[0].id = cudaLaunchAttributeClusterDimension;
                attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = c, attr[0].val.clusterDim.z = 1;
                cfg.gridDim = dim3(1, c), cfg.blockDim = dim3(nw * 32), cfg.attrs = attr, cfg.numAttrs = 1;
                cfg.dynamicSmemBytes = smem;
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
static int pd_cluster_max(const ops_ctx *ctx, pd_kernel k, int nw, size_t smem) {
    return pd_clusters_resident(ctx, k, nw, smem, PD_MAX_SPLIT) > 0 ? PD_MAX_SPLIT : 8;
}

/* Warps a CTA and splits: the most warps in flight that one wave holds.
 * Each split gets at least one step of keys a warp; a batch that already
 * fills the GPU is not split.
 *
 * Splits merged in a cluster must be resident together, one cluster a
 * (token, KV head) inside one GPC, and with one wide CTA an SM that caps
 * them well below the SMs: batch 1 on an H100 (8 KV heads, 16 warps a CTA)
 * got clusters of 9, 72 CTAs on 132 SMs, and the profile showed those SMs
 * issue-bound (65% issue slots busy, few waits on memory). So where few
 * (token, KV head) units leave the cluster plan under 3/4 of the warps a
 * wave holds and each split still has PD_GMERGE_MIN_KEYS keys, the splits
 * fill the GPU instead and write partials that paged_attention_merge adds
 * (gmerge: one more launch, no residency rule). Never with groups of
 * shared pages (grouped): their partials take the scratch, and the decode
 * kernel adds them in its own merge. A benchmark may pin the plan
 * (ctx->tuning.decode_warps, decode_splits and decode_merge, ops.h). */
#define PD_MAX_GSPLIT 64
#define PD_GMERGE_MIN_KEYS 512
int cuda_paged_decode_plan(const ops_ctx *ctx, long T, int Hkv, int D, int G, int max_ctx, int grouped, int *nw,
                           int *lm_out, int *gmerge) {
    const int forced_nw = ctx->tuning.decode_warps, forced_splits = ctx->tuning.decode_splits;
    const int forced_merge = ctx->tuning.decode_merge;
    if ((forced_nw != 0 && forced_nw != 4 && forced_nw != 8 && forced_nw != 16) || forced_splits < 0)
        DK_ABORT("ops_tuning.decode_warps = %d, decode_splits = %d: expected 0, 4, 8 or 16 warps and splits >= 0",
                 forced_nw, forced_splits);
    if (forced_merge < 0 || forced_merge > 2)
        DK_ABORT("ops_tuning.decode_merge = %d: expected 0 (chosen), 1 (in a cluster) or 2 (a second kernel)",
                 forced_merge);
    const int lm = pd_load_mode(ctx, T, Hkv, G);
    *lm_out = lm;
    if (forced_nw == 4 || (forced_nw > 4 && pd_wide_fits(D, g_max(G), forced_nw, lm == PD_REGS))) {
        *nw = forced_nw;
        const int gm = forced_merge == 2 && !grouped;
        /* Asked either way: it sets the kernel's limits for the launch. */
        const int ccap =
            pd_cluster_max(ctx, kernel_for(D, G, forced_nw, lm), forced_nw, pd_smem_of(G, forced_nw, lm));
        const int cap = gm ? PD_MAX_GSPLIT : ccap;
        const int n = forced_splits < 1 ? 1 : forced_splits > cap ? cap : forced_splits;
        *gmerge = gm && n > 1;
        return n;
    }
    const long units = T * Hkv;
    int best_nw = 4, best_n = 1, g_nw = 4, g_n = 1;
    long best_warps = -1, g_warps = -1;
    /* 8 first, so that a tie keeps the smaller CTA of the two wide ones. */
    static const int widths[] = {8, 16, 4};
    for (int wi = 0; wi < 3; wi++) {
        const int w = widths[wi];
        if (w > 4 && !pd_wide_fits(D, g_max(G), w, lm == PD_REGS)) continue;
        const pd_kernel k = kernel_for(D, G, w, lm);
        const size_t smem = pd_smem_of(G, w, lm);
        const long cap = pd_cluster_max(ctx, k, w, smem); /* first: it sets the kernel's limits */
        const long slots = (long)cuda_sm_count(ctx) * cuda_kernel_per_sm(ctx, (const void *)k, w * 32, smem);
        const long step = (long)w * (32 / (D / 8)) * pd_unroll(g_max(G)); /* keys a CTA step */
        const long most = (max_ctx + step - 1) / step;
        long n = slots / units;
        if (n > most) n = most;
        long ng = n < PD_MAX_GSPLIT ? n : PD_MAX_GSPLIT; /* the same without the cluster's rules */
        if (n > cap) n = cap;
        /* Fewer splits until the clusters are resident together. */
        while (n > 1 && pd_clusters_resident(ctx, k, w, smem, (int)n) < units) n--;
        if (n < 1) n = 1;
        if (ng < 1) ng = 1;
        const long warps = units <= slots ? units * n * w : 0; /* past one wave: ranked last */
        if (warps > best_warps) best_warps = warps, best_nw = w, best_n = (int)n;
        /* Without clusters, warps within 1/16 of each other are a tie, won
         * by the wider CTA (fewer splits to write and merge): Qwen3-1.7B
         * at batch 1, 32k context on an H100 ran a layer in 98.3 us with
         * 16 warps x 16 splits against 102.2 with 8 x 33. */
        const long gwarps = units <= slots ? units * ng * w : 0;
        const bool more = 16 * gwarps > 17 * g_warps, tie = 17 * gwarps >= 16 * g_warps && w > g_nw;
        if (g_warps < 0 || more || tie) g_warps = gwarps, g_nw = w, g_n = (int)ng;
    }
    int gm = forced_merge == 2 ||
             (forced_merge == 0 && units < cuda_sm_count(ctx) && 4 * best_warps < 3 * g_warps &&
              max_ctx / g_n >= PD_GMERGE_MIN_KEYS);
    if (grouped || g_n < 2) gm = 0;
    *gmerge = gm;
    *nw = gm ? g_nw : best_nw;
    return gm ? g_n : best_n;
}

/* One step of keys for every warp of a CTA, at the smaller unroll. */
int cuda_paged_decode_chunk_align(int D, int nw) { return nw * (32 / (D / 8)) * 2; }

/* The plan has set the kernel's limits (its shared memory, clusters past
 * 8) through pd_cluster_max; only a cluster split is checked again. */
void cuda_paged_decode_launch(ops_ctx *ctx, const pa_args *a, int nw, int lm) {
    const pd_kernel k = kernel_for(a->D, a->G, nw, lm);
    const size_t smem = pd_smem_of(a->G, nw, lm);
    if (a->nsplit > 1 && !a->gmerge) {
        const int cap = pd_cluster_max(ctx, k, nw, smem);
        if (a->nsplit > cap) DK_ABORT("paged_decode: %d splits exceed the cluster size %d", a->nsplit, cap);
    }
    cuda_launch_pdl_cluster(ctx_stream(ctx), cuda_pdl_rows(ctx, a->T), a->gmerge ? 1 : a->nsplit, k,
                            dim3((unsigned)((long)a->T * a->Hkv), (unsigned)a->nsplit), dim3((unsigned)nw * 32), smem,
                            *a);
}
