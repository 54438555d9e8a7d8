/* attention_cpu.c: the fp32 reference of causal GQA attention over packed
 * variable-length sequences (ops_attention_forward / _backward in ops.h).
 *
 * Work is done per (sequence, query head, block of query rows). A block of B
 * query rows i0..i1-1 only sees keys 0..i1-1 of its own sequence (causal), so
 * its scores are a [B, i1] matrix that lives in ctx->scratch; the T x T score
 * matrix of a long sequence is never held at once. The block size is fixed,
 * not derived from the scratch size, so results do not depend on how much
 * scratch the caller happened to give.
 *
 * The backward recomputes the probabilities from the saved logsumexp, the way
 * flash attention does, instead of keeping them from the forward:
 *   P = exp(scale * q k^T - lse),  dP = dout v^T,  D_i = dout_i . out_i,
 *   dS = P * (dP - D_i),  dq = scale * dS k,  dk += scale * dS^T q,  dv += P^T dout.
 * Query heads of one GQA group add into the same dk / dv rows, in head order,
 * so the result is deterministic. Matmuls go through OpenBLAS on strided views
 * of the [T, H, D] buffers (leading dimension H * D). */
#include <math.h>
#include <string.h>

#include "kernels/ops_cpu.h"

/* After ops_cpu.h: cblas.h pulls in <complex.h>, whose macro I would clash
 * with the parameters named I in ops.h. */
#include <cblas.h>

/* Query rows per block: big enough for efficient sgemm calls, small enough
 * that the scratch is a thin strip (ATTN_QBLOCK x sequence length). */
#define ATTN_QBLOCK 64

/* Checks cu_seqlens and returns the longest sequence; aborts on a layout that
 * would make the op read or write out of bounds. */
static int attn_check_seqlens(const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D) {
    if (n_seqs < 0 || T < 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || Hq % Hkv != 0)
        DK_ABORT("attention: bad shape n_seqs=%d T=%d Hq=%d Hkv=%d D=%d (need Hq %% Hkv == 0)", n_seqs, T, Hq,
                 Hkv, D);
    if (n_seqs > 0 && cu_seqlens[0] != 0) DK_ABORT("attention: cu_seqlens[0] = %d, must be 0", cu_seqlens[0]);
    int max_len = 0;
    for (int s = 0; s < n_seqs; s++) {
        int len = cu_seqlens[s + 1] - cu_seqlens[s];
        if (len < 0 || cu_seqlens[s + 1] > T)
            DK_ABORT("attention: cu_seqlens[%d..%d] = %d..%d is not an increasing range inside T = %d", s, s + 1,
                     cu_seqlens[s], cu_seqlens[s + 1], T);
        if (len > max_len) max_len = len;
    }
    return max_len;
}

/* Floats of scratch one (sequence, head, block) step needs: `strips` [B, L]
 * matrices for the longest sequence L. */
static void attn_check_scratch(const ops_ctx *ctx, int max_len, int strips, const char *op) {
    size_t rows = max_len < ATTN_QBLOCK ? (size_t)max_len : ATTN_QBLOCK;
    size_t need = (size_t)strips * rows * (size_t)max_len * sizeof(float);
    if (need > ctx->scratch_size)
        DK_ABORT("%s: scratch holds %zu bytes, needs %zu (%d x %zu x %d floats for the longest sequence of %d "
                 "tokens)",
                 op, ctx->scratch_size, need, strips, rows, max_len, max_len);
}

void cpu_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                           const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    int max_len = attn_check_seqlens(cu_seqlens, n_seqs, T, Hq, Hkv, D);
    attn_check_scratch(ctx, max_len, 1, "attention_forward");
    const float *Q = q, *K = k, *V = v;
    float *O = out;
    float *S = ctx->scratch; /* [B, n] scores, then probabilities */
    const int ldq = Hq * D, ldk = Hkv * D, group = Hq / Hkv;

    /* Tokens after the last sequence (padding of a packed batch) belong to no
     * sequence: they get a zero output and lse 0 rather than stale memory. */
    int covered = n_seqs > 0 ? cu_seqlens[n_seqs] : 0;
    memset(O + (size_t)covered * ldq, 0, (size_t)(T - covered) * ldq * sizeof(float));
    for (int h = 0; h < Hq; h++)
        for (int t = covered; t < T; t++) lse[(size_t)h * T + t] = 0.0f;

    for (int s = 0; s < n_seqs; s++) {
        int off = cu_seqlens[s], L = cu_seqlens[s + 1] - off;
        for (int h = 0; h < Hq; h++) {
            int g = h / group;
            const float *Ks = K + (size_t)off * ldk + (size_t)g * D;
            const float *Vs = V + (size_t)off * ldk + (size_t)g * D;
            for (int i0 = 0; i0 < L; i0 += ATTN_QBLOCK) {
                int i1 = i0 + ATTN_QBLOCK < L ? i0 + ATTN_QBLOCK : L;
                int B = i1 - i0, n = i1; /* rows of this block, keys they may see */
                const float *Qb = Q + (size_t)(off + i0) * ldq + (size_t)h * D;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, D, scale, Qb, ldq, Ks, ldk, 0.0f, S, n);
                for (int r = 0; r < B; r++) {
                    int i = i0 + r; /* row i sees keys 0..i */
                    float *row = S + (size_t)r * n;
                    float m = row[0];
                    for (int j = 1; j <= i; j++) m = row[j] > m ? row[j] : m;
                    double sum = 0.0;
                    for (int j = 0; j <= i; j++) {
                        row[j] = expf(row[j] - m);
                        sum += row[j];
                    }
                    float inv = (float)(1.0 / sum);
                    for (int j = 0; j <= i; j++) row[j] *= inv;
                    for (int j = i + 1; j < n; j++) row[j] = 0.0f;
                    lse[(size_t)h * T + off + i] = m + (float)log(sum);
                }
                float *Ob = O + (size_t)(off + i0) * ldq + (size_t)h * D;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, D, n, 1.0f, S, n, Vs, ldk, 0.0f, Ob,
                            ldq);
            }
        }
    }
}

