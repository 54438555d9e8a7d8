/* adamw_cpu.c: one AdamW step with PyTorch's semantics (torch.optim.AdamW,
 * decoupled weight decay), on fp32 master weights:
 *   g = grad * grad_scale
 *   p = p * (1 - lr * wd)
 *   m = m + (1 - b1) * (g - m)          (torch's lerp; = b1 m + (1 - b1) g)
 *   v = b2 v + (1 - b2) g^2
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The step-dependent scalars are formed in double, as PyTorch forms them in
 * Python floats; the per-element arithmetic is fp32 in torch's order. param
 * (act) receives the new master value; on this backend param may be the
 * master buffer itself. */
#include <math.h>

#include "kernels/ops_cpu.h"

void cpu_adamw(ops_ctx *ctx, void *param_, float *master, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    if (t < 1) DK_ABORT("ops_adamw: step %d (bias correction needs t >= 1)", t);
    float *param = param_;
    double bc1 = 1.0 - pow((double)beta1, t);
    double bc2_sqrt = sqrt(1.0 - pow((double)beta2, t));
    float decay = (float)(1.0 - (double)lr * weight_decay);
    float step_size = (float)(lr / bc1);
    float bc2_sqrt_f = (float)bc2_sqrt;
    float w1 = (float)(1.0 - (double)beta1);
    float w2 = (float)(1.0 - (double)beta2);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float p = master[i] * decay;
        float mi = m[i] + w1 * (g - m[i]);
        float vi = v[i] * beta2 + w2 * (g * g);
        float denom = sqrtf(vi) / bc2_sqrt_f + eps;
        p = p - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        param[i] = p;
    }
}
