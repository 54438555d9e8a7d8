/* cuda_common.cuh: what every CUDA source of the op table shares: the check
 * macros (a CUDA or cuBLAS failure aborts with file:line, as llm.c does: such
 * a failure means a broken device or a programming error, not bad input),
 * 16-byte bf16 vectors and their fp32 conversions, warp and block reductions,
 * and launch helpers that size grids from the multiprocessor count.
 *
 * The memory-bound kernels move 16 bytes per thread and access (8 bf16 or 4
 * fp32) when every pointer is 16-byte aligned and the row length allows it,
 * and fall back to a scalar path otherwise: parameter views inside a flat
 * layer buffer are not always aligned in small test configs. */
#ifndef DK_CUDA_COMMON_CUH
#define DK_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* The project's C headers, with C linkage for this C++ translation unit;
 * first here, before anything else includes them. */
extern "C" {
#include "common/error.h"
#include "common/util.h"
}
#include "kernels/ops_cuda.h"

#define CUDA_CHECK(call)                                                                            \
    do {                                                                                            \
        cudaError_t cuda_check_e_ = (call);                                                         \
        if (cuda_check_e_ != cudaSuccess)                                                           \
            dk_abort_at(__FILE__, __LINE__, "CUDA error %s: %s (%s)", cudaGetErrorName(cuda_check_e_), \
                        cudaGetErrorString(cuda_check_e_), #call);                                  \
    } while (0)

#define CUBLAS_CHECK(call)                                                                          \
    do {                                                                                            \
        cublasStatus_t cublas_check_s_ = (call);                                                    \
        if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                               \
            dk_abort_at(__FILE__, __LINE__, "cuBLAS error %d: %s (%s)", (int)cublas_check_s_,         \
                        cublasLtGetStatusString(cublas_check_s_), #call);                           \
    } while (0)

/* After every launch: a bad configuration is reported at its call site. */
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

typedef __nv_bfloat16 bf16;

static inline cudaStream_t ctx_stream(const ops_ctx *ctx) { return (cudaStream_t)ctx->stream; }

/* Multiprocessor count of the ctx's GPU (memory.cu caches it per device). */
int cuda_sm_count(const ops_ctx *ctx);
/* Whether the ctx's GPU has compute capability 9.0, which the sm_90a code
 * (wgmma, TMA) needs; asked once per device. */
int cuda_is_sm90(const ops_ctx *ctx);
/* CTAs of `kernel` resident per multiprocessor at `block` threads and `smem`
 * bytes of dynamic shared memory, which is first made the kernel's limit
 * (so a kernel is asked with the one size it launches with). Asked once per
 * device and remembered (memory.cu): a launch path may call it every time. */
int cuda_kernel_per_sm(const ops_ctx *ctx, const void *kernel, int block, size_t smem);
/* Clusters of `cluster_y` CTAs of `kernel` (block threads, smem bytes,
 * which cuda_kernel_per_sm makes its limit) the GPU holds at once: fewer
 * than sms / cluster_y where a GPC's multiprocessors do not divide evenly.
 * Asked once per device and remembered, as cuda_kernel_per_sm (memory.cu). */
int cuda_clusters_resident(const ops_ctx *ctx, const void *kernel, int block, size_t smem, int cluster_y);
/* Drops matmul.cu's cache of cuBLASLt descriptors and algorithms; memory.cu
 * calls it when the last context is freed. */
void cuda_matmul_cache_clear(void);
/* Orders every copy queued on the ctx's copy lanes from now on after the
 * work queued on its stream so far (event.cu); cuda_alloc calls it behind
 * its zeroing, so that a lane's first copy into new memory lands after it. */
void cuda_lanes_follow(ops_ctx *ctx);

/* Scratch of at least `bytes`, or an abort that names the op: the context
 * reserves CUDA_MIN_SCRATCH, which covers every op's need at model sizes. */
static inline void *ctx_scratch(const ops_ctx *ctx, size_t bytes, const char *op) {
    if (bytes > ctx->scratch_size)
        DK_ABORT("%s: needs %zu bytes of scratch, the context holds %zu", op, bytes, ctx->scratch_size);
    return ctx->scratch;
}

static inline int is_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static inline unsigned int div_up(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }

/* Split counts of the kernels that cut a long axis into chunks and write
 * fp32 partials per chunk to ctx->scratch (matmul_skinny.cu, paged
 * attention): n lowered until the partials, per_split bytes each, fit; at
 * least 1. */
static inline int splits_in_scratch(const ops_ctx *ctx, int n, size_t per_split) {
    if (n > 1 && (size_t)n * per_split > ctx->scratch_size) n = (int)(ctx->scratch_size / per_split);
    return n < 1 ? 1 : n;
}

/* len cut into at most *n chunks, each a multiple of align: returns the
 * chunk and sets *n to the chunks it takes (fewer when rounding up left the
 * last ones empty). */
static inline int split_chunk(int len, int align, int *n) {
    int chunk = (len + *n - 1) / *n;
    chunk = (chunk + align - 1) / align * align;
    if (chunk < align) chunk = align;
    *n = (len + chunk - 1) / chunk;
    return chunk;
}

/* Blocks for a grid-stride kernel over `work` items of `per_block` each:
 * enough to fill every multiprocessor several times, never more than needed. */
static inline unsigned int grid_for(const ops_ctx *ctx, size_t work, unsigned int per_block, int waves) {
    size_t need = (work + per_block - 1) / per_block;
    size_t cap = (size_t)cuda_sm_count(ctx) * (size_t)waves;
    size_t g = need < cap ? need : cap;
    return (unsigned int)(g > 0 ? g : 1);
}

#ifdef __CUDACC__
/* Blocks for a grid-stride kernel: as many as can be resident at once (the
 * kernel's occupancy times the multiprocessor count), never more than the
 * work needs. A grid larger than that would run in a second, partial wave
 * that leaves most of the machine idle at the end. Fixed for a given device
 * and kernel, so work-to-block assignment (and any per-block partial sum)
 * does not change from run to run. */
template <typename K>
static inline unsigned int grid_resident(const ops_ctx *ctx, K kernel, int block, size_t smem, size_t work_blocks) {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem));
    size_t cap = (size_t)cuda_sm_count(ctx) * (size_t)(per_sm > 0 ? per_sm : 1);
    size_t g = work_blocks < cap ? work_blocks : cap;
    return (unsigned int)(g > 0 ? g : 1);
}
#endif