void cpu_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *out, const float *lse,
                            const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    int max_len = attn_check_seqlens(cu_seqlens, n_seqs, T, Hq, Hkv, D);
    attn_check_scratch(ctx, max_len, 2, "attention_backward");
    const float *Q = q, *K = k, *V = v, *O = out, *dO = dout;
    float *dQ = dq, *dK = dk, *dV = dv;
    const int ldq = Hq * D, ldk = Hkv * D, group = Hq / Hkv;
    size_t strip = (size_t)(max_len < ATTN_QBLOCK ? max_len : ATTN_QBLOCK) * (size_t)max_len;
    float *P = ctx->scratch;  /* [B, n] probabilities */
    float *dS = P + strip;    /* [B, n] dP, turned into dS in place */

    /* dk / dv are sums over the query heads of a group and over later query
     * rows, so they start from zero; dq rows are written block by block, and
     * padding tokens after the last sequence get zero gradients. */
    memset(dK, 0, (size_t)T * ldk * sizeof(float));
    memset(dV, 0, (size_t)T * ldk * sizeof(float));
    int covered = n_seqs > 0 ? cu_seqlens[n_seqs] : 0;
    memset(dQ + (size_t)covered * ldq, 0, (size_t)(T - covered) * ldq * sizeof(float));

    for (int s = 0; s < n_seqs; s++) {
        int off = cu_seqlens[s], L = cu_seqlens[s + 1] - off;
        for (int h = 0; h < Hq; h++) {
            int g = h / group;
            const float *Ks = K + (size_t)off * ldk + (size_t)g * D;
            const float *Vs = V + (size_t)off * ldk + (size_t)g * D;
            float *dKs = dK + (size_t)off * ldk + (size_t)g * D;
            float *dVs = dV + (size_t)off * ldk + (size_t)g * D;
            for (int i0 = 0; i0 < L; i0 += ATTN_QBLOCK) {
                int i1 = i0 + ATTN_QBLOCK < L ? i0 + ATTN_QBLOCK : L;
                int B = i1 - i0, n = i1;
                size_t row0 = (size_t)(off + i0) * ldq + (size_t)h * D;
                const float *Qb = Q + row0, *Ob = O + row0, *dOb = dO + row0;

                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, D, scale, Qb, ldq, Ks, ldk, 0.0f, P, n);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, D, 1.0f, dOb, ldq, Vs, ldk, 0.0f, dS,
                            n);
                for (int r = 0; r < B; r++) {
                    int i = i0 + r;
                    float *p = P + (size_t)r * n, *ds = dS + (size_t)r * n;
                    float l = lse[(size_t)h * T + off + i];
                    /* D_i = sum_j P_ij dP_ij, computed as dout_i . out_i. */
                    const float *o_i = Ob + (size_t)r * ldq, *do_i = dOb + (size_t)r * ldq;
                    double di = 0.0;
                    for (int d = 0; d < D; d++) di += (double)do_i[d] * o_i[d];
                    for (int j = 0; j <= i; j++) {
                        p[j] = expf(p[j] - l);
                        ds[j] = p[j] * (ds[j] - (float)di);
                    }
                    for (int j = i + 1; j < n; j++) p[j] = ds[j] = 0.0f;
                }
                float *dQb = dQ + row0;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, D, n, scale, dS, n, Ks, ldk, 0.0f, dQb,
                            ldq);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, D, B, scale, dS, n, Qb, ldq, 1.0f, dKs,
                            ldk);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, D, B, 1.0f, P, n, dOb, ldq, 1.0f, dVs,
                            ldk);
            }
        }
    }
}
