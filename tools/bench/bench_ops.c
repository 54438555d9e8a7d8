/* bench_ops.c: times the CUDA backend's memory-bound ops (RMSNorm,
 * LayerNorm, RoPE, SwiGLU, embedding), AdamW and the cuBLASLt matmul, and in
 * the same run their PyTorch equivalents (tools/bench/torch_ops.py, started
 * after our buffers are freed), and prints for each case:
 *   - our time, bandwidth (the fewest bytes the op must move: each input read
 *     once, each output written once) or TFLOP/s,
 *   - our fraction of the device copy bandwidth, measured here first with a
 *     2 GiB cudaMemcpy device-to-device (read + write bytes), or of the bf16
 *     GEMM rate torch reaches on 8192^3 in the same run,
 *   - torch's time and the ratio torch time / our time (> 1: we are faster).
 *
 *   bench_ops [--quick | --decode | --decode-shape M N K]
 *
 * --decode: the decode-step products alone, each with its plan sweep.
 * --decode-shape: one such product, ours only (no torch run): a short
 * process to put under a profiler.
 *
 * Torch equivalents: RMSNorm = F.rms_norm and the Hugging Face formula in
 * bf16 (the faster counts), LayerNorm = F.layer_norm with weight and bias,
 * RoPE = HF apply_rotary_pos_emb on q and k, SwiGLU = F.silu(g) * u, embedding = F.embedding (its backward is the dense
 * bf16 table gradient autograd makes), AdamW = torch.optim.AdamW(fused=True)
 * on fp32 parameters of the same count, matmul = torch.matmul. Backward
 * ops are timed through torch.autograd.grad on a retained graph. DK_PYTHON
 * names the python that has torch (default python3), DK_SOURCE the checkout
 * (default the current directory). Times are medians of per-call CUDA event
 * times after warm-up; every buffer is far larger than the 60 MB L2. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "kernels/skinny_plan.h"
#include "tools/bench/bench_stats.h"

#define MAX_CASES 80

typedef struct {
    char spec[96];  /* "op d1 d2 ...", also the torch script's argument */
    char label[64]; /* what the table prints */
    double bytes;   /* minimal bytes moved by our op (0 for matmul) */
    double flops;   /* matmul only */
    double us;      /* ours */
    double torch_us;
    double torch_bytes; /* minimal bytes of torch's op where it differs (AdamW) */
} bench_case;

static bench_case cases[MAX_CASES];
static int n_cases;

