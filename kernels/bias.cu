/* bias.cu: the bias of a linear layer (Qwen2's q/k/v projections, an
 * optional output bias): y[N,C] += bias[C] in bf16, and its gradient, the
 * column sums of dy accumulated into an fp32 dbias.
 *
 * The column sums are deterministic without atomics: a 2-D grid gives each
 * block a strip of columns and a fixed share of the rows; the block reduces
 * its rows in a fixed order and writes one row of partial sums to scratch;
 * a second kernel (colsum_partials_acc) adds the partials of each column in a
 * fixed order and accumulates the total into dbias. */
#include "kernels/cuda_common.cuh"

__global__ void bias_forward_vec(bf16 *y, const bf16 *__restrict__ bias, size_t n8, int c8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        float a[8], b[8];
        bf16x8_to_f32(ld_stream(y + 8 * i), a);
        bf16x8_to_f32(*(const uint4 *)(bias + 8 * (i % c8)), b);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] += b[k];
        st_stream(y + 8 * i, f32_to_bf16x8(a));
    }
}

__global__ void bias_forward_scalar(bf16 *y, const bf16 *bias, size_t n, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + __bfloat162float(bias[i % C]));
}

extern "C" void cuda_bias_forward(ops_ctx *ctx, void *y, const void *bias, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    size_t n = (size_t)N * C;
    if (C % 8 == 0 && is_aligned16(y) && is_aligned16(bias)) {
        bias_forward_vec<<<grid_for(ctx, n / 8, 256, 8), 256, 0, st>>>((bf16 *)y, (const bf16 *)bias, n / 8, C / 8);
    } else {
        bias_forward_scalar<<<grid_for(ctx, n, 256, 8), 256, 0, st>>>((bf16 *)y, (const bf16 *)bias, n, C);
    }
    CUDA_LAUNCH_CHECK();
}

#define COLSUM_X 32 /* threads across columns (one warp) */
#define COLSUM_Y 8  /* threads down rows */

/* partial[blockIdx.y][c] = sum of dy[r][c] over this block's rows: rows
 * blockIdx.y * COLSUM_Y + threadIdx.y, stepping by gridDim.y * COLSUM_Y. */
template <int VEC>
__global__ void __launch_bounds__(COLSUM_X *COLSUM_Y)
    bias_colsum_partial(float *partial, const bf16 *__restrict__ dy, int N, int C) {
    __shared__ float sh[COLSUM_Y][COLSUM_X * VEC];
    pdl_launch_dependents();
    const int col = (blockIdx.x * COLSUM_X + threadIdx.x) * VEC;
    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (col < C) {
        for (int r = blockIdx.y * COLSUM_Y + threadIdx.y; r < N; r += gridDim.y * COLSUM_Y) {
            const bf16 *row = dy + (size_t)r * C + col;
            if (VEC == 8) {
                float f[8];
                bf16x8_to_f32(ld_stream(row), f);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += f[k];
            } else {
                acc[0] += __bfloat162float(row[0]);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) sh[threadIdx.y][threadIdx.x * VEC + k] = acc[k];
    __syncthreads();
    /* Fixed-order sum over the COLSUM_Y row lanes. */
    for (int j = threadIdx.y * COLSUM_X + threadIdx.x; j < COLSUM_X * VEC; j += COLSUM_X * COLSUM_Y) {
        int c = blockIdx.x * COLSUM_X * VEC + j;
        if (c >= C) continue;
        float s = 0.0f;
#pragma unroll
        for (int y = 0; y < COLSUM_Y; y++) s += sh[y][j];
        partial[(size_t)blockIdx.y * C + c] = s;
    }
}

extern "C" void cuda_bias_backward(ops_ctx *ctx, float *dbias, const void *dy, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t st = ctx_stream(ctx);
    const int vec = (C % 8 == 0 && is_aligned16(dy)) ? 8 : 1;
    const unsigned gx = div_up((size_t)C, (size_t)COLSUM_X * vec);
    /* Row splits: enough blocks for every multiprocessor, at least ~16 rows
     * per thread so the partials stay a small fraction of the traffic, and
     * no more partial rows than the scratch holds. */
    size_t want = div_up((size_t)cuda_sm_count(ctx) * 4, gx);
    size_t most = div_up((size_t)N, (size_t)COLSUM_Y * 16);
    size_t fit = ctx->scratch_size / ((size_t)C * sizeof(float));
    size_t S = want < most ? want : most;
    if (S > fit) S = fit;
    if (S > 65535) S = 65535;
    if (S < 1) S = 1;
    float *partial = (float *)ctx_scratch(ctx, S * (size_t)C * sizeof(float), "ops_bias_backward");
    dim3 grid(gx, (unsigned)S), block(COLSUM_X, COLSUM_Y);
    if (vec == 8) bias_colsum_partial<8><<<grid, block, 0, st>>>(partial, (const bf16 *)dy, N, C);
    else bias_colsum_partial<1><<<grid, block, 0, st>>>(partial, (const bf16 *)dy, N, C);
    CUDA_LAUNCH_CHECK();
    colsum_partials_launch(st, dbias, partial, (int)S, C);
    CUDA_LAUNCH_CHECK();
}
