/* paged_common.cuh: what the two kernels of ops_paged_attention share: the
 * argument block, the token -> sequence lookup, and the entry points of the
 * few-queries kernel (paged_decode.cuh) that cuda_paged_attention
 * (paged_attention.cu) chooses between. */
#ifndef DK_PAGED_COMMON_CUH
#define DK_PAGED_COMMON_CUH

#include "kernels/cuda_common.cuh"

struct pa_args {
    bf16 *out;
    const bf16 *q, *kc, *vc;
    const int32_t *bt, *ctx_lens, *cu_q;
    float *part_o, *part_lse; /* [nsplit, T, Hq, D], [nsplit, T, Hq] when nsplit > 1 */
    /* The decode kernel's splits: 0 merged on chip in a cluster, 1 written
     * as partials (part_o, part_lse) for paged_attention_merge. */
    int gmerge;
    int max_pages, n_seqs, T, Hq, Hkv, G, D, page_size, chunk, nsplit;
    float scale_log2; /* scale * log2(e) */
    /* Groups that share leading pages (ops_kv_groups). The tensor-core
     * kernel's group pass (prefix = 1) serves group s (of n_seqs groups) as
     * one sequence: the queries of sequences g_first[s] .. g_end[s]-1
     * against the group's len keys (ctx_lens = the groups' len, bt =
     * theirs), with no causal limit, and writes partials always. The decode
     * kernel then starts sequence s at key skip[s] and adds the pre_n
     * partials (pre_o, pre_lse, chunk pre_chunk, laid out as part_o and
     * part_lse) into its rows' output. */
    int prefix, pre_n, pre_chunk;
    const int32_t *g_first, *g_end, *skip;
    const float *pre_o, *pre_lse;
};

/* The sequence holding token t (cu_q[s] <= t < cu_q[s + 1]); n_seqs for a
 * padding token past the last sequence. */
__device__ __forceinline__ int pa_seq_of(const pa_args &a, int t) {
    int lo = 0, hi = a.n_seqs;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (a.cu_q[mid + 1] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The query tokens q0 .. q1-1 of sequence s, or with a.prefix of group s. */
__device__ __forceinline__ void pa_q_range(const pa_args &a, int s, int *q0, int *q1) {
    if (a.prefix) *q0 = a.cu_q[a.g_first[s]], *q1 = a.cu_q[a.g_end[s]];
    else *q0 = a.cu_q[s], *q1 = a.cu_q[s + 1];
}

/* paged_decode.cu (the host side of paged_decode.cuh): whether it serves
 * head dim D with G query heads per KV head; the warps a CTA (*nw), how
 * they load their rows (*lm: direct, next rows in registers, or a
 * shared-memory ring), how splits merge (*gmerge: 0 in a cluster, 1 by
 * paged_attention_merge) and the context splits (the return) of a launch
 * over T tokens; the multiple of keys a split's chunk is rounded to; the
 * launch itself of that plan (grid T * Hkv by a->nsplit, one cluster a
 * (token, KV head) when split and !a->gmerge). */
int cuda_paged_decode_fits(int D, int G);
int cuda_paged_decode_plan(const ops_ctx *ctx, long T, int Hkv, int D, int G, int max_ctx, int grouped, int *nw,
                           int *lm, int *gmerge);
int cuda_paged_decode_chunk_align(int D, int nw);
void cuda_paged_decode_launch(ops_ctx *ctx, const pa_args *a, int nw, int lm);

#endif