static void check_cuda(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_ops: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* ---- buffers ------------------------------------------------------------------------ */

static ops_ctx ctx;

/* A device buffer of n act or fp32 values, filled by uploading 1M random
 * values once and doubling copies on the device (fast for gigabytes; the
 * values repeat every 1M elements, which no op here can exploit). */
static void *dev_fill(size_t n, int f32, float scale, float offset, int positive) {
    size_t es = f32 ? sizeof(float) : ops_act_size(&ctx);
    void *d = ops_alloc(&ctx, n * es + 16);
    size_t blk = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    float *h = dk_malloc(blk * sizeof(float));
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(n + (size_t)f32 * 7 + (size_t)(scale * 1000));
    for (size_t i = 0; i < blk; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
        h[i] = (positive ? fabsf(u) : u) * scale + offset;
    }
    if (f32) ops_upload(&ctx, d, h, blk * es);
    else ops_upload_act(&ctx, d, h, blk);
    for (size_t have = blk; have < n;) {
        size_t c = have < n - have ? have : n - have;
        check_cuda(cudaMemcpyAsync((char *)d + have * es, d, c * es, cudaMemcpyDeviceToDevice,
                                   (cudaStream_t)ctx.stream),
                   "fill copy");
        have += c;
    }
    ops_sync(&ctx);
    free(h);
    return d;
}

/* ---- timing ---------------------------------------------------------------------------- */

typedef void (*bench_fn)(void *);

/* Median microseconds per call of fn over `reps` timings after 3 warm-ups,
 * each of `calls` calls back to back (a decode product takes a few us, about
 * a launch, and a step queues them so). */
static double time_us_calls(bench_fn fn, void *arg, int reps, int calls) {
    cudaStream_t st = (cudaStream_t)ctx.stream;
    for (int i = 0; i < 3; i++) fn(arg);
    ops_sync(&ctx);
    double *t = dk_malloc((size_t)reps * sizeof(double));
    cudaEvent_t a, b;
    check_cuda(cudaEventCreate(&a), "event");
    check_cuda(cudaEventCreate(&b), "event");
    for (int r = 0; r < reps; r++) {
        check_cuda(cudaEventRecord(a, st), "record");
        for (int i = 0; i < calls; i++) fn(arg);
        check_cuda(cudaEventRecord(b, st), "record");
        check_cuda(cudaEventSynchronize(b), "sync");
        float ms = 0.0f;
        check_cuda(cudaEventElapsedTime(&ms, a, b), "elapsed");
        t[r] = ms * 1e3 / calls;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    double med = t[reps / 2];
    free(t);
    return med;
}

static double time_us(bench_fn fn, void *arg, int reps) { return time_us_calls(fn, arg, reps, 1); }

static bench_case *add_case(const char *spec, const char *label, double bytes, double flops) {
    if (n_cases == MAX_CASES) DK_ABORT("bench_ops: too many cases");
    bench_case *c = &cases[n_cases++];
    memset(c, 0, sizeof *c);
    snprintf(c->spec, sizeof c->spec, "%s", spec);
    snprintf(c->label, sizeof c->label, "%s", label);
    c->bytes = bytes, c->flops = flops, c->torch_us = NAN;
    return c;
}

/* ---- the ops ------------------------------------------------------------------------------ */

typedef struct {
    void *src, *dst;
    size_t bytes;
} copy_args;
static void run_copy(void *p) {
    copy_args *a = p;
    check_cuda(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)ctx.stream),
               "copy");
}

typedef struct {
    void *x, *w, *b, *out, *dout, *dx;
    float *mean, *rstd, *dw, *db;
    int N, C;
} norm_args;
static void run_rms_fwd(void *p) {
    norm_args *a = p;
    ops_rmsnorm_forward(&ctx, a->out, a->rstd, a->x, a->w, a->N, a->C, 1e-6f);
}
static void run_rms_bwd(void *p) {
    norm_args *a = p;
    ops_rmsnorm_backward(&ctx, a->dx, a->dw, a->dout, a->x, a->w, a->rstd, a->N, a->C, 0);
}
static void run_ln_fwd(void *p) {
    norm_args *a = p;
    ops_layernorm_forward(&ctx, a->out, a->mean, a->rstd, a->x, a->w, a->b, a->N, a->C, 1e-5f);
}
static void run_ln_bwd(void *p) {
    norm_args *a = p;
    ops_layernorm_backward(&ctx, a->dx, a->dw, a->db, a->dout, a->x, a->w, a->mean, a->rstd, a->N, a->C);
}

/* RMSNorm (layer 0) or LayerNorm with a bias (layer 1) over N rows of C.
 * Bytes: x read and out written (bf16), the weight (and bias) read and the
 * row statistics written (rstd, and mean); the backward reads dout, x, the
 * weight and the statistics, writes dx and accumulates dw (and db) in fp32. */
