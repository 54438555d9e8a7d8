/* bench_lmhead.c: times the fused CUDA lm head (ops_lmhead_forward with
 * entropy, then ops_lmhead_backward with dlogprob and dentropy) and, in the
 * same run, the plain PyTorch version (tools/bench/torch_lmhead.py: bf16
 * logits = h W^T, fp32 log_softmax, gather, entropy, autograd backward), and
 * prints tokens/s of both, their ratio, the GEMM rate against the bf16
 * tensor-core limit and the memory each needs beyond inputs and gradients.
 *
 *   bench_lmhead [T C V chunk]      (default 8192 4096 151936 8192)
 *
 * Our scratch is what the model gives the op: T x chunk floats, so the
 * backward walks the tokens in blocks (see kernels/lmhead.cu). We run four
 * GEMMs of 2 T C V FLOPs (the backward recomputes the logits), torch three;
 * the GEMM rate below counts our four. DK_PYTHON names the python that has
 * torch (default python3); DK_SOURCE the checkout (default the current
 * directory). A third row keeps the logits from the forward (T x V fp32,
 * model_keep_logits) so that the backward skips their recompute: three GEMMs.
 * Two more rows pin the cuBLASLt path (ops_tuning.lmhead_kernel -1: fp32
 * logits through scratch) against the default one-kernel passes of
 * lmhead_wgmma.cu (clusters of two blocks sharing W's tiles), and two the
 * one-kernel passes without clusters (lmhead_kernel 1). */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "tools/bench/bench_stats.h"

#define PEAK_TFLOPS 800.0 /* measured bf16 8192^3 GEMM on the H200 (issue 3) */

static void fill_uniform(float *x, size_t n, uint64_t seed, float amp) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = amp * (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
}

typedef struct {
    ops_ctx *ctx;
    void *h, *W, *dh;
    float *logprob, *entropy, *lse, *dlogprob, *dentropy, *dW;
    float *keep; /* NULL: the backward recomputes the logits */
    int32_t *target;
    int T, C, V, chunk;
} lm_args;

static void run_fwd(lm_args *a) {
    ops_lmhead_forward(a->ctx, a->logprob, a->entropy, a->lse, a->h, a->W, a->target, a->T, a->C, a->V, 1.0f,
                       a->chunk, a->keep);
}

static void run_fwd_bwd(lm_args *a) {
    run_fwd(a);
    ops_lmhead_backward(a->ctx, a->dh, a->dW, a->dlogprob, a->dentropy, a->h, a->W, a->target, a->lse, a->entropy,
                        a->T, a->C, a->V, 1.0f, a->chunk, a->keep);
}

