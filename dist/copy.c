/* copy.c: dist_copy on the CPU backend, and the dispatch to CUDA (also of
 * dist_use_device). */
#include "dist/copy.h"

#include <string.h>

#include "common/error.h"

void dist_copy(ops_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    if (ctx->device == DK_DEVICE_CPU) {
        memcpy(dst, src, bytes);
        return;
    }
#ifdef DK_HAVE_CUDA
    dist_copy_cuda(ctx, dst, src, bytes);
#else
    DK_ABORT("dist_copy: a CUDA context in a build without CUDA");
#endif
}

void dist_use_device(ops_ctx *ctx) {
    if (ctx->device == DK_DEVICE_CPU) return;
#ifdef DK_HAVE_CUDA
    dist_use_device_cuda(ctx);
#else
    DK_ABORT("dist_use_device: a CUDA context in a build without CUDA");
#endif
}