/* ---- device helpers ------------------------------------------------------------ */

#ifdef __CUDACC__

/* RoPE's inverse frequency of pair i for head size D: 1 / theta^(2i/D),
 * the exponent formed in fp32 as the CPU reference does, the power taken
 * in double and rounded once, so it is the correctly rounded fp32 value. */
__device__ __forceinline__ float rope_inv_freq_at(int i, int D, float theta) {
    const float expo = (float)(2 * i) / (float)D;
    return 1.0f / (float)pow((double)theta, (double)expo);
}

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

/* 2^x on the special-function unit; flushes denormal results to zero, which
 * is harmless for probabilities and saves exp2f's rescaling. exp2(-inf) = 0. */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* 8 bf16 in one 16-byte register group. */
union bf16x8 {
    uint4 u;
    __nv_bfloat162 h2[4];
    bf16 h[8];
};

__device__ __forceinline__ void bf16x8_to_f32(const uint4 &u, float f[8]) {
    bf16x8 v;
    v.u = u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 p = __bfloat1622float2(v.h2[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

/* Round-to-nearest-even, as every store of an act value. */
__device__ __forceinline__ uint4 f32_to_bf16x8(const float f[8]) {
    bf16x8 v;
#pragma unroll
    for (int i = 0; i < 4; i++) v.h2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v.u;
}

/* Loads that bypass L1 allocation for data read exactly once. */
/* silu(g) = g / (1 + exp(-g)), as swiglu.cu and the few-row matmul's SwiGLU
 * output compute it. */
__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ uint4 ld_stream(const void *p) { return __ldcs((const uint4 *)p); }
__device__ __forceinline__ void st_stream(void *p, uint4 v) { __stcs((uint4 *)p, v); }

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over aligned groups of `width` lanes (a power of two <= 32): every lane
 * of the group receives the group's sum, in the same order on every run. */
template <typename T>
__device__ __forceinline__ T group_sum(T v, int width) {
    for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets the result. `sh` holds 32 values; it may be reused after the
 * call returns (the trailing barrier protects it). */
template <typename T>
__device__ __forceinline__ T block_sum(T v, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T s = lane < nw ? sh[lane] : (T)0;
    s = warp_sum(s);
    __syncthreads();
    return s;
}

/* Sum over aligned teams of `tpr` consecutive threads (a power of two, up to
 * the block size): every thread of a team gets its team's sum, added in the
 * same order on every run. Teams wider than a warp go through `sh` (32
 * values) and block barriers, so every thread of the block must call it. */
template <typename T>
__device__ __forceinline__ T team_sum(T v, int tpr, T *sh) {
    if (tpr <= 32) return group_sum(v, tpr);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpt = tpr >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    const int first = (warp / wpt) * wpt;
    T s = (T)0;
    for (int i = 0; i < wpt; i++) s += sh[first + i];
    __syncthreads();
    return s;
}

/* c[idx] = alpha * v + beta * c[idx] for an fp32 or a bf16 c (c_f32), with
 * c not read where beta = 0 and one rounding to bf16: the epilogue of the
 * matmul kernels beside cuBLASLt. */
__device__ __forceinline__ void store_alpha_beta(void *c, int c_f32, size_t idx, float v, float alpha, float beta) {
    float out = alpha * v;
    if (c_f32) {
        float *cf = (float *)c;
        if (beta != 0.0f) out += beta * cf[idx];
        cf[idx] = out;
    } else {
        bf16 *cb = (bf16 *)c;
        if (beta != 0.0f) out += beta * __bfloat162float(cb[idx]);
        cb[idx] = __float2bfloat16_rn(out);
    }
}

/* Programmatic dependent launch (Hopper). A kernel queued by
 * cuda_launch_pdl may start while the kernel before it in the stream still
 * runs, once every block of that one has called pdl_launch_dependents() or
 * exited: its launch and prologue overlap the other's tail instead of
 * following its completion. Until it calls pdl_wait() it may only read what
 * no kernel of the stream writes (weights) and write nothing; pdl_wait()
 * returns when the kernel before has completed and its writes are visible.
 * Each such kernel calls pdl_launch_dependents() only after its own
 * pdl_wait(), so at most two kernels of a chain are in flight, and each
 * waits on a predecessor that itself finished waiting. Both are no-ops in a
 * kernel launched the ordinary way, and an ordinary launch after a PDL one
 * still waits for it to complete. */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

/* out[c] += sum over s = 0..S-1 of partial[s * C + c], deterministic: thread
 * (x, y) of an 8 x 128 block sums rows y, y + 128, ... of column c in order,
 * then the 128 row lanes are added in a fixed tree. The second stage of
 * every per-block-partials column reduction (bias, norm weights); 8 columns
 * per block (a 32-byte sector per row) keep C / 8 blocks busy even for the
 * 128-wide q/k norm, and each thread sums only S / 128 values. */
#define COLSUM_COLS 8
#define COLSUM_ROWS 128
template <typename T>
__global__ void __launch_bounds__(COLSUM_COLS *COLSUM_ROWS)
    colsum_partials_acc(float *out, const T *partial, int S, int C) {
    __shared__ float sh[COLSUM_ROWS][COLSUM_COLS + 1];
    /* Launched early behind the kernel that writes the partials (see
     * colsum_partials_launch). */
    pdl_wait();
    const int c = blockIdx.x * COLSUM_COLS + threadIdx.x;
    float s = 0.0f;
    if (c < C)
        for (int i = threadIdx.y; i < S; i += COLSUM_ROWS) s += (float)partial[(size_t)i * C + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int w = COLSUM_ROWS / 2; w > 0; w >>= 1) {
        if (threadIdx.y < w) sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + w][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) out[c] += sh[0][threadIdx.x];
}

/* Whether a decode-step launch over `rows` token rows uses it: up to the
 * 64 rows of the skinny products (OPS_MATMUL_FEW_ROWS), which always do,
 * and ctx->tuning.no_pdl turns it off (a benchmark measures it so). On an
 * H100 (bench_generate --ops 1.7b 64 640, Qwen3-1.7B shape, batch 64)
 * taking every kernel of the step up to 64 rows rather than 8 gave 3.999
 * against 4.177 ms a step (67.2% against 64.3% of the memory roofline);
 * the RMSNorm alone 4.123. (An H200 had measured the opposite, 3.41 ->
 * 3.51 ms, before the products moved to the wgmma kernel.) A benchmark
 * may pin the limit (ctx->tuning.pdl_rows). */
static inline int cuda_pdl_rows(const ops_ctx *ctx, long rows) {
    const int limit = ctx->tuning.pdl_rows > 0 ? ctx->tuning.pdl_rows : OPS_MATMUL_FEW_ROWS;
    return rows <= limit && !ctx->tuning.no_pdl;
}

/* cluster_y > 1: the grid's blocks form clusters of cluster_y along y
 * (above 8 the kernel must allow non-portable cluster sizes). */
template <typename... KArgs, typename... Args>
static inline void cuda_launch_pdl_cluster(cudaStream_t st, int pdl, int cluster_y, void (*kernel)(KArgs...),
                                           dim3 grid, dim3 block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_y > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = 1, attr[n].val.clusterDim.y = (unsigned)cluster_y, attr[n++].val.clusterDim.z = 1;
    }
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <typename... KArgs, typename... Args>
static inline void cuda_launch_pdl(cudaStream_t st, int pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                                   size_t smem, Args... args) {
    cuda_launch_pdl_cluster(st, pdl, 1, kernel, grid, block, smem, args...);
}

/* The column sums run behind the kernel that writes the partials, which
 * calls pdl_launch_dependents() first thing (it reads nothing the column
 * sums write, and they wait for it). */
static inline void colsum_partials_launch(cudaStream_t st, float *out, const float *partial, int S, int C) {
    cuda_launch_pdl(st, 1, colsum_partials_acc<float>, dim3(div_up((size_t)C, COLSUM_COLS)),
                    dim3(COLSUM_COLS, COLSUM_ROWS), 0, out, partial, S, C);
}

#endif /* __CUDACC__ */

#endif
