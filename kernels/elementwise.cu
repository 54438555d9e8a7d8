/* elementwise.cu: the whole-buffer ops of the CUDA backend: fp32 <-> bf16
 * casts, the residual add and the sum of squares behind the global gradient
 * norm.
 *
 * Each kernel is a grid-stride loop over 16-byte vectors (8 bf16 or 4 fp32
 * per access), two vectors per step with both loads in flight before the
 * stores, and a scalar tail, used when the pointers are 16-byte aligned; a
 * scalar grid-stride loop otherwise. The sum of squares is deterministic:
 * each block of a fixed grid sums a fixed set of elements in fp64, then one
 * block adds the per-block partials in index order. */
#include "kernels/cuda_common.cuh"

#define EW_THREADS 256
#define EW_WAVES 8 /* blocks per multiprocessor: 8 x 256 threads fill one */

/* ---- casts --------------------------------------------------------------------- */

__global__ void cast_f32_to_bf16_vec(bf16 *__restrict__ dst, const float *__restrict__ src, size_t n8) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += 2 * stride) {
        /* Two vectors per step, both loads issued before the stores. */
        const size_t j = i + stride;
        float4 a = __ldcs((const float4 *)src + 2 * i), b = __ldcs((const float4 *)src + 2 * i + 1);
        float4 c = make_float4(0, 0, 0, 0), d = c;
        if (j < n8) c = __ldcs((const float4 *)src + 2 * j), d = __ldcs((const float4 *)src + 2 * j + 1);
        float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        st_stream(dst + 8 * i, f32_to_bf16x8(f));
        if (j < n8) {
            float g[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
            st_stream(dst + 8 * j, f32_to_bf16x8(g));
        }
    }
}

__global__ void cast_f32_to_bf16_scalar(bf16 *dst, const float *src, size_t i0, size_t n) {
    for (size_t i = i0 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void cast_bf16_to_f32_vec(float *__restrict__ dst, const bf16 *__restrict__ src, size_t n8) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += 2 * stride) {
        const size_t j = i + stride;
        uint4 a = ld_stream(src + 8 * i), b = j < n8 ? ld_stream(src + 8 * j) : make_uint4(0, 0, 0, 0);
        float f[8];
        bf16x8_to_f32(a, f);
        __stcs((float4 *)dst + 2 * i, make_float4(f[0], f[1], f[2], f[3]));
        __stcs((float4 *)dst + 2 * i + 1, make_float4(f[4], f[5], f[6], f[7]));
        if (j < n8) {
            bf16x8_to_f32(b, f);
            __stcs((float4 *)dst + 2 * j, make_float4(f[0], f[1], f[2], f[3]));
            __stcs((float4 *)dst + 2 * j + 1, make_float4(f[4], f[5], f[6], f[7]));
        }
    }
}

