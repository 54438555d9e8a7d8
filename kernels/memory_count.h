/* memory_count.h: the byte count behind ops_mem_bytes / ops_mem_peak
 * (kernels/ops.h). Both backends' ops_alloc and ops_free report here, so a
 * test can hold a run's device memory flat over its steps and measure what
 * each phase of a step adds. ops_free gets no size, so the count keeps one
 * host table of live allocations per context. */
#ifndef DK_KERNELS_MEMORY_COUNT_H
#define DK_KERNELS_MEMORY_COUNT_H

#include <stddef.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void mem_count_init(ops_ctx *ctx); /* with the context */
void mem_count_add(ops_ctx *ctx, void *p, size_t bytes);
void mem_count_remove(ops_ctx *ctx, void *p);
void mem_count_free(ops_ctx *ctx); /* with the context */

#ifdef __cplusplus
}
#endif

#endif