static void bench_norm(int layer, int N, int C, int reps) {
    const size_t n = (size_t)N * C;
    norm_args a = {dev_fill(n, 0, 1, 0, 0), dev_fill(C, 0, 0.2f, 1, 0), layer ? dev_fill(C, 0, 0.5f, 0, 0) : NULL,
                   dev_fill(n, 0, 1, 0, 0), dev_fill(n, 0, 1, 0, 0), dev_fill(n, 0, 1, 0, 0),
                   layer ? dev_fill(N, 1, 0.1f, 0, 0) : NULL, dev_fill(N, 1, 1, 0.5f, 1), dev_fill(C, 1, 1, 0, 0),
                   layer ? dev_fill(C, 1, 1, 0, 0) : NULL, N, C};
    const char *op = layer ? "layernorm" : "rmsnorm";
    char spec[96], label[64];
    const double nc = (double)N * C, stats = (layer ? 8.0 : 4.0) * N;
    snprintf(spec, sizeof spec, "%s_fwd %d %d", op, N, C);
    snprintf(label, sizeof label, "%s fwd %dx%d", op, N, C);
    add_case(spec, label, nc * 4 + stats + C * (layer ? 4.0 : 2.0), 0)->us =
        time_us(layer ? run_ln_fwd : run_rms_fwd, &a, reps);
    snprintf(spec, sizeof spec, "%s_bwd %d %d", op, N, C);
    snprintf(label, sizeof label, "%s bwd %dx%d", op, N, C);
    add_case(spec, label, nc * 6 + stats + C * (layer ? 18.0 : 10.0), 0)->us =
        time_us(layer ? run_ln_bwd : run_rms_bwd, &a, reps);
    void *bufs[] = {a.x, a.w, a.b, a.out, a.dout, a.dx, a.mean, a.rstd, a.dw, a.db};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_free(&ctx, bufs[i]);
}

typedef struct {
    void *q, *k;
    int32_t *pos;
    int T, Hq, Hkv, D;
} rope_args;
static void run_rope_fwd(void *p) {
    rope_args *a = p;
    ops_rope_forward(&ctx, a->q, a->pos, a->T, a->Hq, a->D, 1e6f);
    ops_rope_forward(&ctx, a->k, a->pos, a->T, a->Hkv, a->D, 1e6f);
}
static void run_rope_bwd(void *p) {
    rope_args *a = p;
    ops_rope_backward(&ctx, a->q, a->pos, a->T, a->Hq, a->D, 1e6f);
    ops_rope_backward(&ctx, a->k, a->pos, a->T, a->Hkv, a->D, 1e6f);
}

static void bench_rope(int T, int Hq, int Hkv, int D, int reps) {
    rope_args a = {dev_fill((size_t)T * Hq * D, 0, 1, 0, 0), dev_fill((size_t)T * Hkv * D, 0, 1, 0, 0), NULL, T, Hq,
                   Hkv, D};
    int32_t *pos = dk_malloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) pos[t] = t % 4096; /* packed sequences of 4096 */
    a.pos = ops_alloc(&ctx, (size_t)T * sizeof(int32_t));
    ops_upload(&ctx, a.pos, pos, (size_t)T * sizeof(int32_t));
    ops_sync(&ctx);
    free(pos);
    char spec[96], label[64];
    double bytes = 4.0 * T * (Hq + Hkv) * D + 4.0 * T;
    snprintf(spec, sizeof spec, "rope_fwd %d %d %d %d", T, Hq, Hkv, D);
    snprintf(label, sizeof label, "rope fwd q+k T=%d %d+%dx%d", T, Hq, Hkv, D);
    add_case(spec, label, bytes, 0)->us = time_us(run_rope_fwd, &a, reps);
    snprintf(spec, sizeof spec, "rope_bwd %d %d %d %d", T, Hq, Hkv, D);
    snprintf(label, sizeof label, "rope bwd q+k T=%d %d+%dx%d", T, Hq, Hkv, D);
    add_case(spec, label, bytes, 0)->us = time_us(run_rope_bwd, &a, reps);
    ops_free(&ctx, a.q), ops_free(&ctx, a.k), ops_free(&ctx, a.pos);
}

typedef struct {
    void *gu, *out, *dout, *dgu;
    int N, I;
} swiglu_args;
static void run_swiglu_fwd(void *p) {
    swiglu_args *a = p;
    ops_swiglu_forward(&ctx, a->out, a->gu, a->N, a->I);
}
static void run_swiglu_bwd(void *p) {
    swiglu_args *a = p;
    ops_swiglu_backward(&ctx, a->dgu, a->dout, a->gu, a->N, a->I);
}