static double time_ms(void (*fn)(lm_args *), lm_args *a, int reps) {
    fn(a);
    ops_sync(a->ctx);
    double t[9];
    for (int r = 0; r < reps; r++) {
        double t0 = dk_now();
        fn(a);
        ops_sync(a->ctx);
        t[r] = (dk_now() - t0) * 1e3;
    }
    qsort(t, reps, sizeof t[0], bench_cmp_double);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a fatal error keeps the lines printed before it */
    int T = 8192, C = 4096, V = 151936, chunk = 8192;
    if (argc != 1 && argc != 5) {
        fprintf(stderr, "usage: %s [T C V chunk]\n", argv[0]);
        return 2;
    }
    if (argc == 5) T = atoi(argv[1]), C = atoi(argv[2]), V = atoi(argv[3]), chunk = atoi(argv[4]);
    if (T <= 0 || C <= 0 || V <= 0 || chunk <= 0) {
        fprintf(stderr, "bench_lmhead: bad shape T=%d C=%d V=%d chunk=%d\n", T, C, V, chunk);
        return 2;
    }
    if (device_count() == 0 || !ops_cuda_available()) {
        fprintf(stderr, "bench_lmhead: no usable CUDA GPU\n");
        return 1;
    }
    char desc[256];
    if (device_describe(0, desc, sizeof desc) == 0) printf("device: %s\n", desc);

    const size_t n = (size_t)(chunk < V ? chunk : V), scratch = (size_t)T * n * sizeof(float);
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, scratch) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    ctx.scratch_size = scratch; /* the model's size, even where the context reserves more */
    lm_args a = {.ctx = &ctx, .T = T, .C = C, .V = V, .chunk = chunk};
    const size_t nh = (size_t)T * C, nw = (size_t)V * C;
    float *host = dk_malloc(nw * sizeof(float));
    a.h = ops_alloc(&ctx, nh * 2);
    fill_uniform(host, nh, 1, 1.7f);
    ops_upload_act(&ctx, a.h, host, nh);
    a.W = ops_alloc(&ctx, nw * 2);
    fill_uniform(host, nw, 2, 1.7f / sqrtf((float)C));
    ops_upload_act(&ctx, a.W, host, nw);
    free(host);
    a.dh = ops_alloc(&ctx, nh * 2);
    a.dW = ops_alloc(&ctx, nw * sizeof(float));
    a.logprob = ops_alloc(&ctx, (size_t)T * 4);
    a.entropy = ops_alloc(&ctx, (size_t)T * 4);
    a.lse = ops_alloc(&ctx, (size_t)T * 4);
    float *g = dk_malloc((size_t)T * 4);
    int32_t *tg = dk_malloc((size_t)T * 4);
    for (int t = 0; t < T; t++) g[t] = 1.0f / T, tg[t] = (int32_t)(((uint64_t)t * 2654435761u) % (uint64_t)V);
    a.dlogprob = ops_alloc(&ctx, (size_t)T * 4);
    ops_upload(&ctx, a.dlogprob, g, (size_t)T * 4);
    for (int t = 0; t < T; t++) g[t] = 0.01f / T;
    a.dentropy = ops_alloc(&ctx, (size_t)T * 4);
    ops_upload(&ctx, a.dentropy, g, (size_t)T * 4);
    a.target = ops_alloc(&ctx, (size_t)T * 4);
    ops_upload(&ctx, a.target, tg, (size_t)T * 4);
    ops_sync(&ctx);

    double ms_fwd = time_ms(run_fwd, &a, 5), ms_all = time_ms(run_fwd_bwd, &a, 5);
    ctx.tuning.lmhead_kernel = -1; /* the cuBLASLt path: fp32 logits through scratch */
    double ms_fwd_bl = time_ms(run_fwd, &a, 5), ms_all_bl = time_ms(run_fwd_bwd, &a, 5);
    ctx.tuning.lmhead_kernel = 1; /* one block a tile row, W's tiles read by each */
    double ms_fwd_one = time_ms(run_fwd, &a, 5), ms_all_one = time_ms(run_fwd_bwd, &a, 5);
    ctx.tuning.lmhead_kernel = 0;
    const size_t keep_bytes = (size_t)T * V * sizeof(float);
    a.keep = ops_alloc(&ctx, keep_bytes);
    double ms_keep = time_ms(run_fwd_bwd, &a, 5);
    ops_free(&ctx, a.keep);
    a.keep = NULL;

    const char *py = getenv("DK_PYTHON"), *src = getenv("DK_SOURCE");
    char cmd[1024], line[512];
    snprintf(cmd, sizeof cmd, "%s %s/tools/bench/torch_lmhead.py %d %d %d", py ? py : "python3", src ? src : ".", T, C,
             V);
    double t_fwd = NAN, t_all = NAN, t_mem = NAN;
    FILE *p = popen(cmd, "r");
    if (p) {
        while (fgets(line, sizeof line, p)) {
            double x, y, z;
            if (sscanf(line, "torch fwd_ms=%lf fwdbwd_ms=%lf extra_bytes=%lf", &x, &y, &z) == 3)
                t_fwd = x, t_all = y, t_mem = z;
            else fputs(line, stdout);
        }
        pclose(p);
    }

    const double gemm = 2.0 * T * (double)C * V;
    printf("fused lm head, T=%d C=%d V=%d chunk=%d (logprob + entropy, forward and backward)\n", T, C, V, chunk);
    printf("%-16s %10s %12s %12s %10s %12s %8s\n", "", "ours ms", "tokens/s", "GEMM of 800", "torch ms", "tokens/s",
           "ratio");
    const char *names[7] = {"forward",         "forward+backward", "  logits kept", "  cuBLASLt fwd",
                            "  cuBLASLt f+b",  "  no-cluster fwd", "  no-cluster f+b"};
    double ours[7] = {ms_fwd, ms_all, ms_keep, ms_fwd_bl, ms_all_bl, ms_fwd_one, ms_all_one};
    double theirs[7] = {t_fwd, t_all, t_all, t_fwd, t_all, t_fwd, t_all}, ng[7] = {1, 4, 3, 1, 4, 1, 4};
    for (int i = 0; i < 7; i++)
        printf("%-16s %10.2f %12.0f %12.3f %10.2f %12.0f %8.3f\n", names[i], ours[i], T / (ours[i] * 1e-3),
               ng[i] * gemm / (ours[i] * 1e-3) / 1e12 / PEAK_TFLOPS, theirs[i], T / (theirs[i] * 1e-3),
               theirs[i] / ours[i]);
    printf("ratio = our tokens/s / torch tokens/s\n");
    printf("memory beyond inputs, outputs and gradients: ours %.2f GiB (scratch T x chunk fp32), torch %.2f GiB; "
           "saved %.2f GiB\n",
           scratch / 1073741824.0, t_mem / 1073741824.0, (t_mem - scratch) / 1073741824.0);
    printf("one-kernel passes (ops_tuning.lmhead_kernel 0) against cuBLASLt logits (-1): forward %.3fx, "
           "forward+backward %.3fx\n",
           ms_fwd_bl / ms_fwd, ms_all_bl / ms_all);
    printf("clusters of two (lmhead_kernel 0) against one block a tile (1): forward %.3fx, forward+backward %.3fx\n",
           ms_fwd_one / ms_fwd, ms_all_one / ms_all);
    printf("logits kept: %.2f GiB more (T x V fp32), %.1f%% less forward+backward time\n", keep_bytes / 1073741824.0,
           100.0 * (1.0 - ms_keep / ms_all));

    void *dev[] = {a.h, a.W, a.dh, a.dW, a.logprob, a.entropy, a.lse, a.dlogprob, a.dentropy, a.target};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ops_free(&ctx, dev[i]);
    free(g);
    free(tg);
    ops_ctx_free(&ctx);
    return isnan(t_fwd) ? 1 : 0;
}
