/* rope_cpu.c: rotary position embedding on x[T, H, D], in place, with the
 * "rotate half" pairing of Hugging Face (element i rotates with i + D/2):
 *   out_i       = x_i cos - x_{i+D/2} sin
 *   out_{i+D/2} = x_{i+D/2} cos + x_i sin,   angle = pos[t] * inv_freq_i.
 * The angle is formed in fp32 the way transformers forms it (inv_freq =
 * 1 / theta^(2i/D) as an fp32 value, then one fp32 product with the
 * position), because at large positions the rounding of that product, not of
 * cos/sin, decides agreement with the reference. theta^(2i/D) is evaluated in
 * double and rounded once, so inv_freq is the correctly rounded fp32 value on
 * every platform (torch's vectorised fp32 pow is occasionally one ulp away).
 * cos and sin are likewise evaluated in double and rounded once. The backward
 * applies the inverse rotation (the transpose of an orthogonal map) to the
 * gradient in place.
 *
 * Angles are recomputed on every call (the op may not keep tables); they are
 * shared by all heads of a token, one block of frequencies at a time. */
#include <math.h>

#include "kernels/ops_cpu.h"

#define ROPE_BLOCK 64

static void rope_apply(const char *op, float *x, const int32_t *pos, int T, int H, int D, float theta, float sign) {
    if (D % 2 != 0) DK_ABORT("%s: head dim %d is odd", op, D);
    int half = D / 2;
    float cs[ROPE_BLOCK], sn[ROPE_BLOCK];
    for (int t = 0; t < T; t++) {
        if (pos[t] < 0) DK_ABORT("%s: token %d has negative position %d", op, t, (int)pos[t]);
        float p = (float)pos[t];
        for (int i0 = 0; i0 < half; i0 += ROPE_BLOCK) {
            int ni = half - i0 < ROPE_BLOCK ? half - i0 : ROPE_BLOCK;
            for (int j = 0; j < ni; j++) {
                float expo = (float)(2 * (i0 + j)) / (float)D;
                float inv_freq = 1.0f / (float)pow((double)theta, (double)expo);
                float angle = p * inv_freq;
                cs[j] = (float)cos((double)angle);
                sn[j] = sign * (float)sin((double)angle);
            }
            for (int h = 0; h < H; h++) {
                float *a = x + ((size_t)t * H + h) * D + i0, *b = a + half;
                for (int j = 0; j < ni; j++) {
                    float x1 = a[j], x2 = b[j];
                    a[j] = x1 * cs[j] - x2 * sn[j];
                    b[j] = x2 * cs[j] + x1 * sn[j];
                }
            }
        }
    }
}

void cpu_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta) {
    rope_apply("ops_rope_forward", x, pos, T, H, D, theta, 1.0f);
}

void cpu_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta) {
    rope_apply("ops_rope_backward", dx, pos, T, H, D, theta, -1.0f);
}
