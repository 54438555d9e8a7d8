/* lmhead.cu: the fused lm head on the GPU (ops_lmhead_forward / _backward in
 * ops.h): per-token logprob of the target, entropy and logsumexp of
 * z = (h W^T) * inv_temp, one vocabulary chunk at a time, so the T x V
 * logits (151936 columns for Qwen) never exist at once.
 *
 * Forward, per chunk of n columns: cuBLASLt writes Z[T, n] = inv_temp h W_c^T
 * in fp32 (bf16 operands, fp32 accumulation) into scratch; lmh_fwd_stats, one
 * block per token, reduces the row to the chunk's (max, sum e^(z-m),
 * sum e^(z-m)(z-m)) with an online update per thread and a fixed-order tree,
 * and folds it into the running statistics that live in the output arrays
 * themselves (lse[t] holds the running logsumexp l, entropy[t] the running
 * a = sum p log p, logprob[t] the target's logit once seen). Two partial sets
 * merge exactly (as in lmhead_cpu.c):
 *   l = logaddexp(l1, l2),  a = sum_k e^(l_k - l) (a_k + l_k - l),
 * done in double per token. The last chunk turns them into logprob = z_t - l
 * (0 for masked tokens) and entropy = -a.
 *
 * Backward, per chunk: recompute Z, then lmh_bwd_dz turns it in place into
 *   dz = inv_temp (dlogprob (onehot - p) - dentropy p (log p + H))
 * stored as bf16 in the first half of each fp32 row (row stride 2n bf16), a
 * segment at a time with a barrier between reading and writing, so the bf16
 * writes only ever land on fp32 values already read. Two GEMMs follow:
 * dh32 (+)= dz W_c (fp32 accumulator, cast to bf16 dh at the end, so dh
 * is rounded once rather than once per chunk) and dW_c += dz^T h (fp32,
 * accumulated as ops.h asks). Masked tokens get dz = 0: no gradient at all.
 *
 * Scratch: the forward needs T x min(chunk, V) floats, as ops.h says. The
 * backward also keeps the fp32 dh accumulator there; when T x (C + chunk)
 * floats do not fit it walks the tokens in blocks of Tb rows (dW then sums
 * the blocks in order), so the same ops.h scratch still suffices. The result
 * is deterministic for a given (T, C, V, chunk, scratch size).
 *
 * With keep (T x V floats, ops.h) the forward is one chunk of all V columns
 * written into keep, and the backward skips the recompute: dz in place over
 * keep, then dh = dz W straight to bf16 (one GEMM over all of V, rounded once)
 * and dW += dz^T h. Three GEMMs instead of four and no scratch, for 4 T V
 * bytes of memory the caller chose to spend.
 *
 * On sm_90 (ops_tuning.lmhead_kernel 0 or 1) both passes without keep take
 * lmhead_wgmma.cu's kernel instead, which reduces the logits in registers:
 * the forward is one launch over all V columns plus a merge, with its
 * partial statistics in scratch; the backward writes bf16 dz straight from
 * the recomputed logits (lmh_backward_blocks below), then the same two
 * GEMMs. What follows describes the cuBLASLt path the other cases take.
 *
 * The GEMMs go through cuBLASLt directly rather than ops_matmul because dz
 * has a row stride of 2n: cuBLASLt takes leading dimensions, ops_matmul does
 * not. The heuristic's choice is cached per shape (it costs tens of
 * microseconds, a backward makes three GEMMs per chunk). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/lmhead_common.cuh"

#define LMH_THREADS 256
#define LMH_EPT 8 /* fp32 values per thread per segment of the in-place dz pass */

/* ---- cuBLASLt with leading dimensions ----------------------------------------------- */

typedef struct {
    int used;
    int gpu, M, N, K, ta, tb, lda, ldb, ldc, c_f32;
    unsigned al_a, al_b, al_c;
    cublasLtMatmulAlgo_t algo;
} lmh_plan;

#define LMH_PLANS 64

static lmh_plan lmh_plans[LMH_PLANS];
static pthread_mutex_t lmh_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned lmh_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    unsigned al = 16;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

