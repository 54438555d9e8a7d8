/* layernorm_cpu.c: LayerNorm over rows of length C with the biased variance
 * PyTorch uses: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps);
 * b may be NULL. mean and rstd are saved per row for the backward.
 *
 * Backward, with xhat = (x - mean) * rstd and g = dout * w:
 *   dx  = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dw += sum over rows of dout * xhat,  db += sum over rows of dout
 * Mean and variance use two passes in double, so a large common offset in
 * the row does not cancel away the variance. dw and db are summed before dx
 * is written, so dx may be the dout buffer (in-place backward). */
#include <math.h>

#include "kernels/ops_cpu.h"

void cpu_layernorm_forward(ops_ctx *ctx, void *out_, float *mean, float *rstd, const void *x_, const void *w_,
                           const void *b_, int N, int C, float eps) {
    float *out = out_;
    const float *x = x_, *w = w_, *b = b_;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double s = 0.0;
        for (int c = 0; c < C; c++) s += xr[c];
        double mu = s / C, var = 0.0;
        for (int c = 0; c < C; c++) var += ((double)xr[c] - mu) * ((double)xr[c] - mu);
        var /= C;
        float m = (float)mu, r = (float)(1.0 / sqrt(var + (double)eps));
        for (int c = 0; c < C; c++) {
            float y = ((xr[c] - m) * r) * w[c];
            o[c] = b ? y + b[c] : y;
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

#define NORM_BLOCK 256

void cpu_layernorm_backward(ops_ctx *ctx, void *dx_, float *dw, float *db, const void *dout_, const void *x_,
                            const void *w_, const float *mean, const float *rstd, int N, int C) {
    float *dx = dx_;
    const float *dout = dout_, *x = x_, *w = w_;
    /* dw and db by column blocks with double accumulators (see rmsnorm_cpu.c). */
    double aw[NORM_BLOCK], ab[NORM_BLOCK];
    for (int c0 = 0; c0 < C; c0 += NORM_BLOCK) {
        int nc = C - c0 < NORM_BLOCK ? C - c0 : NORM_BLOCK;
        for (int j = 0; j < nc; j++) aw[j] = ab[j] = 0.0;
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)n * C + c0, *g = dout + (size_t)n * C + c0;
            float m = mean[n], r = rstd[n];
            for (int j = 0; j < nc; j++) {
                aw[j] += (double)g[j] * ((xr[j] - m) * r);
                ab[j] += g[j];
            }
        }
        for (int j = 0; j < nc; j++) {
            dw[c0 + j] += (float)aw[j];
            if (db) db[c0 + j] += (float)ab[j];
        }
    }
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *g = dout + (size_t)n * C;
        float *d = dx + (size_t)n * C;
        double m = mean[n], r = rstd[n], sg = 0.0, sgx = 0.0;
        for (int c = 0; c < C; c++) {
            double gw = (double)g[c] * w[c];
            sg += gw;
            sgx += gw * ((xr[c] - m) * r);
        }
        sg /= C;
        sgx /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (xr[c] - m) * r;
            d[c] = (float)(r * ((double)g[c] * w[c] - sg - xhat * sgx));
        }
    }
}
