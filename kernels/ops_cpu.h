/* ops_cpu.h: the CPU backend of the op table. One cpu_X for every op of
 * kernels/ops_list.h, generated from that list with the identical parameter
 * list, so the dispatcher in ops.c is a plain forward. On this backend every
 * "act" buffer is float, so the void* arguments are float arrays and the
 * casts are copies. The code is fp32, single-threaded except for OpenBLAS,
 * and written to be read: it is the numerical reference the CUDA kernels
 * are tested against. Each op lives in the *_cpu.c file named after it or
 * its family (memory_cpu.c: the context, memory and copies; event_cpu.c:
 * events and copy lanes; elementwise_cpu.c: the casts, add and sumsq;
 * fused_matmul_cpu.c: the rmsnorm_matmul pair). */
#ifndef DK_OPS_CPU_H
#define DK_OPS_CPU_H

#include "kernels/ops.h"

/* memory_cpu.c: the context (ops_ctx_init / ops_ctx_free, written by hand). */
dk_status cpu_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void cpu_ctx_free(ops_ctx *ctx);

#define DK_OP(name, params, args) void cpu_##name params;
#define DK_OP_RET(type, name, params, args) type cpu_##name params;
#include "kernels/ops_list.h"

#endif