static int lmh_plan_eq(const lmh_plan *a, const lmh_plan *b) {
    return a->gpu == b->gpu && a->M == b->M && a->N == b->N && a->K == b->K && a->ta == b->ta && a->tb == b->tb &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->c_f32 == b->c_f32 && a->al_a == b->al_a &&
           a->al_b == b->al_b && a->al_c == b->al_c;
}

/* Row-major C[M, N] = alpha op(A) op(B) + beta C with row strides lda, ldb,
 * ldc; A, B bf16, C bf16 or fp32. Column-major cuBLASLt computes
 * C^T = op(B)^T op(A)^T: our B is its first operand. */
static void lmh_gemm(ops_ctx *ctx, int M, int N, int K, const bf16 *A, int lda, int ta, const bf16 *B, int ldb,
                     int tb, void *C, int c_f32, int ldc, float alpha, float beta) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    /* Stored column-major shapes: row-major [R, S] with stride ld is
     * column-major [S, R] with the same ld. */
    if (tb) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, ldb));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, ldb));
    if (ta) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, M, K, lda));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, c_f32 ? CUDA_R_32F : CUDA_R_16BF, N, M, ldc));

    lmh_plan key;
    memset(&key, 0, sizeof key);
    key.gpu = ctx->gpu, key.M = M, key.N = N, key.K = K, key.ta = ta, key.tb = tb;
    key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.c_f32 = c_f32;
    key.al_a = lmh_align(A), key.al_b = lmh_align(B), key.al_c = lmh_align(C);

    cublasLtMatmulAlgo_t algo;
    int cached = 0;
    pthread_mutex_lock(&lmh_lock);
    for (int i = 0; i < LMH_PLANS && lmh_plans[i].used; i++)
        if (lmh_plan_eq(&lmh_plans[i], &key)) {
            algo = lmh_plans[i].algo;
            cached = 1;
            break;
        }
    pthread_mutex_unlock(&lmh_lock);
    if (!cached) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        size_t ws = ctx->blaslt_ws_size;
        uint32_t al_first = key.al_b, al_second = key.al_a, al_c = key.al_c;
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_first,
                                                          sizeof al_first));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                          &al_second, sizeof al_second));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->blaslt, op, la, lb, lc, lc, pref, 1, &res,
                                                    &found));
        cublasLtMatmulPreferenceDestroy(pref);
        if (found < 1)
            DK_ABORT("lmhead: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d lda=%d ldb=%d "
                     "ldc=%d c_f32=%d",
                     M, N, K, ta, tb, lda, ldb, ldc, c_f32);
        algo = res.algo;
        pthread_mutex_lock(&lmh_lock);
        for (int i = 0; i < LMH_PLANS; i++)
            if (!lmh_plans[i].used) {
                lmh_plans[i] = key;
                lmh_plans[i].algo = algo;
                lmh_plans[i].used = 1;
                break;
            } else if (lmh_plan_eq(&lmh_plans[i], &key)) {
                break;
            }
        pthread_mutex_unlock(&lmh_lock);
    }
    CUBLAS_CHECK(cublasLtMatmul((cublasLtHandle_t)ctx->blaslt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &algo,
                                ctx->blaslt_ws, ctx->blaslt_ws_size, ctx_stream(ctx)));
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}

/* ---- forward statistics ------------------------------------------------------------ */

/* One block per token: folds chunk [c0, c0 + n) of its logits into the
 * running statistics; the last chunk writes the final values. */
