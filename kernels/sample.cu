/* sample.cu: ops_sample on the CUDA backend. One block of 1024 threads per
 * row of fp32 logits, the same rule as the CPU reference (sample_cpu.c,
 * sample_common.h), so both backends draw the same token from the same
 * logits:
 *
 *   pass 1: y = logits / T written back in place (the op may use its input
 *           as scratch), with a running (max, sum of exp) per thread and the
 *           first argmax; merged over the block in a fixed tree.
 *   greedy: the first argmax, logprob at temperature 1. Otherwise:
 *   top-k:  4 radix passes (one byte of the order-preserving key at a time)
 *           with integer shared-memory histograms find the k-th largest key;
 *   top-p:  one pass sums the fixed-point masses of the kept tokens, then 4
 *           radix passes with mass-weighted histograms find the nucleus
 *           threshold. Integer atomics add the same numbers in any order, so
 *           the selection is deterministic;
 *   draw:   the exponential race over the kept tokens, argmax with the lower
 *           index winning ties.
 * A row without top-k and top-p (or a greedy one) needs no whole-row
 * selection: when the vocabulary is longer than SAMPLE_CHUNK, its pass 1 and
 * draw run as one pass split over slices of SAMPLE_CHUNK logits, a warp
 * each (sample_slices: 149 warps for a 151,936-token vocabulary instead of
 * one block, which took 130 us per step on an H200), and sample_rows merges
 * the slices' (max, sum) in an order fixed by V. The slices are fixed by V
 * alone, so a row's logprob does not depend on the rows sampled beside it;
 * the drawn token is the same as the one-block path's (the race and the
 * argmax keep the same winner under any split, and a slice races exactly
 * the tokens that could win it), and the logits are not rewritten. */
#include <math.h>

#include "kernels/cuda_common.cuh"
#include "kernels/sample_common.h"

#define SAMPLE_THREADS 1024

struct arg_best {
    float v;
    int i;
};

/* a better than b: larger value, or equal value and lower index. */
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && (unsigned)ia < (unsigned)ib);
}

/* Block-wide argmax in a fixed tree; every thread gets the winner. */
__device__ arg_best block_argmax(float v, int i, float *sv, int *si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) v = ov, i = oi;
    }
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
        i = lane < (int)(blockDim.x >> 5) ? si[lane] : -1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, v, o);
            int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (better(ov, oi, v, i)) v = ov, i = oi;
        }
        if (lane == 0) sv[0] = v, si[0] = i;
    }
    __syncthreads();
    arg_best r = {sv[0], si[0]};
    __syncthreads();
    return r;
}

/* The largest key v with sum over {key >= v, key >= floor_key} of the
 * weights >= target: weight 1 (by_mass = 0) or the fixed-point mass. */
__device__ uint32_t block_radix_select(const float *y, int V, float m, int by_mass, uint32_t floor_key,
                                       unsigned long long target, unsigned long long *hist, uint32_t *sh) {
    uint32_t prefix = 0, mask = 0;
    unsigned long long above = 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (threadIdx.x < 256) hist[threadIdx.x] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const uint32_t key = sample_float_key(y[i]);
            if (key < floor_key || (key & mask) != prefix) continue;
            const unsigned long long w = by_mass ? sample_mass(expf(y[i] - m)) : 1ull;
            atomicAdd(&hist[(key >> shift) & 255u], w);
        }
        __syncthreads();
        if (warp == 0) {
            /* Lane l owns bins 255 - 8l down to 248 - 8l; scan from the top. */
            unsigned long long local = 0;
#pragma unroll
            for (int b = 0; b < 8; b++) local += hist[255 - 8 * lane - b];
            unsigned long long incl = local;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                unsigned long long n = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += n;
            }
            const unsigned long long excl = incl - local;
            const unsigned hit = __ballot_sync(0xffffffffu, above + incl >= target);
            const int l = hit ? __ffs(hit) - 1 : 31;
            if (lane == l) {
                unsigned long long acc = above + excl;
                int d = 255 - 8 * lane;
                for (int b = 0; b < 7; b++, d--) {
                    if (acc + hist[d] >= target) break;
                    acc += hist[d];
                }
                sh[0] = (uint32_t)d;
                sh[1] = (uint32_t)(acc & 0xffffffffu);
                sh[2] = (uint32_t)(acc >> 32);
            }
        }
        __syncthreads();
        prefix |= sh[0] << shift;
        mask |= 255u << shift;
        above = ((unsigned long long)sh[2] << 32) | sh[1];
        __syncthreads();
    }
    return prefix;
}

