/* elementwise_cpu.c: the small whole-buffer ops of the CPU backend: residual
 * add, the sum of squares behind the global gradient norm, and the fp32 <-> act casts, which are
 * copies here because act is float on this backend. */
#include <string.h>

#include "kernels/ops_cpu.h"

void cpu_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n) {
    if (n && dst != (const void *)src) memmove(dst, src, n * sizeof(float));
}

void cpu_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n) {
    if (n && (const void *)dst != src) memmove(dst, src, n * sizeof(float));
}

void cpu_add(ops_ctx *ctx, void *y_, const void *x_, size_t n) {
    float *y = y_;
    const float *x = x_;
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Accumulated in double: the global gradient norm sums billions of squares of
 * very different sizes, and an fp32 running sum would stop growing once it is
 * 2^24 times larger than the next term. Four partial sums let the compiler
 * keep several additions in flight without reassociating. */
double cpu_sumsq(ops_ctx *ctx, const float *x, size_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++) s0 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}
