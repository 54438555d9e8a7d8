/* event_cpu.c: ops_event and the copy lanes on the CPU backend, whose ops
 * have finished when they return: an event marks nothing that is still
 * running, waiting on it returns at once, and a lane's copy is done when
 * the call returns. */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops_cpu.h"

struct ops_event {
    int unused;
};

ops_event *cpu_event_new(ops_ctx *ctx) {
    (void)ctx;
    return dk_calloc(1, sizeof(ops_event));
}

void cpu_event_sync(ops_ctx *ctx, ops_event *e) { (void)ctx, (void)e; }

void cpu_event_free(ops_ctx *ctx, ops_event *e) {
    (void)ctx;
    free(e);
}

void cpu_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src_host, bytes);
}

void cpu_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done) {
    (void)ctx, (void)done;
    if (bytes) memcpy(dst_host, src, bytes);
}
