/* bias_cpu.c: the bias of a linear layer (Qwen2's q/k/v projections, an
 * optional output bias): y[N,C] += bias[C], and its gradient, the column sums
 * of dy accumulated into an fp32 dbias. */
#include "kernels/ops_cpu.h"

void cpu_bias_forward(ops_ctx *ctx, void *y_, const void *bias_, int N, int C) {
    float *y = y_;
    const float *bias = bias_;
    for (int n = 0; n < N; n++) {
        float *row = y + (size_t)n * C;
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
}

/* Column sums over up to tens of thousands of rows, accumulated in double.
 * Columns are taken in blocks whose accumulators live on the stack, so rows
 * are still read contiguously and no scratch memory is needed. */
#define BIAS_BLOCK 256

void cpu_bias_backward(ops_ctx *ctx, float *dbias, const void *dy_, int N, int C) {
    const float *dy = dy_;
    double acc[BIAS_BLOCK];
    for (int c0 = 0; c0 < C; c0 += BIAS_BLOCK) {
        int nc = C - c0 < BIAS_BLOCK ? C - c0 : BIAS_BLOCK;
        for (int j = 0; j < nc; j++) acc[j] = 0.0;
        for (int n = 0; n < N; n++) {
            const float *row = dy + (size_t)n * C + c0;
            for (int j = 0; j < nc; j++) acc[j] += row[j];
        }
        for (int j = 0; j < nc; j++) dbias[c0 + j] += (float)acc[j];
    }
}
