/* rmsnorm_cpu.c: RMSNorm over rows of length C, out = x * rstd * w with
 * rstd = 1 / sqrt(mean(x^2) + eps), the order Hugging Face's Qwen3/Llama norm
 * uses (normalise in fp32, then multiply by the weight). Also applied per head
 * for Qwen3's q/k norm, where N is tokens * heads and C the head dim.
 *
 * Backward, with r = rstd and S = sum_j dout_j w_j x_j over the row:
 *   dx_i  = r * w_i * dout_i - r^3 / C * x_i * S
 *   dw_i += sum over rows of dout_i * x_i * r
 * Row reductions and the column sums for dw are accumulated in double: dw
 * sums over every token (and head), up to millions of terms. dw is summed
 * before dx is written, so dx may be the dout buffer (in-place backward). */
#include <math.h>

#include "kernels/ops_cpu.h"

void cpu_rmsnorm_forward(ops_ctx *ctx, void *out_, float *rstd, const void *x_, const void *w_, int N, int C,
                         float eps) {
    float *out = out_;
    const float *x = x_, *w = w_;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++) o[c] = (xr[c] * r) * w[c];
        rstd[n] = r;
    }
}

#define NORM_BLOCK 256

void cpu_rmsnorm_backward(ops_ctx *ctx, void *dx_, float *dw, const void *dout_, const void *x_, const void *w_,
                          const float *rstd, int N, int C, int accumulate) {
    float *dx = dx_;
    if (accumulate && dx_ == dout_) DK_ABORT("ops_rmsnorm_backward: accumulate needs dx distinct from dout");
    const float *dout = dout_, *x = x_, *w = w_;
    /* dw by column blocks: contiguous row reads, double accumulators on the
     * stack, no scratch. */
    double acc[NORM_BLOCK];
    for (int c0 = 0; c0 < C; c0 += NORM_BLOCK) {
        int nc = C - c0 < NORM_BLOCK ? C - c0 : NORM_BLOCK;
        for (int j = 0; j < nc; j++) acc[j] = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * C + c0, *g = dout + (size_t)n * C + c0;
            float r = rstd[n];
            for (int j = 0; j < nc; j++) acc[j] += (double)g[j] * (xr[j] * r);
        }
        for (int j = 0; j < nc; j++) dw[c0 + j] += (float)acc[j];
    }
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *g = dout + (size_t)n * C;
        float *d = dx + (size_t)n * C;
        double r = rstd[n], s = 0.0;
        for (int c = 0; c < C; c++) s += (double)g[c] * w[c] * xr[c];
        double k = r * r * r * s / C;
        for (int c = 0; c < C; c++) {
            const float v = (float)(r * w[c] * g[c] - k * xr[c]);
            d[c] = accumulate ? d[c] + v : v;
        }
    }
}
