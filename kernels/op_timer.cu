/* op_timer.cu: the CUDA marks of the per-op timer (kernels/op_timer.c):
 * events with timing, recorded on the context's stream. A stream being
 * captured into a graph is not timed: an event recorded there would be a
 * node of the graph, with no time of its own. */
#include "kernels/cuda_common.cuh"
#include "kernels/op_timer.h"

extern "C" void *cuda_timer_mark_new(void) {
    cudaEvent_t ev = NULL;
    CUDA_CHECK(cudaEventCreate(&ev));
    return (void *)ev;
}

extern "C" void cuda_timer_mark_record(const ops_ctx *ctx, void *mark) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)mark, (cudaStream_t)ctx->stream));
}

extern "C" double cuda_timer_mark_ms(void *from, void *to) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to));
    return (double)ms;
}

extern "C" void cuda_timer_mark_free(void *mark) { cudaEventDestroy((cudaEvent_t)mark); }

extern "C" int cuda_timer_capturing(const ops_ctx *ctx) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)ctx->stream, &st));
    return st != cudaStreamCaptureStatusNone;
}
