/* matmul.cu: C = alpha * op(A) @ op(B) + beta * C through cuBLASLt, bf16 A and
 * B, fp32 accumulation, C in bf16 or (c_f32, parameter gradients) fp32; and
 * the residual form C = A W^T + R, R read as cuBLASLt's C beside the output.
 *
 * cuBLASLt is column-major. A row-major [R, S] matrix is, byte for byte, the
 * column-major [S, R] matrix, its transpose; so the row-major product
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, with
 * the roles of A and B swapped and the transposes kept.
 *
 * Building the descriptors and asking the heuristic for an algorithm costs
 * tens of microseconds, more than a small matmul itself, and a training step
 * repeats the same few dozen shapes; so each shape's descriptors and chosen
 * algorithm are kept in a small process-wide table. The key includes the
 * pointers' alignment, because cuBLASLt picks vectorised kernels only for
 * aligned operands and the choice must stay valid for the next call.
 *
 * Operands must not live in ctx->scratch: a bf16 product with a small output
 * and a long K is staged there in fp32 (see cuda_matmul). Products of at most
 * 8 rows by a transposed weight matrix go to matmul_gemv.cu instead, and of
 * 9 to 64 rows with a long K and at most 2048 columns to matmul_skinny.cu. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.cuh"

typedef struct {
    int used;
    int gpu, M, N, K, ta, tb, c_f32;
    unsigned align_a, align_b, align_c;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our b), B (our a), C = D */
    cublasLtMatmulAlgo_t algo;
} mm_plan;

#define MM_CACHE 512     /* power of two */
#define MM_CANDIDATES 8 /* heuristic results to choose from */
#define MM_SMALL_OUT ((size_t)4 << 20) /* outputs up to 4M elements may take the fp32 detour */

static mm_plan mm_cache[MM_CACHE];
static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Largest power of two (up to 16) that divides the address. */
static unsigned ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    unsigned al = 16;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

static int plan_matches(const mm_plan *p, const mm_plan *k) {
    return p->used && p->gpu == k->gpu && p->M == k->M && p->N == k->N && p->K == k->K && p->ta == k->ta &&
           p->tb == k->tb && p->c_f32 == k->c_f32 && p->align_a == k->align_a && p->align_b == k->align_b &&
           p->align_c == k->align_c;
}

static unsigned plan_hash(const mm_plan *k) {
    uint64_t h = 1469598103934665603ull;
    int v[] = {k->gpu, k->M, k->N, k->K, k->ta, k->tb, k->c_f32, (int)k->align_a, (int)k->align_b, (int)k->align_c};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) h = (h ^ (uint64_t)(unsigned)v[i]) * 1099511628211ull;
    return (unsigned)(h ^ (h >> 32));
}

static void plan_destroy(mm_plan *p) {
    if (!p->used) return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* Descriptors and the heuristic's first algorithm for the key's shape. */
static void plan_build(const ops_ctx *ctx, mm_plan *p) {
    const int M = p->M, N = p->N, K = p->K;
    cublasOperation_t op_a = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our b */
    cublasOperation_t op_b = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    /* Stored shapes, column-major: our b is [K,N] row-major = [N,K] col-major
     * (or [N,K] row-major = [K,N] col-major when transposed); likewise a. */
    if (p->tb) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, K, N, K));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, N, K, N));
    if (p->ta) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, M, K, M));
    else CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, K, M, K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, p->c_f32 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = ctx->blaslt_ws_size;
    uint32_t al_a = p->align_b, al_b = p->align_a, al_c = p->align_c;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                      sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                      sizeof al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                                      sizeof al_c));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                                      sizeof al_c));
    /* Split-K partial sums only in fp32: the in-place and output-type
     * schemes would add bf16-rounded partials (seen: 2x a bf16 ulp of error
     * on a K = 5632 product with a bf16 output). */
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                      sizeof reduction));
    cublasLtMatmulHeuristicResult_t res[MM_CANDIDATES];
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->blaslt, p->op, p->la, p->lb, p->lc, p->lc,
                                                pref, MM_CANDIDATES, res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1)
        DK_ABORT("ops_matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d c_f32=%d "
                 "(alignment a %u b %u c %u bytes)",
                 M, N, K, p->ta, p->tb, p->c_f32, p->align_a, p->align_b, p->align_c);
    /* The heuristic's first choice, unless it splits K with partial sums kept
     * in anything but fp32; then the best candidate that does not. */
    int pick = 0;
    for (int i = 0; i < found; i++) {
        int32_t splits = 1;
        uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                             &got);
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof scheme, &got);
        if (splits <= 1 || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
            pick = i;
            break;
        }
    }
    p->algo = res[pick].algo;
    p->used = 1;
}