/* A plain row is cut into slices of SAMPLE_CHUNK logits, one warp each (32
 * a lane, requested all at once), 149 for a 151,936-token vocabulary. A
 * slice is reduced inside its warp only (lane order, then a fixed xor
 * tree), so a warp's result depends on its slice alone, never on the block
 * it ran in or on the rows beside it. One block of 256 threads a slice of
 * 1024 took 85.6 us for 64 rows on an H100 (0.9 TB/s of logits): three
 * block reductions a slice and, per logit, the generator and two accurate
 * logarithms of the race. */
#define SAMPLE_CHUNK 1024
#define SAMPLE_PER (SAMPLE_CHUNK / 32) /* logits a lane */
#define SAMPLE_SLICE_THREADS 128       /* four slices a block */
/* The smallest Exp(1) draw the generator gives is -log(1 - 2^-24) =
 * 5.96e-8, so a race value is at most y + 16.64: a token below the best
 * race value by more than this headroom cannot win. */
#define SAMPLE_RACE_HEADROOM 16.75f

/* One slice's share of a plain row. */
struct sample_part {
    float m, s;   /* max of the tempered logits, sum of exp(v - m) */
    float gv, rv; /* first argmax, race winner: values */
    int gi, ri;   /* and indices */
};

/* Greedy, or sampled with nothing truncated: the rows sample_slices takes. */
__device__ __forceinline__ bool sample_plain(const sample_params &p, int V) {
    return !(p.temperature > 0.0f) || (!(p.top_k > 0 && p.top_k < V) && !(p.top_p < 1.0f));
}

/* (max, sum of exp) pairs of a block merged: a warp tree, then the warps in
 * order; every thread gets the result. */
__device__ void block_max_sum(float &m, float &s, float *sm, float *ss) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
        float nm = fmaxf(m, om);
        s = (m == -INFINITY ? 0.0f : s * expf(m - nm)) + (om == -INFINITY ? 0.0f : os * expf(om - nm));
        m = nm;
    }
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -INFINITY, S = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) M = fmaxf(M, sm[w]);
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            if (sm[w] != -INFINITY) S += ss[w] * expf(sm[w] - M);
        sm[0] = M, ss[0] = S;
    }
    __syncthreads();
    m = sm[0], s = ss[0];
    __syncthreads();
}

/* The warp's best (v, i) in a fixed xor tree, every lane getting it; an
 * unset entry (i < 0) loses to any set one. */
__device__ __forceinline__ void warp_best(float &v, int &i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) v = ov, i = oi;
    }
}

/* Token i's race value y_i - log(E_i), as sample_common.h defines it and
 * sample_cpu.c computes it. */
__device__ __forceinline__ float race_value(uint64_t key, int i, float v) {
    const float e = -logf(sample_uniform(key, (uint32_t)i));
    return v - logf(e);
}

/* Whether token i (tempered logit v, uniform u) could have a race value of
 * R or more, as race_value computes it: never false where it does, so a
 * token it rejects cannot win against R. r >= R needs log E <= v - R (+ the
 * rounding of the subtraction and the logarithm: delta), so E <= exp(v - R
 * + delta) (+ the error of logf: C), so u >= exp(-C). Both exponentials
 * are ex2.approx, with relative margins of 1e-5 above their errors (2^-22
 * and the rounding of their arguments). */
__device__ __forceinline__ bool race_may_reach(float u, float v, float R) {
    const float delta = 1e-3f + fabsf(R) * 1e-6f;
    const float C = fast_exp2((v - R + delta) * LOG2E_F) * (1.0f + 1e-5f);
    return u >= fast_exp2(-C * LOG2E_F) * (1.0f - 1e-5f);
}

/* Warp w of the grid takes slice w % nb of row w / nb: the running (max,
 * sum), the first argmax of the tempered logits and the race winner, the
 * values the one-block path's pass 1 and draw compute. The race is exact
 * without two logarithms per logit: each lane first races its largest
 * logit, the warp's best of those is a bar R, and a token is raced only if
 * race_may_reach says it could reach R (the headroom rules most out before
 * their uniform is drawn); lanes race their few survivors together at the
 * end, which costs the warp the most any lane has, not their sum. */