__global__ void __launch_bounds__(LMH_THREADS)
    lmh_fwd_stats(const float *__restrict__ Z, int n, int c0, int V, const int32_t *__restrict__ target,
                  float *__restrict__ lse, float *__restrict__ entropy, float *__restrict__ logprob, int first,
                  int last) {
    __shared__ lmh_stat sh[LMH_THREADS / 32];
    const int t = blockIdx.x, tid = threadIdx.x;
    const float *z = Z + (size_t)t * n;
    lmh_stat st = {-INFINITY, 0.0f, 0.0f};
    for (int j = tid; j < n; j += LMH_THREADS) {
        const float x = z[j];
        if (st.s == 0.0f) {
            st.m = x, st.s = 1.0f, st.a = 0.0f;
        } else if (x > st.m) {
            const float d = st.m - x, c = __expf(d);
            st.a = c * (st.a + st.s * d);
            st.s = c * st.s + 1.0f;
            st.m = x;
        } else {
            const float d = x - st.m, e = __expf(d);
            st.s += e;
            st.a = fmaf(e, d, st.a);
        }
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) st = lmh_merge(st, lmh_shfl(st, o));
    if ((tid & 31) == 0) sh[tid >> 5] = st;
    __syncthreads();
    if (tid != 0) return;
    st = sh[0];
    for (int w = 1; w < LMH_THREADS / 32; w++) st = lmh_merge(st, sh[w]);

    const int tg = target[t];
    lmh_check_target(t, tg, V);
    /* This chunk alone: l2 = logsumexp, a2 = sum p (z - l2). */
    double l, a;
    lmh_finish(st, &l, &a);
    if (!first) {
        const double l1 = lse[t], a1 = entropy ? entropy[t] : 0.0;
        const double lm = fmax(l1, l) + log1p(exp(-fabs(l1 - l)));
        a = exp(l1 - lm) * (a1 + l1 - lm) + exp(l - lm) * (a + l - lm);
        l = lm;
    }
    const bool here = tg >= c0 && tg < c0 + n;
    if (last) {
        lse[t] = (float)l;
        if (entropy) entropy[t] = (float)-a;
        const double zt = here ? (double)z[tg - c0] : (double)logprob[t];
        logprob[t] = tg >= 0 ? (float)(zt - l) : 0.0f;
    } else {
        lse[t] = (float)l;
        if (entropy) entropy[t] = (float)a;
        if (here) logprob[t] = z[tg - c0];
    }
}

/* ---- backward: dz in place ---------------------------------------------------------- */

/* One block per token row of a [rows, n] fp32 logit block; writes the bf16
 * dz of row r over the first half of that row's fp32 storage. */
__global__ void __launch_bounds__(LMH_THREADS)
    lmh_bwd_dz(float *__restrict__ Z, int n, int t0, int c0, const float *__restrict__ dlogprob,
               const float *__restrict__ dentropy, const float *__restrict__ lse, const float *__restrict__ entropy,
               const int32_t *__restrict__ target, float inv_temp) {
    const int r = blockIdx.x, t = t0 + r, tid = threadIdx.x;
    float *z = Z + (size_t)r * n;
    bf16 *d = reinterpret_cast<bf16 *>(z);
    const int tg = target[t];
    const bool masked = tg < 0;
    const float glp = masked ? 0.0f : dlogprob[t];
    const float gent = (masked || !dentropy) ? 0.0f : dentropy[t];
    const float H = dentropy ? entropy[t] : 0.0f, l = lse[t];
    constexpr int SEG = LMH_THREADS * LMH_EPT;
    for (int base = 0; base < n; base += SEG) {
        float x[LMH_EPT];
#pragma unroll
        for (int i = 0; i < LMH_EPT; i++) {
            const int j = base + i * LMH_THREADS + tid;
            x[i] = j < n ? z[j] : 0.0f;
        }
        __syncthreads(); /* every fp32 value of the segment is read before any bf16 lands */
#pragma unroll
        for (int i = 0; i < LMH_EPT; i++) {
            const int j = base + i * LMH_THREADS + tid;
            if (j >= n) continue;
            float g = 0.0f;
            if (!masked) {
                const float logp = x[i] - l, p = __expf(logp);
                g = -glp * p - gent * p * (logp + H);
                if (c0 + j == tg) g += glp;
                g *= inv_temp;
            }
            d[j] = __float2bfloat16_rn(g);
        }
        __syncthreads(); /* the next segment's reads start after these writes */
    }
}

/* ---- host side ------------------------------------------------------------------------ */

