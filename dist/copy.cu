/* copy.cu: dist_copy on the CUDA backend: one asynchronous copy on the
 * ctx's stream (ordered with the ops around it); dist_use_device. */
#include <cuda_runtime.h>

#include "common/error.h"
#include "dist/copy.h"

void dist_copy_cuda(ops_ctx *ctx, void *dst, const void *src, size_t bytes) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream);
    if (e != cudaSuccess) DK_ABORT("dist_copy: cudaMemcpyAsync of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

void dist_use_device_cuda(ops_ctx *ctx) {
    cudaError_t e = cudaSetDevice(ctx->gpu);
    if (e != cudaSuccess) DK_ABORT("dist_use_device: cudaSetDevice(%d): %s", ctx->gpu, cudaGetErrorString(e));
}
