/* paged_attention_cpu.c: the fp32 reference of ops_paged_attention: new
 * query tokens against a paged KV cache. For every query row (token, head)
 * it walks the row's visible cached positions through the block table, the
 * plain way: scores in a first pass for the maximum, exponentials and the
 * weighted sum of values in a second, accumulated in double. Nothing is
 * split or stored, so it needs no scratch and is easy to check against the
 * training attention op. Groups of sequences that share leading pages
 * (ops_kv_groups) change nothing in that sum: they are checked against
 * their contract here, so every CPU run of the generation engine checks
 * the groups it builds, and the CUDA backend's grouped reads are tested
 * against this plain one. */
#include <math.h>
#include <string.h>

#include "kernels/ops_cpu.h"

/* Largest head dim the fixed-size accumulator below supports. */
#define PAGED_MAX_D 1024

/* Aborts, naming the field, where groups break the contract of
 * ops_kv_groups (ops.h) for this call. */
static void check_groups(const ops_kv_groups *gr, const int32_t *block_table, int max_pages, const int32_t *ctx_lens,
                         const int32_t *cu_q, int n_seqs, int page_size) {
    if (gr->n < 0 || gr->n > n_seqs || gr->max_len < 0)
        DK_ABORT("ops_paged_attention: groups n = %d, max_len = %d for %d sequences", gr->n, gr->max_len, n_seqs);
    int s = 0;
    for (int j = 0; j < gr->n; j++) {
        const int a = gr->first[j], b = gr->end[j], len = gr->len[j];
        if (a < s || b <= a || b > n_seqs)
            DK_ABORT("ops_paged_attention: group %d has sequences first %d .. end %d (after %d, of %d)", j, a, b, s,
                     n_seqs);
        if (len <= 0 || len % page_size || len > gr->max_len)
            DK_ABORT("ops_paged_attention: group %d len = %d: need whole pages of %d, at most max_len = %d", j, len,
                     page_size, gr->max_len);
        for (; s < a; s++)
            if (gr->skip[s]) DK_ABORT("ops_paged_attention: sequence %d is in no group but skip = %d", s, gr->skip[s]);
        for (; s < b; s++) {
            const int nq = cu_q[s + 1] - cu_q[s];
            if (gr->skip[s] != len)
                DK_ABORT("ops_paged_attention: sequence %d of group %d has skip = %d, the group's len is %d", s, j,
                         gr->skip[s], len);
            if (len > ctx_lens[s] - nq)
                DK_ABORT("ops_paged_attention: group %d len = %d reaches sequence %d's queries (%d cached, %d new)",
                         j, len, s, ctx_lens[s], nq);
            for (int p = 0; p < len / page_size; p++)
                if (block_table[(size_t)s * max_pages + p] != gr->block_table[(size_t)j * max_pages + p])
                    DK_ABORT("ops_paged_attention: sequence %d page %d is %d, its group %d's block_table has %d", s,
                             p, block_table[(size_t)s * max_pages + p], j, gr->block_table[(size_t)j * max_pages + p]);
        }
    }
    for (; s < n_seqs; s++)
        if (gr->skip[s]) DK_ABORT("ops_paged_attention: sequence %d is in no group but skip = %d", s, gr->skip[s]);
}

void cpu_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                         int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale,
                         const ops_kv_groups *groups) {
    if (n_seqs < 0 || T < 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0 || D <= 0 || D > PAGED_MAX_D ||
        page_size <= 0 || max_pages < 0)
        DK_ABORT("ops_paged_attention: bad shape n_seqs=%d T=%d Hq=%d Hkv=%d D=%d page_size=%d max_pages=%d", n_seqs,
                 T, Hq, Hkv, D, page_size, max_pages);
    if (n_seqs > 0 && cu_q[0] != 0) DK_ABORT("ops_paged_attention: cu_q[0] = %d, must be 0", cu_q[0]);
    const float *Q = q, *Kc = k_cache, *Vc = v_cache;
    float *O = out;
    const int group = Hq / Hkv;
    const size_t row = (size_t)Hkv * D; /* one cached token: [Hkv, D] */
    double acc[PAGED_MAX_D];

    /* Rows after the last sequence's queries belong to no sequence: zero, as
     * the training attention op leaves its padding rows. */
    const int covered = n_seqs > 0 ? cu_q[n_seqs] : 0;
    if (covered < 0 || covered > T) DK_ABORT("ops_paged_attention: cu_q[%d] = %d outside 0..T = %d", n_seqs, covered, T);
    memset(O + (size_t)covered * Hq * D, 0, (size_t)(T - covered) * Hq * D * sizeof(float));

    for (int s = 0; s < n_seqs; s++) {
        const int q0 = cu_q[s], nq = cu_q[s + 1] - cu_q[s], len = ctx_lens[s];
        if (nq < 0 || cu_q[s + 1] > T || nq > len || len > max_pages * page_size)
            DK_ABORT("ops_paged_attention: sequence %d has %d queries (tokens %d..%d of T = %d) and %d cached "
                     "tokens; need queries <= cached <= max_pages * page_size = %d",
                     s, nq, q0, cu_q[s + 1] - 1, T, len, max_pages * page_size);
    }
    if (groups && groups->n > 0) check_groups(groups, block_table, max_pages, ctx_lens, cu_q, n_seqs, page_size);
    for (int s = 0; s < n_seqs; s++) {
        const int q0 = cu_q[s], nq = cu_q[s + 1] - cu_q[s], len = ctx_lens[s];
        const int32_t *pages = block_table + (size_t)s * max_pages;
        for (int p = 0; p < (len + page_size - 1) / page_size; p++)
            if (pages[p] < 0) DK_ABORT("ops_paged_attention: sequence %d page %d is %d", s, p, pages[p]);
        for (int i = 0; i < nq; i++) {
            const int last = len - nq + i; /* causal: positions 0..last */
            for (int h = 0; h < Hq; h++) {
                const int g = h / group;
                const float *qr = Q + ((size_t)(q0 + i) * Hq + h) * D;
                double m = -INFINITY;
                for (int j = 0; j <= last; j++) {
                    const float *kr = Kc + ((size_t)pages[j / page_size] * page_size + j % page_size) * row + (size_t)g * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
                    dot *= scale;
                    if (dot > m) m = dot;
                }
                double sum = 0.0;
                for (int d = 0; d < D; d++) acc[d] = 0.0;
                for (int j = 0; j <= last; j++) {
                    size_t slot = (size_t)pages[j / page_size] * page_size + j % page_size;
                    const float *kr = Kc + slot * row + (size_t)g * D, *vr = Vc + slot * row + (size_t)g * D;
                    double dot = 0.0;
                    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
                    double w = exp(dot * scale - m);
                    sum += w;
                    for (int d = 0; d < D; d++) acc[d] += w * vr[d];
                }
                float *o = O + ((size_t)(q0 + i) * Hq + h) * D;
                for (int d = 0; d < D; d++) o[d] = (float)(acc[d] / sum);
            }
        }
    }
}