static void lmh_check(const char *op, int T, int C, int V, int chunk, float inv_temp) {
    if (T < 0 || C <= 0 || V <= 0 || chunk <= 0)
        DK_ABORT("%s: bad shape T=%d C=%d V=%d chunk=%d", op, T, C, V, chunk);
    if (!isfinite(inv_temp)) DK_ABORT("%s: inv_temp %g is not finite", op, (double)inv_temp);
}

extern "C" void cuda_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h,
                                    const void *W, const int32_t *target, int T, int C, int V, float inv_temp,
                                    int chunk, float *keep) {
    lmh_check("lmhead_forward", T, C, V, chunk, inv_temp);
    if (T == 0) return;
    if (!keep && cuda_lmhead_forward_wgmma(ctx, logprob, entropy, lse, h, W, target, T, C, V, inv_temp)) return;
    const int n = keep ? V : chunk < V ? chunk : V;
    float *Z = keep ? keep : (float *)ctx_scratch(ctx, (size_t)T * n * sizeof(float), "lmhead_forward");
    const bf16 *hb = (const bf16 *)h, *Wb = (const bf16 *)W;
    for (int c0 = 0; c0 < V; c0 += n) {
        const int nc = V - c0 < n ? V - c0 : n;
        lmh_gemm(ctx, T, nc, C, hb, C, 0, Wb + (size_t)c0 * C, C, 1, Z, 1, nc, inv_temp, 0.0f);
        lmh_fwd_stats<<<T, LMH_THREADS, 0, ctx_stream(ctx)>>>(Z, nc, c0, V, target, lse, entropy, logprob, c0 == 0,
                                                              c0 + nc >= V);
        CUDA_LAUNCH_CHECK();
    }
}

/* The recomputing backward, per block of Tb tokens and chunk of n columns:
 * dz (bf16), then dh32 (+)= dz W_c and dW_c += dz^T h, and dh = dh32 once
 * per block. wg: lmhead_wgmma.cu's kernel writes dz into dz_buf (row stride
 * ldz) straight from the recomputed logits; otherwise cuBLASLt writes the
 * fp32 logits into dz_buf and lmh_bwd_dz turns them into dz in place (row
 * stride 2 nc over the fp32 rows). */
static void lmh_backward_blocks(ops_ctx *ctx, int wg, size_t Tb, size_t n, void *dz_buf, size_t ldz, float *dh32,
                                void *dh, float *dW, const float *dlogprob, const float *dentropy, const void *h,
                                const void *W, const int32_t *target, const float *lse, const float *entropy, int T,
                                int C, int V, float inv_temp) {
    const bf16 *hb = (const bf16 *)h, *Wb = (const bf16 *)W, *dz = (const bf16 *)dz_buf;
    bf16 *dhb = (bf16 *)dh;
    for (size_t t0 = 0; t0 < (size_t)T; t0 += Tb) {
        const int tb = (int)((size_t)T - t0 < Tb ? (size_t)T - t0 : Tb);
        const bf16 *ht = hb + t0 * C;
        for (size_t c0 = 0; c0 < (size_t)V; c0 += n) {
            const int nc = (int)((size_t)V - c0 < n ? (size_t)V - c0 : n);
            const bf16 *Wc = Wb + c0 * C;
            int ld = (int)ldz;
            if (wg) {
                if (!cuda_lmhead_dz_wgmma(ctx, dz_buf, ld, dlogprob, dentropy, ht, W, target, lse, entropy, (int)t0,
                                          tb, C, V, (int)c0, nc, inv_temp))
                    DK_ABORT("lmhead_backward: the wgmma dz kernel refused operands it accepted");
            } else {
                float *Z = (float *)dz_buf;
                ld = 2 * nc;
                lmh_gemm(ctx, tb, nc, C, ht, C, 0, Wc, C, 1, Z, 1, nc, inv_temp, 0.0f);
                lmh_bwd_dz<<<tb, LMH_THREADS, 0, ctx_stream(ctx)>>>(Z, nc, (int)t0, (int)c0, dlogprob, dentropy, lse,
                                                                    entropy, target, inv_temp);
                CUDA_LAUNCH_CHECK();
            }
            lmh_gemm(ctx, tb, C, nc, dz, ld, 0, Wc, C, 0, dh32, 1, C, 1.0f, c0 == 0 ? 0.0f : 1.0f);
            lmh_gemm(ctx, nc, C, tb, dz, ld, 1, ht, C, 0, dW + c0 * C, 1, C, 1.0f, 1.0f);
        }
        cuda_cast_f32_to_act(ctx, dhb + t0 * C, dh32, (size_t)tb * C);
    }
}

