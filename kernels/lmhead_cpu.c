/* lmhead_cpu.c: the fp32 reference of the fused lm head (ops_lmhead_forward /
 * _backward in ops.h): per-token logprob of the target, entropy and
 * logsumexp of z = (h W^T) * inv_temp, computed over vocabulary chunks so the
 * T x V logits are never held at once (V is 151936 for Qwen).
 *
 * The forward walks blocks of up to 64 tokens; for each block it computes one
 * chunk of logits at a time with an sgemm into ctx->scratch and folds it into
 * two running statistics per token, kept in double on the stack:
 *   l = logsumexp(z_seen),  a = sum_j p_j log p_j with p = softmax(z_seen)
 * (a is minus the entropy of the seen columns). Two partial sets merge exactly:
 *   l = logaddexp(l1, l2),  w_k = exp(l_k - l),  a = sum_k w_k (a_k + l_k - l).
 * Keeping a relative to l, rather than sum p z, avoids the cancellation of
 * lse - sum p z when logits are large and the entropy small; keeping both in
 * double means thousands of small chunks lose no more than one big one.
 *
 * The backward recomputes the logits of all T tokens one chunk at a time and
 * forms
 *   dz_j = dlogprob (onehot_j - p_j) + dentropy * (-p_j (log p_j + H)),
 * times inv_temp for the chain rule, then dh = dz W (overwrite) and
 * dW += dz^T h, one sgemm each per chunk.
 *
 * With keep (T x V floats) the forward also stores each chunk's logits
 * there and the backward copies them back instead of recomputing them: the
 * same numbers in the same order, so both ways give the same bits. The
 * backward leaves dz in keep, as the GPU's does: kept logits serve one
 * backward.
 *
 * Tokens with target < 0 are masked: logprob 0 in the forward (entropy and
 * lse are still computed) and no gradient at all, through neither logprob nor
 * entropy, in the backward. Both directions ask for the scratch ops.h
 * promises, T x min(chunk, V) floats. */
#include <math.h>
#include <string.h>

#include "kernels/ops_cpu.h"

/* After ops_cpu.h: cblas.h pulls in <complex.h>, whose macro I would clash
 * with the parameters named I in ops.h. */
#include <cblas.h>

/* Tokens per forward block: their running statistics live on the stack. */
#define LMHEAD_TBLOCK 64

static void lmhead_check(const ops_ctx *ctx, const int32_t *target, int T, int C, int V, int chunk,
                         const char *op) {
    if (T < 0 || C <= 0 || V <= 0 || chunk <= 0)
        DK_ABORT("%s: bad shape T=%d C=%d V=%d chunk=%d", op, T, C, V, chunk);
    size_t cols = chunk < V ? (size_t)chunk : (size_t)V;
    size_t need = (size_t)T * cols * sizeof(float);
    if (need > ctx->scratch_size)
        DK_ABORT("%s: scratch holds %zu bytes, needs %zu (T=%d x chunk=%zu floats)", op, ctx->scratch_size, need,
                 T, cols);
    for (int t = 0; t < T; t++)
        if (target[t] >= V) DK_ABORT("%s: target[%d] = %d is outside the vocabulary of %d", op, t, target[t], V);
}

/* Logits of columns c0 .. c0+n-1 for T tokens: Z[T, n] = (h W_c^T) * inv_temp. */
static void lmhead_chunk_logits(float *Z, const float *h, const float *W, int T, int C, int c0, int n,
                                float inv_temp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, C, inv_temp, h, C, W + (size_t)c0 * C, C, 0.0f, Z,
                n);
}

/* Rows r of a chunk's logits (Z, row stride n) to or from the kept [T, V]
 * logits (row stride V, columns c0 ..): to_keep 1 stores, 0 loads. */
static void keep_copy(float *keep, float *Z, int rows, int V, int c0, int n, int to_keep) {
    for (int r = 0; r < rows; r++) {
        float *k = keep + (size_t)r * V + c0, *z = Z + (size_t)r * n;
        memcpy(to_keep ? k : z, to_keep ? z : k, (size_t)n * sizeof(float));
    }
}

