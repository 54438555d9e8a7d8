/* event.cu: ops_event and the copy lanes on the CUDA backend. An event is
 * a CUDA event (no timing), recorded behind a lane's copy. The lanes are two more
 * streams, one for copies up and one for copies down, joined to the
 * context's stream by events. The generation engine queues a decode step
 * while the one before still runs and waits only for that one's sampled
 * tokens; its metadata goes up while the step before computes and the
 * tokens come down while the next one does, where a copy in the stream
 * held the GPU between two steps. Two lanes: an upload queued behind a
 * download that waits for a step would wait for that step too. */
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

extern "C" void cuda_event_sync(ops_ctx *ctx, ops_event *e) {
    (void)ctx;
    CUDA_CHECK(cudaEventSynchronize(e->ev));
}

extern "C" void cuda_event_free(ops_ctx *ctx, ops_event *e) {
    (void)ctx;
    if (!e) return;
    cudaEventDestroy(e->ev);
    free(e);
}

/* Lane i waits, from its next copy on, for the work queued on the ctx's
 * stream so far. Not while the stream is being captured (ops_graph_capture):
 * the wait would pull the lane into the capture, and what the capture
 * queues runs only when the graph does. */
static void lane_follow(ops_ctx *ctx, int i) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(ctx_stream(ctx), &cs));
    if (cs != cudaStreamCaptureStatusNone) return;
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ctx->lane_ev[i], ctx_stream(ctx)));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)ctx->lane[i], (cudaEvent_t)ctx->lane_ev[i], 0));
}

/* Lane i (0 up, 1 down) and its join event, made on first use behind the
 * work queued so far. An upload copies at once, beside the stream; what it
 * overwrites must be free of queued ops, and memory from ops_alloc is not
 * until its zeroing has run: made or already there, a lane follows every
 * allocation (cuda_lanes_follow). Without that, the first upload into a
 * fresh buffer (a new generation engine's step metadata) could land before
 * the zeroing queued behind the stream's other work, which then wiped it:
 * how far behind depends on timing, most of all where ranks share a GPU. */
static cudaStream_t lane(ops_ctx *ctx, int i) {
    if (!ctx->lane[i]) {
        cudaStream_t s = NULL;
        cudaEvent_t ev = NULL;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        ctx->lane[i] = s;
        ctx->lane_ev[i] = ev;
        lane_follow(ctx, i);
    }
    return (cudaStream_t)ctx->lane[i];
}

void cuda_lanes_follow(ops_ctx *ctx) {
    for (int i = 0; i < 2; i++)
        if (ctx->lane[i]) lane_follow(ctx, i);
}

extern "C" void cuda_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    if (!bytes) return;
    cudaStream_t up = lane(ctx, 0);
    CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, up));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ctx->lane_ev[0], up));
    CUDA_CHECK(cudaStreamWaitEvent(ctx_stream(ctx), (cudaEvent_t)ctx->lane_ev[0], 0));
}

extern "C" void cuda_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done) {
    cudaStream_t down = lane(ctx, 1);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)ctx->lane_ev[1], ctx_stream(ctx)));
    CUDA_CHECK(cudaStreamWaitEvent(down, (cudaEvent_t)ctx->lane_ev[1], 0));
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, down));
    CUDA_CHECK(cudaEventRecord(done->ev, down));
}
