/* swiglu.cu: the gated MLP activation on the CUDA backend. gu[N, 2 * inter]
 * holds [gate | up] per row; out[N, inter] = silu(gate) * up with silu(g) =
 * g / (1 + exp(-g)) in fp32 (the form PyTorch evaluates; exp(-g) = inf gives
 * -0, no NaN). Backward, with s = sigmoid(g):
 *   dup = dout * silu(g),   dgate = dout * up * s * (1 + g * (1 - s)).
 * One thread per 8 columns of a row: 16-byte loads of gate, up (and dout),
 * 16-byte stores; a scalar path for inter % 8 != 0 or unaligned buffers. */
#include "kernels/cuda_common.cuh"

#define SWIGLU_THREADS 256


__global__ void swiglu_fwd_vec(bf16 *__restrict__ out, const bf16 *__restrict__ gu, size_t nvec, int iv) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / iv, j = i % iv;
        const bf16 *g = gu + n * 16 * iv + 8 * j; /* row n of [gate | up], 2 * 8 * iv elements */
        float gf[8], uf[8], o[8];
        bf16x8_to_f32(ld_stream(g), gf);
        bf16x8_to_f32(ld_stream(g + 8 * iv), uf);
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = silu_f(gf[k]) * uf[k];
        st_stream(out + 8 * i, f32_to_bf16x8(o));
    }
}

__global__ void swiglu_fwd_scalar(bf16 *out, const bf16 *gu, size_t total, int inter) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / inter, j = i % inter;
        float g = __bfloat162float(gu[n * 2 * inter + j]), u = __bfloat162float(gu[n * 2 * inter + inter + j]);
        out[i] = __float2bfloat16_rn(silu_f(g) * u);
    }
}

__global__ void swiglu_bwd_vec(bf16 *__restrict__ dgu, const bf16 *__restrict__ dout, const bf16 *__restrict__ gu,
                               size_t nvec, int iv) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / iv, j = i % iv, off = n * 16 * iv + 8 * j;
        float gf[8], uf[8], df[8], dg[8], du[8];
        bf16x8_to_f32(ld_stream(gu + off), gf);
        bf16x8_to_f32(ld_stream(gu + off + 8 * iv), uf);
        bf16x8_to_f32(ld_stream(dout + 8 * i), df);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float s = 1.0f / (1.0f + expf(-gf[k]));
            du[k] = df[k] * (gf[k] * s);
            dg[k] = df[k] * uf[k] * s * (1.0f + gf[k] * (1.0f - s));
        }
        st_stream(dgu + off, f32_to_bf16x8(dg));
        st_stream(dgu + off + 8 * iv, f32_to_bf16x8(du));
    }
}

__global__ void swiglu_bwd_scalar(bf16 *dgu, const bf16 *dout, const bf16 *gu, size_t total, int inter) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / inter, j = i % inter, off = n * 2 * inter + j;
        float g = __bfloat162float(gu[off]), u = __bfloat162float(gu[off + inter]), d = __bfloat162float(dout[i]);
        float s = 1.0f / (1.0f + expf(-g));
        dgu[off + inter] = __float2bfloat16_rn(d * (g * s));
        dgu[off] = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
    }
}

extern "C" void cuda_swiglu_forward(ops_ctx *ctx, void *out, const void *gu, int N, int inter) {
    if (N <= 0 || inter <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    if (inter % 8 == 0 && is_aligned16(out) && is_aligned16(gu)) {
        size_t nvec = (size_t)N * inter / 8;
        swiglu_fwd_vec<<<grid_resident(ctx, swiglu_fwd_vec, SWIGLU_THREADS, 0, div_up(nvec, SWIGLU_THREADS)),
                         SWIGLU_THREADS, 0, st>>>((bf16 *)out,
                                                                                         (const bf16 *)gu, nvec,
                                                                                         inter / 8);
    } else {
        size_t total = (size_t)N * inter;
        swiglu_fwd_scalar<<<grid_for(ctx, total, SWIGLU_THREADS, 8), SWIGLU_THREADS, 0, st>>>((bf16 *)out,
                                                                                             (const bf16 *)gu, total,
                                                                                             inter);
    }
    CUDA_LAUNCH_CHECK();
}

extern "C" void cuda_swiglu_backward(ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter) {
    if (N <= 0 || inter <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    if (inter % 8 == 0 && is_aligned16(dgu) && is_aligned16(dout) && is_aligned16(gu)) {
        size_t nvec = (size_t)N * inter / 8;
        swiglu_bwd_vec<<<grid_resident(ctx, swiglu_bwd_vec, SWIGLU_THREADS, 0, div_up(nvec, SWIGLU_THREADS)),
                         SWIGLU_THREADS, 0, st>>>(
            (bf16 *)dgu, (const bf16 *)dout, (const bf16 *)gu, nvec, inter / 8);
    } else {
        size_t total = (size_t)N * inter;
        swiglu_bwd_scalar<<<grid_for(ctx, total, SWIGLU_THREADS, 8), SWIGLU_THREADS, 0, st>>>(
            (bf16 *)dgu, (const bf16 *)dout, (const bf16 *)gu, total, inter);
    }
    CUDA_LAUNCH_CHECK();
}
