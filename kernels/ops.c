/* ops.c: the dispatcher behind kernels/ops.h. Every ops_X of
 * kernels/ops_list.h forwards to cpu_X (kernels/ops_cpu.h) or, in a build
 * whose op table carries the CUDA kernels (DK_HAVE_CUDA_OPS, declared in
 * kernels/ops_cuda.h), to cuda_X, chosen by ctx->device; the forwards are
 * generated from the list. Nothing here computes; the only logic is picking
 * the backend and refusing a device this build cannot run. The context
 * functions, whose dispatch is not a plain forward, are written by hand. */
#include "kernels/ops.h"

#include <string.h>

#include "kernels/op_timer.h"
#include "kernels/ops_cpu.h"
#ifdef DK_HAVE_CUDA_OPS
#include "kernels/ops_cuda.h"
#endif

/* A ctx that names a device outside this build's table can only come from a
 * ctx not made by ops_ctx_init (which refuses it), so it is a programming
 * error and aborts with the op's name. */
static int on_cuda(const ops_ctx *ctx, const char *op) {
    if (!ctx) DK_ABORT("%s: NULL ops_ctx", op);
    if (ctx->device == DK_DEVICE_CPU) return 0;
#ifdef DK_HAVE_CUDA_OPS
    if (ctx->device == DK_DEVICE_CUDA) return 1;
#endif
    DK_ABORT("%s: ops_ctx device %d is not in this build's op table (CPU backend only)", op, (int)ctx->device);
}

/* ---- the ops of kernels/ops_list.h ------------------------------------------------ */

/* Each forward is bracketed by the per-op timer (kernels/op_timer.h), which
 * costs one pointer test while no window is open. */
#ifdef DK_HAVE_CUDA_OPS
#define DK_CALL(name, args) (on_cuda(ctx, "ops_" #name) ? cuda_##name args : cpu_##name args)
#else
#define DK_CALL(name, args) ((void)on_cuda(ctx, "ops_" #name), cpu_##name args)
#endif
#define DK_OP(name, params, args)                       \
    void ops_##name params {                            \
        const int timer_token_ = op_timer_enter(ctx, #name); \
        DK_CALL(name, args);                            \
        op_timer_leave(ctx, timer_token_);              \
    }
#define DK_OP_RET(type, name, params, args)             \
    type ops_##name params {                            \
        const int timer_token_ = op_timer_enter(ctx, #name); \
        type ret_ = DK_CALL(name, args);                \
        op_timer_leave(ctx, timer_token_);              \
        return ret_;                                    \
    }
#include "kernels/ops_list.h"
#undef DK_CALL

/* ---- context (by hand) ---------------------------------------------------------- */

dk_status ops_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes) {
    if (!ctx) return dk_fail(DK_ERR_RUNTIME, "ops_ctx_init: NULL ops_ctx");
    memset(ctx, 0, sizeof *ctx);
    switch (device) {
    case DK_DEVICE_CPU:
        return cpu_ctx_init(ctx, device, gpu, scratch_bytes);
    case DK_DEVICE_CUDA:
#ifdef DK_HAVE_CUDA_OPS
        return cuda_ctx_init(ctx, device, gpu, scratch_bytes);
#else
        return dk_fail(DK_ERR_RUNTIME,
                       "device cuda (gpu %d): this build's op table has the CPU backend only "
                       "(built without the CUDA kernels); use device = cpu",
                       gpu);
#endif
    }
    return dk_fail(DK_ERR_USAGE, "ops_ctx_init: unknown device %d", (int)device);
}

void ops_ctx_free(ops_ctx *ctx) {
    if (!ctx) return;
    op_timer_free(ctx); /* its events belong to the device the context is on */
    if (on_cuda(ctx, "ops_ctx_free")) {
#ifdef DK_HAVE_CUDA_OPS
        cuda_ctx_free(ctx);
#endif
    } else {
        cpu_ctx_free(ctx);
    }
}

int ops_cuda_available(void) {
#ifdef DK_HAVE_CUDA_OPS
    return cuda_available();
#else
    return 0;
#endif
}

const char *ops_device_name(dk_device d) {
    switch (d) {
    case DK_DEVICE_CPU: return "cpu";
    case DK_DEVICE_CUDA: return "cuda";
    }
    return "unknown";
}

dk_status ops_parse_device(const char *s, dk_device *out) {
    if (!s) return dk_fail(DK_ERR_USAGE, "device: missing value (expected cpu or cuda)");
    if (strcmp(s, "cpu") == 0) *out = DK_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *out = DK_DEVICE_CUDA;
    else return dk_fail(DK_ERR_USAGE, "device: unknown value '%s' (expected cpu or cuda)", s);
    return DK_OK;
}