__global__ void cast_bf16_to_f32_scalar(float *dst, const bf16 *src, size_t i0, size_t n) {
    for (size_t i = i0 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" void cuda_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n) {
    if (!n) return;
    cudaStream_t st = ctx_stream(ctx);
    size_t done = 0;
    if (is_aligned16(dst) && is_aligned16(src)) {
        size_t n8 = n / 8;
        if (n8) {
            cast_f32_to_bf16_vec<<<grid_for(ctx, n8, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>((bf16 *)dst, src, n8);
            CUDA_LAUNCH_CHECK();
        }
        done = n8 * 8;
    }
    if (done < n) {
        cast_f32_to_bf16_scalar<<<grid_for(ctx, n - done, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>((bf16 *)dst, src,
                                                                                                    done, n);
        CUDA_LAUNCH_CHECK();
    }
}

extern "C" void cuda_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n) {
    if (!n) return;
    cudaStream_t st = ctx_stream(ctx);
    size_t done = 0;
    if (is_aligned16(dst) && is_aligned16(src)) {
        size_t n8 = n / 8;
        if (n8) {
            cast_bf16_to_f32_vec<<<grid_for(ctx, n8, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>(dst, (const bf16 *)src,
                                                                                               n8);
            CUDA_LAUNCH_CHECK();
        }
        done = n8 * 8;
    }
    if (done < n) {
        cast_bf16_to_f32_scalar<<<grid_for(ctx, n - done, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>(
            dst, (const bf16 *)src, done, n);
        CUDA_LAUNCH_CHECK();
    }
}

/* ---- y += x (bf16) --------------------------------------------------------------- */

__global__ void add_bf16_vec(bf16 *y, const bf16 *__restrict__ x, size_t n8) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += 2 * stride) {
        const size_t j = i + stride;
        const bool two = j < n8;
        uint4 ya = ld_stream(y + 8 * i), xa = ld_stream(x + 8 * i);
        uint4 yb = two ? ld_stream(y + 8 * j) : make_uint4(0, 0, 0, 0);
        uint4 xb = two ? ld_stream(x + 8 * j) : make_uint4(0, 0, 0, 0);
        float a[8], b[8];
        bf16x8_to_f32(ya, a);
        bf16x8_to_f32(xa, b);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] += b[k];
        st_stream(y + 8 * i, f32_to_bf16x8(a));
        if (two) {
            bf16x8_to_f32(yb, a);
            bf16x8_to_f32(xb, b);
#pragma unroll
            for (int k = 0; k < 8; k++) a[k] += b[k];
            st_stream(y + 8 * j, f32_to_bf16x8(a));
        }
    }
}

__global__ void add_bf16_scalar(bf16 *y, const bf16 *x, size_t i0, size_t n) {
    for (size_t i = i0 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(x[i]));
}

extern "C" void cuda_add(ops_ctx *ctx, void *y, const void *x, size_t n) {
    if (!n) return;
    cudaStream_t st = ctx_stream(ctx);
    size_t done = 0;
    if (is_aligned16(y) && is_aligned16(x)) {
        size_t n8 = n / 8;
        if (n8) {
            add_bf16_vec<<<grid_for(ctx, n8, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>((bf16 *)y, (const bf16 *)x, n8);
            CUDA_LAUNCH_CHECK();
        }
        done = n8 * 8;
    }
    if (done < n) {
        add_bf16_scalar<<<grid_for(ctx, n - done, EW_THREADS, EW_WAVES), EW_THREADS, 0, st>>>((bf16 *)y,
                                                                                            (const bf16 *)x, done, n);
        CUDA_LAUNCH_CHECK();
    }
}

/* ---- sum of squares ---------------------------------------------------------------- */

#define SUMSQ_THREADS 512
#define SUMSQ_WAVES 4

/* Pass 1: block b sums the squares of a fixed, strided set of elements in
 * fp64 (fp32 squares of billions of gradients of mixed size would lose the
 * small ones) and writes partial[b]. `head` elements before the first
 * 16-byte boundary are taken by block 0 so the body can use float4 loads. */
__global__ void sumsq_partial(double *partial, const float *__restrict__ x, size_t n, size_t head) {
    __shared__ double sh[32];
    double acc = 0.0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = (n - head) / 4;
    const float4 *x4 = (const float4 *)(x + head);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = __ldcs(x4 + i);
        acc = fma((double)v.x, (double)v.x, acc);
        acc = fma((double)v.y, (double)v.y, acc);
        acc = fma((double)v.z, (double)v.z, acc);
        acc = fma((double)v.w, (double)v.w, acc);
    }
    if (blockIdx.x == 0) {
        /* The unaligned head and the tail past the last full float4. */
        for (size_t i = threadIdx.x; i < head; i += blockDim.x) acc = fma((double)x[i], (double)x[i], acc);
        for (size_t i = head + 4 * n4 + threadIdx.x; i < n; i += blockDim.x) acc = fma((double)x[i], (double)x[i], acc);
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* Pass 2: one block adds the partials in a fixed order. */
__global__ void sumsq_final(double *out, const double *partial, int nparts) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

extern "C" double cuda_sumsq(ops_ctx *ctx, const float *x, size_t n) {
    if (!n) return 0.0;
    cudaStream_t st = ctx_stream(ctx);
    size_t head = (size_t)((16 - ((uintptr_t)x & 15u)) & 15u) / sizeof(float);
    if ((uintptr_t)x & 3u) DK_ABORT("ops_sumsq: fp32 buffer %p is not 4-byte aligned", (const void *)x);
    if (head > n) head = n;
    unsigned int grid = grid_for(ctx, (n - head) / 4 + 1, SUMSQ_THREADS, SUMSQ_WAVES);
    double *partial = (double *)ctx_scratch(ctx, (grid + 1) * sizeof(double), "ops_sumsq");
    sumsq_partial<<<grid, SUMSQ_THREADS, 0, st>>>(partial, x, n, head);
    CUDA_LAUNCH_CHECK();
    sumsq_final<<<1, 1024, 0, st>>>(partial + grid, partial, (int)grid);
    CUDA_LAUNCH_CHECK();
    double r = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&r, partial + grid, sizeof r, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    return r;
}
