/* copy.h: device-to-device copies for the ZeRO schedule (a rank's gradient
 * shard into its slice of a layer's working buffer), queued on the ctx's
 * stream. The op table has no such copy, and the shard code needs nothing
 * else from the device, so it lives here with a CPU twin (dist/copy.c) and a
 * CUDA one (dist/copy.cu). Also the device binding of dist/'s own threads. */
#ifndef DK_DIST_COPY_H
#define DK_DIST_COPY_H

#include <stddef.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[0..bytes) = src[0..bytes), both on ctx's device, not overlapping. */
void dist_copy(ops_ctx *ctx, void *dst, const void *src, size_t bytes);
void dist_copy_cuda(ops_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Makes ctx's GPU current on the calling thread (nothing on the CPU), so a
 * thread of dist/ that waits on ctx's events does not open a context on
 * GPU 0 of its own. */
void dist_use_device(ops_ctx *ctx);
void dist_use_device_cuda(ops_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
