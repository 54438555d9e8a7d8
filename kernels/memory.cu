/* memory.cu: the CUDA backend's context and memory. The context owns one
 * stream (every op of the backend is queued on it, in program order), the
 * cuBLASLt handle with its workspace, and the scratch arena the ops take
 * their temporary space from, so no op allocates. Act buffers are bf16 here:
 * uploads and downloads of act data convert fp32 <-> bf16 on the host, in
 * chunks through a staging buffer, with round-to-nearest-even. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.cuh"
#include "kernels/device.h"
#include "kernels/memory_count.h"

/* cuBLASLt's recommended workspace on Hopper. */
#define CUDA_BLASLT_WS ((size_t)32 << 20)
/* Elements converted per staging round trip of an act upload / download. */
#define CUDA_STAGE_ELEMS ((size_t)1 << 22)
#define CUDA_MAX_DEVICES 64

static int sm_counts[CUDA_MAX_DEVICES];
static int sm90[CUDA_MAX_DEVICES]; /* 0 not asked, 1 compute capability 9.0, -1 another */
static int live_contexts; /* contexts made and not yet freed */

extern "C" int cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n > 0;
}

int cuda_sm_count(const ops_ctx *ctx) {
    int dev = ctx->gpu;
    if (dev >= 0 && dev < CUDA_MAX_DEVICES && sm_counts[dev] > 0) return sm_counts[dev];
    int n = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= 0 && dev < CUDA_MAX_DEVICES) sm_counts[dev] = n;
    return n;
}

int cuda_is_sm90(const ops_ctx *ctx) {
    const int dev = ctx->gpu;
    if (dev < 0 || dev >= CUDA_MAX_DEVICES) return device_compute_capability(dev) == 90;
    if (!sm90[dev]) sm90[dev] = device_compute_capability(dev) == 90 ? 1 : -1;
    return sm90[dev] > 0;
}

/* Occupancies asked so far: (device, kernel, block, shared memory, cluster)
 * -> CTAs per multiprocessor (cluster 0) or clusters of that many CTAs the
 * GPU holds at once. A handful of kernel instances ask; the list is short. */
#define CUDA_OCC_SLOTS 256
static struct {
    const void *kernel;
    int dev, block, cluster, answer;
    size_t smem;
} occ[CUDA_OCC_SLOTS];
static int n_occ;
static pthread_mutex_t occ_lock = PTHREAD_MUTEX_INITIALIZER;

/* The remembered answer for this key, or -1; occ_lock held. */
static int occ_find(const ops_ctx *ctx, const void *kernel, int block, size_t smem, int cluster) {
    for (int i = 0; i < n_occ; i++)
        if (occ[i].kernel == kernel && occ[i].dev == ctx->gpu && occ[i].block == block && occ[i].smem == smem &&
            occ[i].cluster == cluster)
            return occ[i].answer;
    return -1;
}

/* Remembers an answer (a full list forgets nothing, it only asks again);
 * occ_lock held. */
static void occ_keep(const ops_ctx *ctx, const void *kernel, int block, size_t smem, int cluster, int answer) {
    if (n_occ == CUDA_OCC_SLOTS) return;
    occ[n_occ].kernel = kernel, occ[n_occ].dev = ctx->gpu, occ[n_occ].block = block;
    occ[n_occ].smem = smem, occ[n_occ].cluster = cluster, occ[n_occ].answer = answer;
    n_occ++;
}

int cuda_kernel_per_sm(const ops_ctx *ctx, const void *kernel, int block, size_t smem) {
    pthread_mutex_lock(&occ_lock);
    int n = occ_find(ctx, kernel, block, smem, 0);
    if (n < 0) {
        /* The kernel's limit only grows: a launch with a size asked before
         * must still fit after a smaller one is asked. */
        size_t limit = smem;
        for (int i = 0; i < n_occ; i++)
            if (occ[i].kernel == kernel && occ[i].dev == ctx->gpu && occ[i].smem > limit) limit = occ[i].smem;
        if (limit > 0)
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)limit));
        n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, block, smem));
        if (n < 1) n = 1;
        occ_keep(ctx, kernel, block, smem, 0, n);
    }
    pthread_mutex_unlock(&occ_lock);
    return n;
}