void cuda_matmul_cache_clear(void) {
    pthread_mutex_lock(&mm_lock);
    for (int i = 0; i < MM_CACHE; i++) plan_destroy(&mm_cache[i]);
    pthread_mutex_unlock(&mm_lock);
}

/* C = beta * C for K == 0 (the product is empty), bf16 or fp32 C; beta == 0
 * writes zeros without reading C, as the GEMM itself would. */
__global__ void scale_bf16(bf16 *c, size_t n, float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c[i] = __float2bfloat16_rn(beta * __bfloat162float(c[i]));
}
__global__ void scale_fp32(float *c, size_t n, float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        c[i] *= beta;
}

/* C = alpha * op(A) op(B) + beta * C_in, written to C: C_in is C for
 * ops_matmul and the residual R for ops_matmul_residual. cuBLASLt reads C_in
 * and writes C as two matrices of one layout, and the fp32 detour of a long
 * K stages C_in; the few-row kernels work in place, so C_in is first copied
 * into C where one of them may take the product. */
static void matmul_into(ops_ctx *ctx, void *c, const void *c_in, int c_f32, const void *a, const void *b, int M,
                        int N, int K, int trans_a, int trans_b, float alpha, float beta) {
    if (M < 0 || N < 0 || K < 0) DK_ABORT("ops_matmul: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return;
    cudaStream_t st = ctx_stream(ctx);
    if (c_in != c && beta != 0.0f && (K == 0 || M <= OPS_MATMUL_FEW_ROWS)) {
        CUDA_CHECK(cudaMemcpyAsync(c, c_in, (size_t)M * N * (c_f32 ? sizeof(float) : sizeof(bf16)),
                                   cudaMemcpyDeviceToDevice, st));
        c_in = c;
    }
    if (K == 0) {
        size_t n = (size_t)M * N;
        if (beta == 0.0f) {
            cuda_zero(ctx, c, n * (c_f32 ? sizeof(float) : sizeof(bf16)));
            return;
        }
        if (c_f32) scale_fp32<<<grid_for(ctx, n, 256, 8), 256, 0, st>>>((float *)c, n, beta);
        else scale_bf16<<<grid_for(ctx, n, 256, 8), 256, 0, st>>>((bf16 *)c, n, beta);
        CUDA_LAUNCH_CHECK();
        return;
    }

    /* One to a few rows times a weight matrix (decode steps): a kernel that
     * streams the weights once (matmul_gemv.cu). */
    if (cuda_matmul_gemv(ctx, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta)) return;
    /* A small output with a long K is where cuBLASLt splits K across blocks;
     * for a bf16 output its kernels may then add bf16-rounded partial sums
     * (measured: 2 bf16 ulps of error where partials cancel, M=512 N=1024
     * K=5632, with split-K reductions restricted to fp32 below). Such
     * products are computed with an fp32 output in scratch and rounded once;
     * the extra traffic is a few MB. */
    const size_t mn = (size_t)M * N;
    const int long_k = !c_f32 && (size_t)K > 2 * ((size_t)M + N); /* bf16 out, K past the output's size */
    /* Up to 64 rows by W^T with a long K (the down projection of a decode
     * step at a larger batch): split-K on tensor cores, the slices added in
     * fp32 across a cluster and rounded once, one pass over the weights.
     * On sm_90 the wgmma form (matmul_skinny_wgmma.cu) takes every such
     * product; measured on an H100 (bench_ops --decode, GB/s of 3.03 copy)
     * against cuBLASLt's fp32 detour below: M=64 K=6144 N=2048 1881 against
     * 1341, M=32 1928 against 1529, K=12288 N=4096 2604 against 2291, K=17408
     * N=5120 2729 against 2435. Elsewhere the mma.sync form
     * (matmul_skinny.cu) takes those of at most 2048 columns, where it
     * beat the detour (1514 against 1368 at M=64 K=6144) and lost at 4096.
     * The wider, shorter products (q|k|v, o, gate|up, the lm head) stay on
     * cuBLASLt: wgmma ran them within a few per cent of it either way, and
     * the 1.7B engine with every product on wgmma decoded 4% slower
     * (bench_generate --quick --skinny-use 2: 4.21 against 4.05 ms a
     * step). With this choice an 8B decode step at batch 64 took 11.47 ms
     * against 11.75 on cuBLASLt alone (bench_generate --ops 8b 64 640),
     * and the 1.7B engine's batch-64 step went from 66.3% to 67.4% of its
     * memory roofline (--quick). */
    const int sk_cols = N <= 2048;
    const int sk_use = ctx->tuning.skinny_use;
    if (sk_use < -1 || sk_use > 2) DK_ABORT("ops_tuning.skinny_use = %d: expected -1, 0, 1 or 2", sk_use);
    /* 2: every product the wgmma kernel can take, on it; on devices other
     * than sm_90, as 1. */
    if ((sk_use == 2 || (sk_use == 0 && long_k)) &&
        cuda_matmul_skinny_wgmma(ctx, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta))
        return;
    if (sk_use >= 0 && ((long_k && sk_cols) || sk_use >= 1) &&
        cuda_matmul_skinny(ctx, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta))
        return;
    if (long_k && mn <= MM_SMALL_OUT && mn * sizeof(float) <= ctx->scratch_size) {
        float *c32 = (float *)ctx->scratch;
        if (beta != 0.0f) cuda_cast_act_to_f32(ctx, c32, c_in, mn);
        cuda_matmul(ctx, c32, 1, a, b, M, N, K, trans_a, trans_b, alpha, beta);
        cuda_cast_f32_to_act(ctx, c, c32, mn);
        return;
    }

    mm_plan key;
    memset(&key, 0, sizeof key);
    key.gpu = ctx->gpu, key.M = M, key.N = N, key.K = K;
    key.ta = trans_a ? 1 : 0, key.tb = trans_b ? 1 : 0, key.c_f32 = c_f32 ? 1 : 0;
    key.align_a = ptr_align(a), key.align_b = ptr_align(b);
    key.align_c = ptr_align(c) < ptr_align(c_in) ? ptr_align(c) : ptr_align(c_in);

    mm_plan local, *plan = NULL;
    pthread_mutex_lock(&mm_lock);
    unsigned h = plan_hash(&key);
    for (int probe = 0; probe < 16; probe++) {
        mm_plan *slot = &mm_cache[(h + probe) & (MM_CACHE - 1)];
        if (plan_matches(slot, &key)) {
            plan = slot;
            break;
        }
        if (!slot->used) {
            *slot = key;
            plan_build(ctx, slot);
            plan = slot;
            break;
        }
    }
    if (!plan) { /* the table's neighbourhood is full: plan this call alone */
        local = key;
        plan_build(ctx, &local);
    }
    /* Copy out under the lock; descriptors stay valid until the last context
     * is freed, which cannot happen during a call on a live one. */
    mm_plan use = plan ? *plan : local;
    pthread_mutex_unlock(&mm_lock);

    CUBLAS_CHECK(cublasLtMatmul((cublasLtHandle_t)ctx->blaslt, use.op, &alpha, b, use.la, a, use.lb, &beta, c_in,
                                use.lc, c, use.lc, &use.algo, ctx->blaslt_ws, ctx->blaslt_ws_size, st));
    if (!plan) plan_destroy(&local);
}

extern "C" void cuda_matmul(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                            int trans_a, int trans_b, float alpha, float beta) {
    matmul_into(ctx, c, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta);
}

/* The residual add as the GEMM's own epilogue (beta = 1 on C_in = R): a
 * training step's o and down projections, which ops_add followed at 70 us
 * a call (1.7B shape, 16k tokens), now read R inside the product at no
 * measurable cost (H100, bench_train: those 56 products 22.1 ms of the
 * step's 196.6 ms of GEMMs, the same total as before). Out of place,
 * cuBLASLt adds R to the fp32 product and rounds once; in place (C == R,
 * as for ops_matmul with beta != 0) it rounds the product to bf16 first:
 * 8 to 10 times the rounded-once error where the sum cancels
 * (test_cuda_matmul). */
extern "C" void cuda_matmul_residual(ops_ctx *ctx, void *c, const void *a, const void *w, const void *r, int M, int N,
                                     int K) {
    matmul_into(ctx, c, r, 0, a, w, M, N, K, 0, 1, 1.0f, 1.0f);
}
