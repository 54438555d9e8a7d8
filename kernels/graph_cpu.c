/* graph_cpu.c: ops_graph on the CPU backend, which has no launches to save:
 * a capture reports that graphs need the CUDA backend (the caller runs the
 * ops directly), and nothing can be launched or freed. */
#include "kernels/ops_cpu.h"

ops_graph *cpu_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user) {
    (void)ctx, (void)fn, (void)user;
    dk_fail(DK_ERR_USAGE, "ops_graph_capture: graphs need the CUDA backend");
    return NULL;
}

void cpu_graph_launch(ops_ctx *ctx, ops_graph *g) {
    (void)ctx, (void)g;
    DK_ABORT("ops_graph_launch: the CPU backend has no graphs (ops_graph_capture returned NULL)");
}

void cpu_graph_free(ops_ctx *ctx, ops_graph *g) { (void)ctx, (void)g; }