static void bench_swiglu(int N, int I, int reps) {
    size_t n = (size_t)N * I;
    swiglu_args a = {dev_fill(2 * n, 0, 3, 0, 0), dev_fill(n, 0, 1, 0, 0), dev_fill(n, 0, 1, 0, 0),
                     dev_fill(2 * n, 0, 1, 0, 0), N, I};
    char spec[96], label[64];
    snprintf(spec, sizeof spec, "swiglu_fwd %d %d", N, I);
    snprintf(label, sizeof label, "swiglu fwd %dx%d", N, I);
    add_case(spec, label, 6.0 * n, 0)->us = time_us(run_swiglu_fwd, &a, reps);
    snprintf(spec, sizeof spec, "swiglu_bwd %d %d", N, I);
    snprintf(label, sizeof label, "swiglu bwd %dx%d", N, I);
    add_case(spec, label, 10.0 * n, 0)->us = time_us(run_swiglu_bwd, &a, reps);
    ops_free(&ctx, a.gu), ops_free(&ctx, a.out), ops_free(&ctx, a.dout), ops_free(&ctx, a.dgu);
}

typedef struct {
    void *table, *out, *dout;
    float *dtable;
    int32_t *ids;
    int T, C;
} emb_args;
static void run_emb_fwd(void *p) {
    emb_args *a = p;
    ops_embedding_forward(&ctx, a->out, a->ids, a->table, a->T, a->C);
}
static void run_emb_bwd(void *p) {
    emb_args *a = p;
    ops_embedding_backward(&ctx, a->dtable, a->dout, a->ids, a->T, a->C);
}

static void bench_embedding(int T, int C, int V, int reps) {
    emb_args a = {dev_fill((size_t)V * C, 0, 1, 0, 0), dev_fill((size_t)T * C, 0, 1, 0, 0),
                  dev_fill((size_t)T * C, 0, 1, 0, 0), dev_fill((size_t)V * C, 1, 1, 0, 0), NULL, T, C};
    int32_t *ids = dk_malloc((size_t)T * sizeof(int32_t));
    char *seen = dk_calloc((size_t)V, 1);
    uint64_t s = 12345;
    int unique = 0;
    for (int t = 0; t < T; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        /* A skewed vocabulary, as text is: a quarter of the tokens from 64 ids. */
        ids[t] = (int32_t)((s >> 33) % ((s >> 20) % 4 == 0 ? 64 : (uint64_t)V));
        if (!seen[ids[t]]) seen[ids[t]] = 1, unique++;
    }
    a.ids = ops_alloc(&ctx, (size_t)T * sizeof(int32_t));
    ops_upload(&ctx, a.ids, ids, (size_t)T * sizeof(int32_t));
    ops_sync(&ctx);
    free(ids), free(seen);
    char spec[96], label[64];
    snprintf(spec, sizeof spec, "embedding_fwd %d %d %d", T, C, V);
    snprintf(label, sizeof label, "embedding fwd T=%d C=%d", T, C);
    add_case(spec, label, 4.0 * T * C + 4.0 * T, 0)->us = time_us(run_emb_fwd, &a, reps);
    snprintf(spec, sizeof spec, "embedding_bwd %d %d %d", T, C, V);
    snprintf(label, sizeof label, "embedding bwd T=%d C=%d", T, C);
    /* dout read once, each touched fp32 row read and written once */
    add_case(spec, label, 2.0 * T * C + 8.0 * unique * C + 4.0 * T, 0)->us = time_us(run_emb_bwd, &a, reps);
    ops_free(&ctx, a.table), ops_free(&ctx, a.out), ops_free(&ctx, a.dout), ops_free(&ctx, a.dtable);
    ops_free(&ctx, a.ids);
}

typedef struct {
    void *param;
    float *master, *grad, *m, *v;
    size_t n;
    int t;
} adamw_args;
static void run_adamw(void *p) {
    adamw_args *a = p;
    ops_adamw(&ctx, a->param, a->master, a->grad, a->m, a->v, a->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++a->t, 1.0f);
}

