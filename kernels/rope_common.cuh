/* rope_common.cuh: the rotation of rope.cu (see there for the arithmetic),
 * shared with the RMSNorm kernels that rotate their output or the incoming
 * gradient themselves (norm_common.cuh, ops_rmsnorm_rope_*): the same code
 * on both paths, so the fused ops give the bits of the ops in turn. */
#ifndef DK_ROPE_COMMON_CUH
#define DK_ROPE_COMMON_CUH

#include "kernels/cuda_common.cuh"

#define ROPE_MAX_HALF 512 /* D <= 1024 */

/* inv_freq[i] for i < half into shared memory, by the whole block. */
__device__ __forceinline__ void rope_inv_freq(float *inv_freq, int half, int D, float theta) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) inv_freq[i] = rope_inv_freq_at(i, D, theta);
    __syncthreads();
}

/* The 8 pairs (a_k, b_k) of two 16-byte vectors, elements i and i + D/2,
 * rotated by the angles whose cos and sin are given (sin negated for the
 * backward), and rounded to bf16. */
__device__ __forceinline__ void rope_rotate(uint4 &a, uint4 &b, const float cs[8], const float sn[8]) {
    float x1[8], x2[8], o1[8], o2[8];
    bf16x8_to_f32(a, x1);
    bf16x8_to_f32(b, x2);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        o1[k] = x1[k] * cs[k] - x2[k] * sn[k];
        o2[k] = x2[k] * cs[k] + x1[k] * sn[k];
    }
    a = f32_to_bf16x8(o1);
    b = f32_to_bf16x8(o2);
}

/* The cos and sin of position p's angles for pairs i0 .. i0 + 7 (inv_freq
 * in shared memory), sin times sign (+1 forward, -1 backward). */
__device__ __forceinline__ void rope_angles8(float cs[8], float sn[8], const float *inv_freq, int i0, float p,
                                             float sign) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        sincosf(p * inv_freq[i0 + k], &sn[k], &cs[k]);
        sn[k] *= sign;
    }
}

#endif
