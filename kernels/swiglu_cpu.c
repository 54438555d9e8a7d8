/* swiglu_cpu.c: the gated MLP activation. gu[N, 2 * inter] holds
 * [gate | up] per row (one matmul with the stacked weight), and
 * out[N, inter] = silu(gate) * up with silu(g) = g * sigmoid(g).
 * Backward, with s = sigmoid(g):
 *   dup   = dout * silu(g)
 *   dgate = dout * up * s * (1 + g * (1 - s))
 * silu is written g / (1 + exp(-g)), the form PyTorch evaluates, and it
 * saturates without overflow trouble: exp(-g) = inf gives silu = -0. */
#include <math.h>

#include "kernels/ops_cpu.h"

void cpu_swiglu_forward(ops_ctx *ctx, void *out_, const void *gu_, int N, int inter) {
    float *out = out_;
    const float *gu = gu_;
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * inter, *u = g + inter;
        float *o = out + (size_t)n * inter;
        for (int i = 0; i < inter; i++) {
            float silu = g[i] / (1.0f + expf(-g[i]));
            o[i] = silu * u[i];
        }
    }
}

void cpu_swiglu_backward(ops_ctx *ctx, void *dgu_, const void *dout_, const void *gu_, int N, int inter) {
    float *dgu = dgu_;
    const float *dout = dout_, *gu = gu_;
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * inter, *u = g + inter, *d = dout + (size_t)n * inter;
        float *dg = dgu + (size_t)n * 2 * inter, *du = dg + inter;
        for (int i = 0; i < inter; i++) {
            float s = 1.0f / (1.0f + expf(-g[i]));
            float silu = g[i] * s;
            du[i] = d[i] * silu;
            dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        }
    }
}
