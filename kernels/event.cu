/* event.cu: ops_event on the CUDA backend: a CUDA event (no timing) on the
 * context's stream, and the copy to the host that does not wait. The
 * generation engine queues a decode step while the one before still runs
 * and waits only for that one's sampled tokens, so the host's planning and
 * launches hide behind the GPU's work instead of sitting between steps. */
#include "kernels/cuda_common.cuh"

struct ops_event {
    cudaEvent_t ev;
};

extern "C" ops_event *cuda_event_new(ops_ctx *ctx) {
    (void)ctx;
    ops_event *e = (ops_event *)malloc(sizeof *e);
    if (!e) DK_ABORT("ops_event_new: out of host memory");
    CUDA_CHECK(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
    return e;
}

extern "C" void cuda_event_record(ops_ctx *ctx, ops_event *e) { CUDA_CHECK(cudaEventRecord(e->ev, ctx_stream(ctx))); }

extern "C" void cuda_event_sync(ops_event *e) { CUDA_CHECK(cudaEventSynchronize(e->ev)); }

extern "C" void cuda_event_free(ops_event *e) {
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

extern "C" void cuda_download_async(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, ctx_stream(ctx)));
}