int cuda_clusters_resident(const ops_ctx *ctx, const void *kernel, int block, size_t smem, int cluster_y) {
    cuda_kernel_per_sm(ctx, kernel, block, smem); /* sets the shared-memory limit */
    pthread_mutex_lock(&occ_lock);
    int n = occ_find(ctx, kernel, block, smem, cluster_y);
    if (n < 0) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = 1, attr.val.clusterDim.y = (unsigned)cluster_y, attr.val.clusterDim.z = 1;
        cfg.gridDim = dim3(1, (unsigned)cluster_y), cfg.blockDim = dim3((unsigned)block);
        cfg.dynamicSmemBytes = smem, cfg.attrs = &attr, cfg.numAttrs = 1;
        n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
        if (n < 0) n = 0;
        occ_keep(ctx, kernel, block, smem, cluster_y, n);
    }
    pthread_mutex_unlock(&occ_lock);
    return n;
}

/* Frees whatever a partly built context holds (init failure or ctx_free). */
static void ctx_release(ops_ctx *ctx) {
    if (ctx->blaslt) cublasLtDestroy((cublasLtHandle_t)ctx->blaslt);
    if (ctx->blaslt_ws) cudaFree(ctx->blaslt_ws);
    if (ctx->scratch) cudaFree(ctx->scratch);
    if (ctx->stream) cudaStreamDestroy((cudaStream_t)ctx->stream);
    mem_count_free(ctx);
    for (int i = 0; i < 2; i++) {
        if (ctx->lane[i]) cudaStreamDestroy((cudaStream_t)ctx->lane[i]);
        if (ctx->lane_ev[i]) cudaEventDestroy((cudaEvent_t)ctx->lane_ev[i]);
    }
    memset(ctx, 0, sizeof *ctx);
}

extern "C" dk_status cuda_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes) {
    memset(ctx, 0, sizeof *ctx);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return dk_fail(DK_ERR_RUNTIME, "device cuda (gpu %d): no CUDA GPU is visible (%s)", gpu,
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (gpu < 0 || gpu >= n)
        return dk_fail(DK_ERR_USAGE, "device cuda: gpu %d does not exist (%d visible)", gpu, n);
    ctx->device = DK_DEVICE_CUDA;
    ctx->gpu = gpu;
    size_t scratch = scratch_bytes > CUDA_MIN_SCRATCH ? scratch_bytes : CUDA_MIN_SCRATCH;
    cudaStream_t stream = NULL;
    cublasLtHandle_t lt = NULL;
    const char *what = "cudaSetDevice";
    if ((e = cudaSetDevice(gpu)) != cudaSuccess) goto fail;
    what = "cudaStreamCreate";
    if ((e = cudaStreamCreate(&stream)) != cudaSuccess) goto fail;
    ctx->stream = stream;
    what = "cudaMalloc (cuBLASLt workspace)";
    if ((e = cudaMalloc(&ctx->blaslt_ws, CUDA_BLASLT_WS)) != cudaSuccess) goto fail;
    ctx->blaslt_ws_size = CUDA_BLASLT_WS;
    what = "cudaMalloc (ops scratch)";
    if ((e = cudaMalloc(&ctx->scratch, scratch)) != cudaSuccess) goto fail;
    ctx->scratch_size = scratch;
    what = "cudaMemset (ops scratch)";
    if ((e = cudaMemset(ctx->scratch, 0, scratch)) != cudaSuccess) goto fail;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        ctx_release(ctx);
        return dk_fail(DK_ERR_RUNTIME, "device cuda (gpu %d): cublasLtCreate failed", gpu);
    }
    ctx->blaslt = lt;
    (void)cuda_sm_count(ctx);
    mem_count_init(ctx);
    live_contexts++;
    return DK_OK;
fail:
    cudaGetLastError();
    ctx_release(ctx);
    return dk_fail(DK_ERR_RUNTIME, "device cuda (gpu %d): %s failed: %s (scratch %zu bytes)", gpu, what,
                   cudaGetErrorString(e), scratch);
}

