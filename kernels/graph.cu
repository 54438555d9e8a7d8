/* graph.cu: ops_graph on the CUDA backend: the ops a function queues on the
 * context's stream, captured once into a CUDA graph and replayed with one
 * launch. A decode step of the generation engine is hundreds of small
 * kernels whose launch costs as much as their work at small batches; a
 * replay queues them all at once. The capture is "relaxed" so that calls
 * which are not stream operations (a kernel's shared-memory attribute) are
 * allowed while it runs. A capture that CUDA refuses to begin, end or
 * instantiate fails cleanly and the caller runs the ops directly; an op
 * whose own CUDA_CHECK sees an error inside the capture (a synchronising
 * call, say) still aborts, so the ops a step runs must stay capturable. */
#include "kernels/cuda_common.cuh"

struct ops_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" ops_graph *cuda_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user) {
    cudaStream_t st = ctx_stream(ctx);
    cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        cudaGetLastError();
        dk_fail(DK_ERR_RUNTIME, "ops_graph_capture: cudaStreamBeginCapture failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    fn(user);
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(st, &graph);
    if (e != cudaSuccess || !graph) {
        cudaGetLastError();
        if (graph) cudaGraphDestroy(graph);
        dk_fail(DK_ERR_RUNTIME, "ops_graph_capture: the capture failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(graph);
        dk_fail(DK_ERR_RUNTIME, "ops_graph_capture: cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    ops_graph *g = (ops_graph *)malloc(sizeof *g);
    if (!g) DK_ABORT("ops_graph_capture: out of host memory");
    g->graph = graph;
    g->exec = exec;
    return g;
}

extern "C" void cuda_graph_launch(ops_ctx *ctx, ops_graph *g) {
    CUDA_CHECK(cudaGraphLaunch(g->exec, ctx_stream(ctx)));
}

extern "C" void cuda_graph_free(ops_ctx *ctx, ops_graph *g) {
    (void)ctx;
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}