static void bench_adamw(size_t n, int reps) {
    adamw_args a = {dev_fill(n, 0, 1, 0, 0), dev_fill(n, 1, 1, 0, 0), dev_fill(n, 1, 1e-3f, 0, 0),
                    dev_fill(n, 1, 1e-3f, 0, 0), dev_fill(n, 1, 1e-6f, 0, 1), n, 0};
    char spec[96], label[64];
    snprintf(spec, sizeof spec, "adamw %zu", n);
    snprintf(label, sizeof label, "adamw n=%.2fG", n / 1e9);
    bench_case *c = add_case(spec, label, 30.0 * n, 0);
    c->torch_bytes = 28.0 * n; /* fp32 params: p, g, m, v read, p, m, v written */
    c->us = time_us(run_adamw, &a, reps);
    ops_free(&ctx, a.param), ops_free(&ctx, a.master), ops_free(&ctx, a.grad), ops_free(&ctx, a.m);
    ops_free(&ctx, a.v);
}

typedef struct {
    void *a, *b, *c;
    int M, N, K, ta, tb, c_f32;
    float beta;
} mm_args;
static void run_mm(void *p) {
    mm_args *a = p;
    ops_matmul(&ctx, a->c, a->c_f32, a->a, a->b, a->M, a->N, a->K, a->ta, a->tb, 1.0f, a->beta);
}

static void bench_matmul(const char *what, int M, int N, int K, int ta, int tb, int c_f32, int reps) {
    mm_args a = {dev_fill((size_t)M * K, 0, 1, 0, 0), dev_fill((size_t)K * N, 0, 1, 0, 0),
                 dev_fill((size_t)M * N, c_f32, 1, 0, 0), M, N, K, ta, tb, c_f32, c_f32 ? 1.0f : 0.0f};
    char spec[96], label[64];
    snprintf(spec, sizeof spec, "matmul %d %d %d %d %d", M, N, K, ta, tb);
    snprintf(label, sizeof label, "matmul %s %dx%dx%d%s", what, M, N, K, c_f32 ? " f32+=" : "");
    add_case(spec, label, 0, 2.0 * M * N * K)->us = time_us(run_mm, &a, reps);
    ops_free(&ctx, a.a), ops_free(&ctx, a.b), ops_free(&ctx, a.c);
}

/* A decode step's product: M token rows times a model's weight matrix,
 * W^T. Each call reads the next of enough copies of W to fill 256 MB, as
 * the layers of a step read distinct weights: one copy would sit in L2
 * (50-60 MB) from the call before and time the cache. Memory-bound: its
 * limit is the copy rate over W's bytes (A and C are small). Then the same
 * product on cuBLASLt, on the skinny kernel (matmul_skinny.cu) with its
 * chosen plan and with each pinned plan (64 or 128 columns a block, 1 to
 * 8 splits of K), and on its wgmma form (matmul_skinny_wgmma.cu: chosen,
 * then 64, 96, 128, 192 or 256 columns by 1 to 8 splits), printed as one
 * line.
 * Timed 10 calls back to back; torch_ops.py likewise. */
typedef struct {
    void **w;
    int n_w, next;
    void *a, *c;
    int M, N, K, c_f32;
} mmd_args;
static void run_mmd(void *p) {
    mmd_args *a = p;
    ops_matmul(&ctx, a->c, a->c_f32, a->a, a->w[a->next++ % a->n_w], a->M, a->N, a->K, 0, 1, 1.0f, 0.0f);
}

/* GB/s of the product under the context's current tuning. */
static double mmd_gbps(mmd_args *a, double bytes, int reps) { return bytes / time_us_calls(run_mmd, a, reps, 10) / 1e3; }

