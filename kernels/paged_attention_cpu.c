/* paged_attention_cpu.c: the fp32 reference of ops_paged_attention: new
 * query tokens against a paged KV cache. For every query row (token, head)
 * it walks the row's visible cached positions through the block table, the
 * plain way: scores in a first pass for the maximum, exponentials and the
 * weighted sum of values in a second, accumulated in double. Nothing is
 * split or stored, so it needs no scratch and is easy to check against the
 * training attention op. */
#include <math.h>
#include <string.h>

#include "kernels/ops_cpu.h"

/* Largest head dim the fixed-size accumulator below supports. */
#define PAGED_MAX_D 1024

void cpu_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                         int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale) {
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
