/* adamw.cu: one AdamW step on the CUDA backend with PyTorch's semantics
 * (torch.optim.AdamW, decoupled weight decay) over fp32 master weights, the
 * bf16 parameters receiving the rounded new master value:
 *   g = grad * grad_scale
 *   p = p * (1 - lr * wd)
 *   m = m + (1 - b1) * (g - m)
 *   v = b2 v + (1 - b2) g^2
 *   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * The step scalars are formed in double on the host, exactly as the CPU
 * reference forms them, and each element's arithmetic is written with
 * round-to-nearest intrinsics so the compiler fuses no multiply-add: the
 * fp32 results are those of adamw_cpu.c, bit for bit, on a host that does not
 * contract either.
 *
 * Memory-bound: 16 bytes read and 14 written per element (grad, master, m, v
 * in; master, m, v, bf16 param out). A thread moves 4 elements per step with
 * float4 accesses when the buffers are aligned; a scalar loop handles the
 * rest. */
#include <math.h>

#include "kernels/cuda_common.cuh"

#define ADAMW_THREADS 256

typedef struct {
    float decay, step_size, bc2_sqrt, w1, beta2, w2, eps, grad_scale;
} adamw_consts;

__device__ __forceinline__ float adamw_one(float p, float g, float *m, float *v, const adamw_consts &k) {
    g = __fmul_rn(g, k.grad_scale);
    p = __fmul_rn(p, k.decay);
    float mi = __fadd_rn(*m, __fmul_rn(k.w1, __fsub_rn(g, *m)));
    float vi = __fadd_rn(__fmul_rn(*v, k.beta2), __fmul_rn(k.w2, __fmul_rn(g, g)));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    p = __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
    *m = mi;
    *v = vi;
    return p;
}

__global__ void adamw_vec(bf16 *__restrict__ param, float *__restrict__ master, const float *__restrict__ grad,
                          float *__restrict__ m, float *__restrict__ v, size_t n4, adamw_consts k) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 p = __ldcs((const float4 *)master + i), g = __ldcs((const float4 *)grad + i);
        float4 mm = __ldcs((const float4 *)m + i), vv = __ldcs((const float4 *)v + i);
        p.x = adamw_one(p.x, g.x, &mm.x, &vv.x, k);
        p.y = adamw_one(p.y, g.y, &mm.y, &vv.y, k);
        p.z = adamw_one(p.z, g.z, &mm.z, &vv.z, k);
        p.w = adamw_one(p.w, g.w, &mm.w, &vv.w, k);
        __stcs((float4 *)master + i, p);
        __stcs((float4 *)m + i, mm);
        __stcs((float4 *)v + i, vv);
        union {
            uint2 u;
            __nv_bfloat162 h[2];
        } o;
        o.h[0] = __floats2bfloat162_rn(p.x, p.y);
        o.h[1] = __floats2bfloat162_rn(p.z, p.w);
        __stcs((uint2 *)param + i, o.u);
    }
}

__global__ void adamw_scalar(bf16 *param, float *master, const float *grad, float *m, float *v, size_t i0, size_t n,
                             adamw_consts k) {
    for (size_t i = i0 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = adamw_one(master[i], grad[i], &m[i], &v[i], k);
        master[i] = p;
        param[i] = __float2bfloat16_rn(p);
    }
}

extern "C" void cuda_adamw(ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v,
                           size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                           float grad_scale) {
    if (t < 1) DK_ABORT("ops_adamw: step %d (bias correction needs t >= 1)", t);
    if (!n) return;
    adamw_consts k;
    double bc1 = 1.0 - pow((double)beta1, t);
    k.decay = (float)(1.0 - (double)lr * weight_decay);
    k.step_size = (float)(lr / bc1);
    k.bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
    k.w1 = (float)(1.0 - (double)beta1);
    k.beta2 = beta2;
    k.w2 = (float)(1.0 - (double)beta2);
    k.eps = eps;
    k.grad_scale = grad_scale;
    cudaStream_t st = ctx_stream(ctx);
    size_t done = 0;
    if (is_aligned16(master) && is_aligned16(grad) && is_aligned16(m) && is_aligned16(v) &&
        ((uintptr_t)param & 7u) == 0) {
        size_t n4 = n / 4;
        if (n4) {
            adamw_vec<<<grid_resident(ctx, adamw_vec, ADAMW_THREADS, 0, div_up(n4, ADAMW_THREADS)), ADAMW_THREADS, 0, st>>>((bf16 *)param, master, grad, m,
                                                                                    v, n4, k);
            CUDA_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {
        adamw_scalar<<<grid_for(ctx, n - done, ADAMW_THREADS, 8), ADAMW_THREADS, 0, st>>>((bf16 *)param, master, grad,
                                                                                         m, v, done, n, k);
        CUDA_LAUNCH_CHECK();
    }
}