static void bench_matmul_decode(const char *what, int M, int N, int K, int c_f32, int reps) {
    const double wbytes = 2.0 * N * K;
    mmd_args a = {NULL, (int)ceil(256e6 / wbytes), 0, dev_fill((size_t)M * K, 0, 1, 0, 0),
                  dev_fill((size_t)M * N, c_f32, 1, 0, 0), M, N, K, c_f32};
    a.w = dk_malloc((size_t)a.n_w * sizeof(void *));
    a.w[0] = dev_fill((size_t)N * K, 0, 0.05f, 0, 0);
    for (int i = 1; i < a.n_w; i++) {
        a.w[i] = ops_alloc(&ctx, (size_t)wbytes);
        check_cuda(cudaMemcpy(a.w[i], a.w[0], (size_t)wbytes, cudaMemcpyDeviceToDevice), "weight copy");
    }
    char spec[96], label[64];
    snprintf(spec, sizeof spec, "matmul_decode %d %d %d %d", M, N, K, c_f32);
    snprintf(label, sizeof label, "decode %s %dx%dx%d%s", what, M, N, K, c_f32 ? " f32" : "");
    const double bytes = wbytes + 2.0 * M * K + (c_f32 ? 4.0 : 2.0) * M * N;
    add_case(spec, label, bytes, 0)->us = time_us_calls(run_mmd, &a, reps, 10);
    printf("plan sweep %-28s GB/s:", label);
    ctx.tuning.skinny_use = -1;
    printf(" cuBLASLt %.0f |", mmd_gbps(&a, bytes, reps));
    ctx.tuning.skinny_use = 1;
    printf(" skinny chosen %.0f |", mmd_gbps(&a, bytes, reps));
    ctx.tuning.no_pdl = 1;
    printf(" ordinary launches %.0f |", mmd_gbps(&a, bytes, reps));
    ctx.tuning.no_pdl = 0;
    static const int splits[] = {1, 2, 4, 8};
    for (int bn = 64; bn <= 128; bn *= 2) {
        printf(" %d columns, splits:", bn);
        ctx.tuning.skinny_bn = bn;
        for (int i = 0; i < 4; i++) {
            if (splits[i] > K / 64) continue;
            ctx.tuning.skinny_splits = splits[i];
            printf(" s%d %.0f", splits[i], mmd_gbps(&a, bytes, reps));
        }
        printf(" |");
    }
    /* The wgmma kernel (matmul_skinny_wgmma.cu): its chosen plan, then
     * each width with its splits. */
    ctx.tuning.skinny_use = 2, ctx.tuning.skinny_splits = 0, ctx.tuning.skinny_bn = 0;
    int ns;
    const int cw = cuda_skinny_wgmma_plan(&ctx, N, K, &ns);
    printf(" wgmma chosen %dx%d %.0f |", cw, ns, mmd_gbps(&a, bytes, reps));
    static const int wg_bn[] = {64, 96, 128, 192, 256};
    for (int b = 0; b < 5; b++) {
        printf(" wgmma %d columns, splits:", wg_bn[b]);
        ctx.tuning.skinny_bn = wg_bn[b];
        for (int i = 0; i < 4; i++) {
            if (splits[i] > K / 64) continue;
            ctx.tuning.skinny_splits = splits[i];
            printf(" s%d %.0f", splits[i], mmd_gbps(&a, bytes, reps));
        }
        printf(" |");
    }
    printf("\n");
    ctx.tuning.skinny_use = 0, ctx.tuning.skinny_splits = 0, ctx.tuning.skinny_bn = 0;
    for (int i = 0; i < a.n_w; i++) ops_free(&ctx, a.w[i]);
    free(a.w);
    ops_free(&ctx, a.a), ops_free(&ctx, a.c);
}

/* ---- torch side ------------------------------------------------------------------------------ */