__global__ void __launch_bounds__(SAMPLE_SLICE_THREADS)
    sample_slices(sample_part *part, const float *__restrict__ logits, const sample_params *params, int n, int V,
                  int nb) {
    /* A programmatic dependent launch at a few rows: the logits are the
     * kernel before's output. Every warp waits, the ones that leave at
     * once too: sample_rows waits for this grid only, and this grid must
     * not end before the logits are written. */
    pdl_wait();
    pdl_launch_dependents();
    const int w = (int)(blockIdx.x * (SAMPLE_SLICE_THREADS / 32) + (threadIdx.x >> 5)), lane = threadIdx.x & 31;
    const int row = w / nb, b = w - row * nb;
    if (row >= n) return;
    const sample_params p = params[row]; /* uploaded, no kernel's output */
    if (!sample_plain(p, V)) return;
    const bool greedy = !(p.temperature > 0.0f), scaled = !greedy && p.temperature != 1.0f;
    const float *y = logits + (size_t)row * V;
    const int i0 = b * SAMPLE_CHUNK + lane, end = min(V, (b + 1) * SAMPLE_CHUNK);
    float v[SAMPLE_PER];
#pragma unroll
    for (int j = 0; j < SAMPLE_PER; j++) v[j] = i0 + 32 * j < end ? y[i0 + 32 * j] : -INFINITY;
    /* Tempered as sample_cpu.c does (y / T; T = 1 leaves y as it is), the
     * lane's max and first argmax (its indices rise with j). */
    float m = -INFINITY;
    int jb = -1;
#pragma unroll
    for (int j = 0; j < SAMPLE_PER; j++) {
        if (scaled) v[j] = v[j] / p.temperature;
        if (i0 + 32 * j < end && (jb < 0 || v[j] > m)) m = v[j], jb = j;
    }
    float gv = m, M = m;
    int gi = jb >= 0 ? i0 + 32 * jb : -1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    warp_best(gv, gi);
    float s = 0.0f;
    if (M != -INFINITY) {
        const float ml = M * LOG2E_F;
#pragma unroll
        for (int j = 0; j < SAMPLE_PER; j++) s += fast_exp2(fmaf(v[j], LOG2E_F, -ml)); /* -inf: 0 */
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);

    float rv = -INFINITY;
    int ri = -1;
    if (!greedy) {
        const uint64_t key = sample_row_key(p.seed, p.counter);
        if (jb >= 0) rv = race_value(key, i0 + 32 * jb, m), ri = i0 + 32 * jb;
        float R = rv;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) R = fmaxf(R, __shfl_xor_sync(0xffffffffu, R, o));
        uint32_t todo = 0;
#pragma unroll
        for (int j = 0; j < SAMPLE_PER; j++) {
            const int i = i0 + 32 * j;
            if (i >= end || j == jb) continue;
            if (R != -INFINITY && v[j] < R - SAMPLE_RACE_HEADROOM) continue;
            if (R == -INFINITY || race_may_reach(sample_uniform(key, (uint32_t)i), v[j], R)) todo |= 1u << j;
        }
        while (todo) {
            const int j = __ffs(todo) - 1, i = i0 + 32 * j;
            todo &= todo - 1;
            const float x = scaled ? y[i] / p.temperature : y[i]; /* v[j], which registers cannot index */
            const float r = race_value(key, i, x);
            if (ri < 0 || better(r, i, rv, ri)) rv = r, ri = i;
        }
        warp_best(rv, ri);
    }
    if (lane == 0) part[(size_t)row * nb + b] = {M, s, gv, rv, gi, ri};
}

/* parts: sample_slices' output for the plain rows (nb slices each), or NULL
 * when every row takes the one-block path. */
