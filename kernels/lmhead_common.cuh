/* lmhead_common.cuh: the running softmax statistics of a set of logits that
 * both lm head paths reduce and merge (lmhead.cu's per-chunk kernel and
 * lmhead_wgmma.cu's per-tile partials), so both take the same arithmetic. */
#ifndef DK_LMHEAD_COMMON_CUH
#define DK_LMHEAD_COMMON_CUH

#include <math.h>
#include <stdio.h>

#include "kernels/cuda_common.cuh"

/* Running (max m, s = sum e^(z-m), a = sum e^(z-m) (z-m)) of a set of
 * logits; s == 0 marks the empty set. */
struct lmh_stat {
    float m, s, a;
};

__device__ __forceinline__ lmh_stat lmh_merge(lmh_stat x, lmh_stat y) {
    if (y.s == 0.0f) return x;
    if (x.s == 0.0f) return y;
    const float m = fmaxf(x.m, y.m);
    const float dx = x.m - m, dy = y.m - m, cx = __expf(dx), cy = __expf(dy);
    lmh_stat r;
    r.m = m;
    r.s = cx * x.s + cy * y.s;
    r.a = cx * (x.a + x.s * dx) + cy * (y.a + y.s * dy);
    return r;
}

__device__ __forceinline__ lmh_stat lmh_shfl(lmh_stat x, int o) {
    lmh_stat r;
    r.m = __shfl_xor_sync(0xffffffffu, x.m, o);
    r.s = __shfl_xor_sync(0xffffffffu, x.s, o);
    r.a = __shfl_xor_sync(0xffffffffu, x.a, o);
    return r;
}

/* The set's logsumexp l and a = sum p (z - l), in double. */
__device__ __forceinline__ void lmh_finish(lmh_stat st, double *l, double *a) {
    const double ls = log((double)st.s);
    *l = st.m + ls;
    *a = (double)st.a / st.s - ls;
}

/* A forward's target past the vocabulary stops the kernel, naming it
 * (negative targets are masked tokens). */
__device__ __forceinline__ void lmh_check_target(int t, int tg, int V) {
    if (tg >= V) {
        printf("lmhead_forward: target[%d] = %d is outside the vocabulary of %d\n", t, tg, V);
        __trap();
    }
}

#endif