static void run_torch(double *copy_tbps_torch) {
    const char *py = getenv("DK_PYTHON"), *src = getenv("DK_SOURCE");
    size_t len = 256;
    for (int i = 0; i < n_cases; i++) len += strlen(cases[i].spec) + 4;
    char *cmd = dk_malloc(len);
    int k = snprintf(cmd, len, "%s %s/tools/bench/torch_ops.py", py ? py : "python3", src ? src : ".");
    for (int i = 0; i < n_cases; i++) k += snprintf(cmd + k, len - (size_t)k, " '%s'", cases[i].spec);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return;
    char line[512];
    while (fgets(line, sizeof line, p)) {
        double us;
        char spec[128];
        if (sscanf(line, "torch copy_tbps=%lf", &us) == 1) {
            *copy_tbps_torch = us;
        } else if (sscanf(line, "torch us=%lf spec=%127[^\n]", &us, spec) == 2) {
            for (int i = 0; i < n_cases; i++)
                if (strcmp(cases[i].spec, spec) == 0) cases[i].torch_us = us;
        } else {
            fputs(line, stdout);
        }
    }
    pclose(p);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a fatal error keeps the lines printed before it */
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int decode_only = argc > 1 && strcmp(argv[1], "--decode") == 0;
    const int one_shape = argc == 5 && strcmp(argv[1], "--decode-shape") == 0;
    int shape[3] = {0, 0, 0};
    for (int i = 0; one_shape && i < 3; i++) {
        char *end;
        const long v = strtol(argv[2 + i], &end, 10);
        if (*end || v < 1 || v > (1L << 24)) {
            static const char *const names[3] = {"M", "N", "K"};
            fprintf(stderr, "bench_ops: --decode-shape %s = \"%s\": expected a positive count\n", names[i], argv[2 + i]);
            return 2;
        }
        shape[i] = (int)v;
    }
    if (!one_shape && (argc > 2 || (argc == 2 && !quick && !decode_only))) {
        fprintf(stderr, "usage: %s [--quick | --decode | --decode-shape M N K]\n", argv[0]);
        return 2;
    }
    if (device_count() == 0 || !ops_cuda_available()) {
        fprintf(stderr, "bench_ops: no usable CUDA GPU\n");
        return 1;
    }
    char desc[256];
    if (device_describe(0, desc, sizeof desc) == 0) printf("device: %s\n", desc);
    if (ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, 0) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    const int reps = quick ? 5 : 20;
    const int T = quick ? 8192 : 32768;

    /* Copy bandwidth: 2 GiB device to device, read + write bytes. */
    copy_args cp = {NULL, NULL, (size_t)2 << 30};
    cp.src = dev_fill(cp.bytes / 2, 0, 1, 0, 0);
    cp.dst = ops_alloc(&ctx, cp.bytes);
    double copy_us = time_us(run_copy, &cp, reps);
    double copy_bw = 2.0 * cp.bytes / (copy_us * 1e-6);
    ops_free(&ctx, cp.src), ops_free(&ctx, cp.dst);

    if (one_shape) {
        printf("copy bandwidth: %.3f TB/s\n", copy_bw / 1e12);
        bench_matmul_decode("one", shape[0], shape[1], shape[2], 0, reps);
        ops_ctx_free(&ctx);
        return 0;
    }
    if (!decode_only) {
        /* Hidden sizes of Qwen3-0.6B, 1.7B, 8B and 14B; the per-head q/k norm. */
        const int hidden[] = {1024, 2048, 4096, 5120};
        for (int i = 0; i < 4; i++) bench_norm(0, T, hidden[i], reps);
        bench_norm(0, T * 32, 128, reps);
        /* LayerNorm (weight and bias) at two of those widths. */
        bench_norm(1, T, 1024, reps);
        bench_norm(1, T, 4096, reps);
        bench_rope(T, 32, 8, 128, reps);
        bench_swiglu(T / 2, 12288, reps);
        bench_embedding(T, 4096, 151936, reps);
        bench_adamw(quick ? (size_t)100000000 : (size_t)1000000000, quick ? 5 : 10);
        bench_matmul("square", 8192, 8192, 8192, 0, 0, 0, reps);
        bench_matmul("x W^T qkv", T / 2, 4096, 4096, 0, 1, 0, reps);
        bench_matmul("x W^T gate_up", T / 2, 24576, 4096, 0, 1, 0, reps);
        bench_matmul("x W^T down", T / 2, 4096, 12288, 0, 1, 0, reps);
        bench_matmul("dY W gate_up", T / 2, 4096, 24576, 0, 0, 0, reps);
        bench_matmul("dW += dY^T X", 24576, 4096, T / 2, 1, 0, 1, reps);
    }
    /* Decode steps at batch 64 of the 1.7B, 8B and 14B shapes: q|k|v, o,
     * gate|up, down and the lm head (fp32 logits); and the 1.7B MLP at
     * batch 16 and 32. */
    {
        const int hid[3] = {2048, 4096, 5120}, inter[3] = {6144, 12288, 17408}, q[3] = {2048, 4096, 5120};
        const char *names[3] = {"1.7B", "8B", "14B"};
        int clusters[SKINNY_PLAN_MAX_SPLIT + 1];
        cuda_skinny_wgmma_clusters(&ctx, clusters);
        printf("wgmma skinny clusters resident at once: %d of 2, %d of 4, %d of 8 blocks\n", clusters[2], clusters[4],
               clusters[8]);
        for (int m = 0; m < 3; m++) {
            char w[32];
            snprintf(w, sizeof w, "%s qkv", names[m]);
            bench_matmul_decode(w, 64, q[m] + 2 * 1024, hid[m], 0, reps);
            snprintf(w, sizeof w, "%s o", names[m]);
            bench_matmul_decode(w, 64, hid[m], q[m], 0, reps);
            snprintf(w, sizeof w, "%s gate_up", names[m]);
            bench_matmul_decode(w, 64, 2 * inter[m], hid[m], 0, reps);
            snprintf(w, sizeof w, "%s down", names[m]);
            bench_matmul_decode(w, 64, hid[m], inter[m], 0, reps);
            snprintf(w, sizeof w, "%s lm head", names[m]);
            bench_matmul_decode(w, 64, 151936, hid[m], 1, reps);
        }
        bench_matmul_decode("1.7B gate_up", 16, 12288, 2048, 0, reps);
        bench_matmul_decode("1.7B down", 32, 2048, 6144, 0, reps);
    }
    ops_ctx_free(&ctx);

    double copy_torch = NAN;
    run_torch(&copy_torch);
    double gemm_torch = NAN;
    for (int i = 0; i < n_cases; i++)
        if (strncmp(cases[i].spec, "matmul 8192 8192 8192", 21) == 0 && !isnan(cases[i].torch_us))
            gemm_torch = cases[i].flops / (cases[i].torch_us * 1e-6) / 1e12;

    printf("\ncopy bandwidth (cudaMemcpy D2D 2 GiB, read + write): %.3f TB/s (torch copy_: %.3f TB/s)\n",
           copy_bw / 1e12, copy_torch);
    if (!decode_only) printf("bf16 GEMM reference (torch.matmul 8192^3): %.1f TFLOP/s\n", gemm_torch);
    printf("\n");
    printf("%-34s %10s %10s %9s %10s %10s %8s\n", "case", "ours us", "TB/s|TF/s", "of limit", "torch us", "TB/s|TF/s",
           "ratio");
    for (int i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        double mine, theirs, frac;
        if (c->flops > 0) {
            mine = c->flops / (c->us * 1e-6) / 1e12;
            theirs = c->flops / (c->torch_us * 1e-6) / 1e12;
            frac = mine / gemm_torch;
        } else {
            mine = c->bytes / (c->us * 1e-6) / 1e12;
            theirs = (c->torch_bytes > 0 ? c->torch_bytes : c->bytes) / (c->torch_us * 1e-6) / 1e12;
            frac = mine / (copy_bw / 1e12);
        }
        printf("%-34s %10.1f %10.3f %9.3f %10.1f %10.3f %8.3f\n", c->label, c->us, mine, frac, c->torch_us, theirs,
               c->torch_us / c->us);
    }
    printf("\nof limit: fraction of the copy bandwidth above (memory-bound ops; target >= 0.70) or of torch's\n"
           "8192^3 GEMM rate (matmul); ratio = torch time / our time (AdamW: torch moves 28 B per parameter with\n"
           "fp32 params, ours 30 B: it also writes the bf16 copy).\n");
    return 0;
}
