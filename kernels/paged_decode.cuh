/* paged_decode.cuh: the few-queries side of ops_paged_attention on the CUDA
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
 * A programmatic dependent launch (cuda_common.cuh) in few-row steps.
 *
 * Files. The kernel is a template over head dim, query group, warps and
 * load mode: some 150 instances, which took one nvcc 126 s to compile, the
 * longest step of a CUDA build by far. This header holds the kernel;
 * paged_decode_d32.cu .. paged_decode_d256.cu each compile the instances
 * of one head dim (pd_kernel_d32 .. pd_kernel_d256), side by side in a
 * parallel build; paged_decode.cu is the host side (plan and launch). */
#ifndef DK_PAGED_DECODE_CUH
#define DK_PAGED_DECODE_CUH

#include <cooperative_groups.h>

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

/* ---- instances -------------------------------------------------------------------- */

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
/* Query heads a kernel instance holds per KV head: 5 is Qwen3-14B's
 * 40 / 8, which padded to 8 took 244 registers a thread (8 warps an SM). */
static inline int pd_g_max(int G) { return G <= 1 ? 1 : G <= 2 ? 2 : G <= 4 ? 4 : G <= 5 ? 5 : 8; }

template <int D, int LM>
static pd_kernel kernel_for_g(int G, int nw) {
    switch (pd_g_max(G)) {
    case 1: return kernel_for_nw<D, 1, LM>(nw);
    case 2: return kernel_for_nw<D, 2, LM>(nw);
    case 4: return kernel_for_nw<D, 4, LM>(nw);
    case 5: return kernel_for_nw<D, 5, LM>(nw);
    default: return kernel_for_nw<D, 8, LM>(nw);
    }
}

/* The instance for head dim D (32, 64, 128, 256), group G, nw warps and
 * load mode lm: each defined in paged_decode_d<D>.cu. */
pd_kernel pd_kernel_d32(int G, int nw, int lm);
pd_kernel pd_kernel_d64(int G, int nw, int lm);
pd_kernel pd_kernel_d128(int G, int nw, int lm);
pd_kernel pd_kernel_d256(int G, int nw, int lm);

/* The instances of head dim D for each load mode (paged_decode_d<D>.cu). */
#define PD_KERNELS_OF_DIM(D)                                                     \
    pd_kernel pd_kernel_d##D(int G, int nw, int lm) {                            \
        return lm == PD_RING   ? kernel_for_g<D, PD_RING>(G, nw)                 \
               : lm == PD_REGS ? kernel_for_g<D, PD_REGS>(G, nw)                 \
                               : kernel_for_g<D, PD_DIRECT>(G, nw);              \
    }

#endif
