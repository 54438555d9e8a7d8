/* skinny_common.cuh: what the two skinny-product kernels share
 * (matmul_skinny.cu on mma.sync, matmul_skinny_wgmma.cu on wgmma): their
 * arguments, the store of one output element (alpha, beta, one rounding)
 * and the split-K sum across a cluster's partial tiles in rank order. */
#ifndef DK_SKINNY_COMMON_CUH
#define DK_SKINNY_COMMON_CUH

#include <cooperative_groups.h>

#include "kernels/cuda_common.cuh"
#include "kernels/skinny_plan.h"

struct sk_args {
    void *c;
    const bf16 *a, *w;
    int M, N, K, kchunk, nsplit, c_f32;
    float alpha, beta;
};

/* C[r, col] = alpha * v + beta * C[r, col] (C not read where beta = 0), one
 * rounding for a bf16 C; columns past N are dropped. */
__device__ __forceinline__ void sk_store(const sk_args &p, int r, int col, float v) {
    if (col < p.N) store_alpha_beta(p.c, p.c_f32, (size_t)r * p.N + col, v, p.alpha, p.beta);
}

/* Block `split` of a cluster of p.nsplit sums rows split, split + nsplit,
 * ... (of the first `rows`) over the cluster's fp32 partial tiles `part`
 * (row stride ld floats, bn columns, 16-byte rows) in rank order, and
 * stores them at columns n0.. of C; tid of nthreads threads. The cluster
 * has synced before (every tile written) and syncs after (none is read
 * once its block has left). */
__device__ __forceinline__ void sk_cluster_sum(const sk_args &p, cooperative_groups::cluster_group &cluster,
                                               float *part, int ld, int bn, int rows, int n0, int split, int tid,
                                               int nthreads) {
    const int q4 = bn / 4, mine = (rows - split + p.nsplit - 1) / p.nsplit;
    for (int e = tid; e < mine * q4; e += nthreads) {
        const int r = split + (e / q4) * p.nsplit, c = (e % q4) * 4;
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int x = 0; x < p.nsplit; x++) {
            const float4 v = *cluster.map_shared_rank((float4 *)&part[r * ld + c], x);
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        sk_store(p, r, n0 + c, s.x), sk_store(p, r, n0 + c + 1, s.y);
        sk_store(p, r, n0 + c + 2, s.z), sk_store(p, r, n0 + c + 3, s.w);
    }
}

/* The arguments of C = alpha * A W^T + beta * C. */
static inline sk_args sk_args_make(void *c, int c_f32, const void *a, const void *b, int M, int N, int K, float alpha,
                                   float beta) {
    sk_args p;
    p.c = c, p.a = (const bf16 *)a, p.w = (const bf16 *)b;
    p.M = M, p.N = N, p.K = K, p.c_f32 = c_f32, p.alpha = alpha, p.beta = beta;
    p.kchunk = K, p.nsplit = 1;
    return p;
}

/* A benchmark's pinned plan (ops.h, ops_tuning) over the chosen *bn and
 * *nsplit (splits at most K / kt; widths 64 and 128, and where wide (the
 * wgmma kernel) any of skinny_plan_widths), then the K slices of p: an out-of-range
 * pin aborts naming its field. */
static inline void sk_plan_finish(const ops_ctx *ctx, sk_args *p, int kt, int max_split, int wide, int *bn,
                                  int *nsplit) {
    const int forced = ctx->tuning.skinny_splits, forced_bn = ctx->tuning.skinny_bn;
    if (forced < 0 || forced > max_split)
        DK_ABORT("ops_tuning.skinny_splits = %d: expected 0 (chosen) or a count 1..%d", forced, max_split);
    int ok = forced_bn == 0 || forced_bn == 64 || forced_bn == 128;
    for (int i = 0; wide && i < SKINNY_PLAN_WIDTHS; i++) ok |= forced_bn == skinny_plan_widths[i];
    if (!ok)
        DK_ABORT("ops_tuning.skinny_bn = %d: expected 0 (chosen), 64 or 128%s", forced_bn,
                 wide ? " (96, 192 or 256 on the wgmma kernel)" : "");
    if (forced) *nsplit = forced < p->K / kt ? forced : p->K / kt;
    if (forced_bn) *bn = forced_bn;
    p->kchunk = split_chunk(p->K, kt, nsplit);
    p->nsplit = *nsplit;
}

#endif