void cpu_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                        const int32_t *target, int T, int C, int V, float inv_temp, int chunk, float *keep) {
    lmhead_check(ctx, target, T, C, V, chunk, "lmhead_forward");
    float *Z = ctx->scratch;
    for (int t0 = 0; t0 < T; t0 += LMHEAD_TBLOCK) {
        int B = t0 + LMHEAD_TBLOCK < T ? LMHEAD_TBLOCK : T - t0;
        const float *hb = (const float *)h + (size_t)t0 * C;
        double run_l[LMHEAD_TBLOCK], run_a[LMHEAD_TBLOCK], z_target[LMHEAD_TBLOCK];
        for (int c0 = 0; c0 < V; c0 += chunk) {
            int n = c0 + chunk < V ? chunk : V - c0;
            lmhead_chunk_logits(Z, hb, W, B, C, c0, n, inv_temp);
            if (keep) keep_copy(keep + (size_t)t0 * V, Z, B, V, c0, n, 1);
            for (int r = 0; r < B; r++) {
                const float *z = Z + (size_t)r * n;
                /* Statistics of this chunk alone. */
                float m = z[0];
                for (int j = 1; j < n; j++) m = z[j] > m ? z[j] : m;
                double sum = 0.0, zsum = 0.0; /* sum e^(z-m), sum e^(z-m) (z-m) */
                for (int j = 0; j < n; j++) {
                    double d = (double)z[j] - m, e = exp(d);
                    sum += e;
                    zsum += e * d;
                }
                double l2 = m + log(sum);
                double a2 = zsum / sum - log(sum); /* sum p (z - l2) over the chunk */
                if (c0 == 0) {
                    run_l[r] = l2;
                    run_a[r] = a2;
                } else {
                    double l1 = run_l[r];
                    double l = l1 > l2 ? l1 + log1p(exp(l2 - l1)) : l2 + log1p(exp(l1 - l2));
                    run_a[r] = exp(l1 - l) * (run_a[r] + l1 - l) + exp(l2 - l) * (a2 + l2 - l);
                    run_l[r] = l;
                }
                int tg = target[t0 + r];
                if (tg >= c0 && tg < c0 + n) z_target[r] = z[tg - c0];
            }
        }
        for (int r = 0; r < B; r++) {
            int t = t0 + r;
            lse[t] = (float)run_l[r];
            logprob[t] = target[t] >= 0 ? (float)(z_target[r] - run_l[r]) : 0.0f;
            if (entropy) entropy[t] = (float)-run_a[r];
        }
    }
}

void cpu_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                         const void *h, const void *W, const int32_t *target, const float *lse,
                         const float *entropy, int T, int C, int V, float inv_temp, int chunk, float *keep) {
    lmhead_check(ctx, target, T, C, V, chunk, "lmhead_backward");
    if (dentropy && !entropy) DK_ABORT("lmhead_backward: dentropy given without the forward's entropy");
    if (T == 0) return;
    float *Z = ctx->scratch;
    for (int c0 = 0; c0 < V; c0 += chunk) {
        int n = c0 + chunk < V ? chunk : V - c0;
        if (keep) keep_copy(keep, Z, T, V, c0, n, 0);
        else lmhead_chunk_logits(Z, h, W, T, C, c0, n, inv_temp);
        /* Turn the logits into dL/d(h W^T) in place. */
        for (int t = 0; t < T; t++) {
            float *z = Z + (size_t)t * n;
            int tg = target[t];
            if (tg < 0) {
                for (int j = 0; j < n; j++) z[j] = 0.0f;
                continue;
            }
            float glp = dlogprob[t], gent = dentropy ? dentropy[t] : 0.0f;
            float l = lse[t], H = dentropy ? entropy[t] : 0.0f;
            for (int j = 0; j < n; j++) {
                float logp = z[j] - l, p = expf(logp);
                float dz = -glp * p;
                if (dentropy) dz -= gent * p * (logp + H);
                z[j] = dz * inv_temp;
            }
            if (tg >= c0 && tg < c0 + n) z[tg - c0] += glp * inv_temp;
        }
        if (keep) keep_copy(keep, Z, T, V, c0, n, 1); /* spent, as on the GPU, whose backward leaves dz there */
        const float *Wc = (const float *)W + (size_t)c0 * C;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, C, n, 1.0f, Z, n, Wc, C, c0 == 0 ? 0.0f : 1.0f,
                    dh, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, C, T, 1.0f, Z, n, h, C, 1.0f, dW + (size_t)c0 * C,
                    C);
    }
}