__global__ void __launch_bounds__(SAMPLE_THREADS) sample_rows(int32_t *tokens, float *logprob, float *logits,
                                                              const sample_params *params, int V,
                                                              const sample_part *parts, int nb) {
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ float sm[32], ss[32];
    __shared__ unsigned long long hist[256];
    __shared__ unsigned long long tot[32];
    __shared__ uint32_t sh[4];
    const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    pdl_wait(); /* parts are the kernel before's output */
    const sample_params p = params[row];
    float *y = logits + (size_t)row * V;
    const bool greedy = !(p.temperature > 0.0f);
    if (parts && sample_plain(p, V)) {
        /* The first warp merges the slices: lane l takes slices l, l + 32,
         * ... in order, then the lanes merge in a fixed tree (an order fixed
         * by V alone). One thread walking 149 slices took 3 us. */
        if (warp == 0) {
            const sample_part *q = parts + (size_t)row * nb;
            float M = -INFINITY, S = 0.0f, gv = -INFINITY, rv = -INFINITY;
            int gi = -1, ri = -1;
            auto merge = [&](float m, float s, float pgv, int pgi, float prv, int pri) {
                if (m != -INFINITY) {
                    const float nm = fmaxf(M, m);
                    S = (M == -INFINITY ? 0.0f : S * expf(M - nm)) + s * expf(m - nm);
                    M = nm;
                }
                if (pgi >= 0 && (gi < 0 || better(pgv, pgi, gv, gi))) gv = pgv, gi = pgi;
                if (pri >= 0 && (ri < 0 || better(prv, pri, rv, ri))) rv = prv, ri = pri;
            };
            for (int b = lane; b < nb; b += 32) merge(q[b].m, q[b].s, q[b].gv, q[b].gi, q[b].rv, q[b].ri);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float om = __shfl_xor_sync(0xffffffffu, M, o), os = __shfl_xor_sync(0xffffffffu, S, o);
                const float ogv = __shfl_xor_sync(0xffffffffu, gv, o), orv = __shfl_xor_sync(0xffffffffu, rv, o);
                const int ogi = __shfl_xor_sync(0xffffffffu, gi, o), ori = __shfl_xor_sync(0xffffffffu, ri, o);
                merge(om, os, ogv, ogi, orv, ori);
            }
            if (lane == 0) {
                const int t = greedy ? gi : ri;
                tokens[row] = t;
                logprob[row] = (greedy ? y[t] : y[t] / p.temperature) - (M + logf(S));
            }
        }
        return;
    }

    /* Pass 1: tempered logits in place, running max and sum, first argmax. */
    float m = -INFINITY, s = 0.0f, bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = y[i];
        if (!greedy) v = v / p.temperature, y[i] = v;
        if (v > m) s = s * expf(m - v) + 1.0f, m = v;
        else if (v != -INFINITY) s += expf(v - m);
        if (better(v, i, bv, bi)) bv = v, bi = i;
    }
    block_max_sum(m, s, sm, ss);
    const float M = m, lse = M + logf(s);
    arg_best best = block_argmax(bv, bi, sv, si);

    if (!greedy) {
        uint32_t floor_key = 0;
        if (p.top_k > 0 && p.top_k < V)
            floor_key = block_radix_select(y, V, M, 0, 0, (unsigned long long)p.top_k, hist, sh);
        if (p.top_p < 1.0f) {
            unsigned long long t = 0;
            for (int i = threadIdx.x; i < V; i += blockDim.x)
                if (sample_float_key(y[i]) >= floor_key) t += sample_mass(expf(y[i] - M));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            if (lane == 0) tot[warp] = t;
            __syncthreads();
            if (threadIdx.x == 0) {
                unsigned long long total = 0;
                for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += tot[w];
                unsigned long long target = (unsigned long long)((double)p.top_p * (double)total);
                tot[0] = target < 1 ? 1 : target;
            }
            __syncthreads();
            const unsigned long long target = tot[0];
            __syncthreads();
            floor_key = block_radix_select(y, V, M, 1, floor_key, target, hist, sh);
        }
        const uint64_t key = sample_row_key(p.seed, p.counter);
        float rv = -INFINITY;
        int ri = -1;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            if (sample_float_key(y[i]) < floor_key) continue;
            const float r = race_value(key, i, y[i]);
            if (ri < 0 || better(r, i, rv, ri)) rv = r, ri = i;
        }
        best = block_argmax(rv, ri, sv, si);
    }
    if (threadIdx.x == 0) {
        tokens[row] = best.i;
        logprob[row] = y[best.i] - lse;
    }
}

extern "C" void cuda_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params,
                            int n, int V) {
    if (n < 0 || V <= 0) DK_ABORT("ops_sample: bad shape n=%d V=%d", n, V);
    if (n == 0) return;
    cudaStream_t st = ctx_stream(ctx);
    sample_part *parts = NULL;
    const int nb = (V + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
    if (nb > 1) {
        parts = (sample_part *)ctx_scratch(ctx, (size_t)n * nb * sizeof(sample_part), "ops_sample");
        const int per_block = SAMPLE_SLICE_THREADS / 32, blocks = (n * nb + per_block - 1) / per_block;
        cuda_launch_pdl(st, cuda_pdl_rows(ctx, n), sample_slices, dim3((unsigned)blocks), dim3(SAMPLE_SLICE_THREADS), 0,
                        parts, (const float *)logits, params, n, V, nb);
        CUDA_LAUNCH_CHECK();
    }
    cuda_launch_pdl(st, parts != NULL && cuda_pdl_rows(ctx, n), sample_rows, dim3((unsigned)n), dim3(SAMPLE_THREADS), 0, tokens, logprob,
                    logits, params, V, (const sample_part *)parts, nb);
}
