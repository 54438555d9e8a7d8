/* memory_cpu.c: the CPU backend's context and memory. "Device" memory is host
 * memory, act elements are float, copies are memcpy and sync has nothing to
 * wait for. The scratch arena is allocated once here, so no op allocates. */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/memory_count.h"
#include "kernels/ops_cpu.h"

dk_status cpu_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes) {
    memset(ctx, 0, sizeof *ctx);
    ctx->device = DK_DEVICE_CPU;
    ctx->gpu = -1;
    if (scratch_bytes > 0) {
        ctx->scratch = dk_calloc(1, scratch_bytes);
        ctx->scratch_size = scratch_bytes;
    }
    mem_count_init(ctx);
    return DK_OK;
}

void cpu_ctx_free(ops_ctx *ctx) {
    free(ctx->scratch);
    mem_count_free(ctx);
    memset(ctx, 0, sizeof *ctx);
}

size_t cpu_act_size(const ops_ctx *ctx) { return sizeof(float); }

void *cpu_alloc(ops_ctx *ctx, size_t bytes) {
    void *p = dk_calloc(1, bytes);
    mem_count_add(ctx, p, bytes);
    return p;
}

void cpu_free(ops_ctx *ctx, void *p) {
    mem_count_remove(ctx, p);
    free(p);
}

void *cpu_host_alloc(ops_ctx *ctx, size_t bytes) { return dk_calloc(1, bytes); }

void cpu_host_free(ops_ctx *ctx, void *p) { free(p); }

void cpu_zero(ops_ctx *ctx, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

void cpu_sync(ops_ctx *ctx) {}

/* memmove, and a no-op when source and destination coincide, because callers
 * on the CPU backend legitimately "upload" a buffer onto itself. */
void cpu_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    if (bytes && dst != src_host) memmove(dst, src_host, bytes);
}

void cpu_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes) {
    if (bytes && dst_host != src) memmove(dst_host, src, bytes);
}

void cpu_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n) {
    cpu_upload(ctx, dst, src_host, n * sizeof(float));
}

void cpu_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n) {
    cpu_download(ctx, dst_host, src, n * sizeof(float));
}