extern "C" void cuda_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                                     const void *h, const void *W, const int32_t *target, const float *lse,
                                     const float *entropy, int T, int C, int V, float inv_temp, int chunk,
                                     float *keep) {
    lmh_check("lmhead_backward", T, C, V, chunk, inv_temp);
    if (dentropy && !entropy) DK_ABORT("lmhead_backward: dentropy given without the forward's entropy");
    if (T == 0) return;
    if (keep) {
        const bf16 *dz = (const bf16 *)keep; /* bf16 rows of stride 2 V over the fp32 logits */
        lmh_bwd_dz<<<T, LMH_THREADS, 0, ctx_stream(ctx)>>>(keep, V, 0, 0, dlogprob, dentropy, lse, entropy, target,
                                                           inv_temp);
        CUDA_LAUNCH_CHECK();
        lmh_gemm(ctx, T, C, V, dz, 2 * V, 0, (const bf16 *)W, C, 0, dh, 0, C, 1.0f, 0.0f);
        lmh_gemm(ctx, V, C, T, dz, 2 * V, 1, (const bf16 *)h, C, 0, dW, 1, C, 1.0f, 1.0f);
        return;
    }
    const size_t n = chunk < V ? (size_t)chunk : (size_t)V;
    if (cuda_lmhead_wgmma_fits(ctx, h, W, C)) {
        /* dz [Tb, ldz] (ldz = n rounded up to 8) first, so that the fp32 dh
         * accumulator [Tb, C] after it starts 16-byte aligned: 2 ldz + 4 C
         * bytes a token against the other path's 4 n + 4 C. Blocks of equal
         * size: a model's scratch of T x chunk floats holds all T tokens at
         * C <= chunk / 2 exactly, and a larger C splits them evenly rather
         * than leaving a short last block of GEMMs. */
        const size_t ldz = (n + 7) / 8 * 8, most = ctx->scratch_size / (4 * (size_t)C + 2 * ldz);
        if (most >= 1) {
            const size_t blocks = ((size_t)T + most - 1) / most, Tb = ((size_t)T + blocks - 1) / blocks;
            float *dh32 = (float *)((char *)ctx->scratch + Tb * ldz * sizeof(bf16));
            lmh_backward_blocks(ctx, 1, Tb, n, ctx->scratch, ldz, dh32, dh, dW, dlogprob, dentropy, h, W, target, lse,
                                entropy, T, C, V, inv_temp);
            return;
        }
    }
    /* Split the scratch into the fp32 dh accumulator [Tb, C] and the logit
     * block [Tb, n] (64 floats of slack keep the second 256-byte aligned). */
    const size_t F = ctx->scratch_size / sizeof(float);
    size_t nz = n;
    size_t Tb = F > 64 ? (F - 64) / ((size_t)C + nz) : 0;
    if (Tb < 1) {
        Tb = 1;
        nz = F > (size_t)C + 64 ? F - (size_t)C - 64 : 0;
        if (nz < 1)
            DK_ABORT("lmhead_backward: scratch holds %zu bytes, needs at least %zu (one token's fp32 dh row of C=%d "
                     "plus one logit column)",
                     ctx->scratch_size, ((size_t)C + 65) * sizeof(float), C);
    }
    if (Tb > (size_t)T) Tb = (size_t)T;
    float *dh32 = (float *)ctx->scratch;
    float *Z = dh32 + ((Tb * (size_t)C + 63) / 64) * 64;
    lmh_backward_blocks(ctx, 0, Tb, nz, Z, 0, dh32, dh, dW, dlogprob, dentropy, h, W, target, lse, entropy, T, C, V,
                        inv_temp);
}