extern "C" void cuda_ctx_free(ops_ctx *ctx) {
    if (!ctx->stream) return;
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)ctx->stream));
    for (int i = 0; i < 2; i++)
        if (ctx->lane[i]) CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)ctx->lane[i]));
    ctx_release(ctx);
    if (--live_contexts == 0) cuda_matmul_cache_clear();
}

extern "C" size_t cuda_act_size(const ops_ctx *ctx) { return sizeof(bf16); }

extern "C" void *cuda_alloc(ops_ctx *ctx, size_t bytes) {
    if (bytes == 0) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        DK_ABORT("ops_alloc: cudaMalloc of %zu bytes on gpu %d failed: %s (%zu of %zu bytes free)", bytes, ctx->gpu,
                 cudaGetErrorString(e), free_b, total_b);
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx_stream(ctx)));
    cuda_lanes_follow(ctx); /* a copy lane's first write into p lands after the zeroing */
    mem_count_add(ctx, p, bytes);
    return p;
}

extern "C" void cuda_free(ops_ctx *ctx, void *p) {
    mem_count_remove(ctx, p);
    if (p) CUDA_CHECK(cudaFree(p));
}

extern "C" void *cuda_host_alloc(ops_ctx *ctx, size_t bytes) {
    if (bytes == 0) return NULL;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cudaGetLastError();
        DK_ABORT("ops_host_alloc: cudaHostAlloc of %zu bytes for gpu %d failed: %s", bytes, ctx->gpu,
                 cudaGetErrorString(e));
    }
    memset(p, 0, bytes);
    return p;
}

extern "C" void cuda_host_free(ops_ctx *ctx, void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

extern "C" void cuda_zero(ops_ctx *ctx, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx_stream(ctx)));
}

extern "C" void cuda_sync(ops_ctx *ctx) { CUDA_CHECK(cudaStreamSynchronize(ctx_stream(ctx))); }

/* From pageable memory the runtime has copied the source to its own staging
 * area by the time cudaMemcpyAsync returns, so the caller may reuse it; the
 * device copy itself completes in stream order. From ops_host_alloc memory
 * the copy reads the source in stream order: keep it until a sync. */
extern "C" void cuda_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, ctx_stream(ctx)));
}

extern "C" void cuda_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, ctx_stream(ctx)));
    CUDA_CHECK(cudaStreamSynchronize(ctx_stream(ctx)));
}

/* fp32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN. */
static inline uint16_t host_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float host_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

extern "C" void cuda_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n) {
    if (!n) return;
    size_t chunk = n < CUDA_STAGE_ELEMS ? n : CUDA_STAGE_ELEMS;
    uint16_t *stage = (uint16_t *)dk_malloc(chunk * sizeof(uint16_t));
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        size_t m = n - i0 < chunk ? n - i0 : chunk;
        for (size_t i = 0; i < m; i++) stage[i] = host_f32_to_bf16(src_host[i0 + i]);
        CUDA_CHECK(cudaMemcpyAsync((uint16_t *)dst + i0, stage, m * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                   ctx_stream(ctx)));
        CUDA_CHECK(cudaStreamSynchronize(ctx_stream(ctx)));
    }
    free(stage);
}

extern "C" void cuda_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n) {
    if (!n) return;
    size_t chunk = n < CUDA_STAGE_ELEMS ? n : CUDA_STAGE_ELEMS;
    uint16_t *stage = (uint16_t *)dk_malloc(chunk * sizeof(uint16_t));
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        size_t m = n - i0 < chunk ? n - i0 : chunk;
        CUDA_CHECK(cudaMemcpyAsync(stage, (const uint16_t *)src + i0, m * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                                   ctx_stream(ctx)));
        CUDA_CHECK(cudaStreamSynchronize(ctx_stream(ctx)));
        for (size_t i = 0; i < m; i++) dst_host[i0 + i] = host_bf16_to_f32(stage[i]);
    }
    free(stage);
}
