/* rope.cu: rotary position embedding on x[T, H, D] (bf16, in place) with the
 * "rotate half" pairing of Hugging Face (element i rotates with i + D/2):
 *   out_i       = x_i cos - x_{i+D/2} sin
 *   out_{i+D/2} = x_{i+D/2} cos + x_i sin,   angle = pos[t] * inv_freq_i
 * in fp32, as the CPU reference forms it: inv_freq_i = 1 / theta^(2i/D)
 * evaluated in double and rounded once (per block, into shared memory), the
 * angle one fp32 product, cos and sin by the accurate fp32 sincosf (the
 * argument stays below its fast-path bound of ~1e5 for positions < 2^16
 * whatever theta). The backward applies the inverse rotation (sin negated)
 * to the gradient in place.
 *
 * A thread owns one token, 8 consecutive frequencies and up to ROPE_HG
 * heads: it issues the loads of all its heads' two 16-byte vectors (x_i..
 * and x_{i+D/2}..) at once, computes the 8 cos/sin pairs while they are in
 * flight, and rotates and stores. (A thread per token over all 32 heads,
 * four heads in flight at a time, ran at 0.70 of the copy rate on an H200
 * at T = 32768 with 32 + 8 heads of 128; this layout at 0.84.) Other head
 * sizes (D/2 not a multiple of 8) or an unaligned buffer take a scalar path
 * with one thread per (token, i). */
#include <math.h>

#include "kernels/rope_common.cuh"

#define ROPE_THREADS 256
#define ROPE_HG 8          /* heads a thread rotates with one set of angles */

__global__ void __launch_bounds__(ROPE_THREADS)
    rope_vec(bf16 *x, const int32_t *__restrict__ pos, int T, int H, int D, float theta, float sign) {
    __shared__ float inv_freq[ROPE_MAX_HALF];
    const int half = D / 2, nv = half / 8, ng = (H + ROPE_HG - 1) / ROPE_HG;
    rope_inv_freq(inv_freq, half, D, theta);
    const size_t total = (size_t)T * ng * nv;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(idx % nv);
        const size_t tg = idx / nv;
        const int t = (int)(tg / ng), h0 = (int)(tg % ng) * ROPE_HG;
        const int nh = min(ROPE_HG, H - h0);
        bf16 *row = x + ((size_t)t * H + h0) * D + 8 * j;
        uint4 a[ROPE_HG], b[ROPE_HG];
        /* Every head's loads are issued before the angles are computed, so
         * the sincosf work runs under the memory latency. */
#pragma unroll
        for (int u = 0; u < ROPE_HG; u++) {
            if (u < nh) {
                a[u] = ld_stream(row + (size_t)u * D);
                b[u] = ld_stream(row + (size_t)u * D + half);
            }
        }
        const float p = (float)pos[t];
        float cs[8], sn[8];
        rope_angles8(cs, sn, inv_freq, 8 * j, p, sign);
#pragma unroll
        for (int u = 0; u < ROPE_HG; u++) {
            if (u < nh) {
                rope_rotate(a[u], b[u], cs, sn);
                st_stream(row + (size_t)u * D, a[u]);
                st_stream(row + (size_t)u * D + half, b[u]);
            }
        }
    }
}

__global__ void __launch_bounds__(ROPE_THREADS)
    rope_scalar(bf16 *x, const int32_t *__restrict__ pos, int T, int H, int D, float theta, float sign) {
    __shared__ float inv_freq[ROPE_MAX_HALF];
    const int half = D / 2;
    rope_inv_freq(inv_freq, half, D, theta);
    const size_t total = (size_t)T * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(idx / half), i = (int)(idx % half);
        float sn, cs;
        sincosf((float)pos[t] * inv_freq[i], &sn, &cs);
        sn *= sign;
        for (int h = 0; h < H; h++) {
            bf16 *a = x + ((size_t)t * H + h) * D + i, *b = a + half;
            float x1 = __bfloat162float(*a), x2 = __bfloat162float(*b);
            *a = __float2bfloat16_rn(x1 * cs - x2 * sn);
            *b = __float2bfloat16_rn(x2 * cs + x1 * sn);
        }
    }
}

static void rope_apply(ops_ctx *ctx, const char *op, void *x, const int32_t *pos, int T, int H, int D, float theta,
                       float sign) {
    if (D % 2 != 0) DK_ABORT("%s: head dim %d is odd", op, D);
    if (D / 2 > ROPE_MAX_HALF) DK_ABORT("%s: head dim %d is larger than %d", op, D, 2 * ROPE_MAX_HALF);
    if (T <= 0 || H <= 0 || D <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    const int half = D / 2;
    if (half % 8 == 0 && is_aligned16(x)) {
        size_t work = (size_t)T * div_up((size_t)H, ROPE_HG) * (half / 8);
        rope_vec<<<grid_resident(ctx, rope_vec, ROPE_THREADS, 0, div_up(work, ROPE_THREADS)), ROPE_THREADS, 0, st>>>((bf16 *)x, pos, T, H, D, theta, sign);
    } else {
        size_t work = (size_t)T * half;
        rope_scalar<<<grid_for(ctx, work, ROPE_THREADS, 8), ROPE_THREADS, 0, st>>>((bf16 *)x, pos, T, H, D, theta,
                                                                                   sign);
    }
    CUDA_LAUNCH_CHECK();
}

extern "C" void cuda_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta) {
    rope_apply(ctx, "ops_rope_forward", x, pos, T, H, D, theta, 1.0f);
}

extern "C" void cuda_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta) {
    rope_apply(ctx, "ops_rope_backward", dx, pos, T, H, D, theta, -1.0f);
}
