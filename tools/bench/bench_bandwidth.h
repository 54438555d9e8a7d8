/* bench_bandwidth.h: the device's copy bandwidth, measured, for the
 * memory rooflines of the generation benchmarks (bench_generate,
 * bench_generate_recipe). A roofline taken from one card's datasheet or
 * from a figure measured on another reads wrong on the next: the H200's
 * 4.27 TB/s against an H100 (3.0 TB/s) put its decode at 46% of a
 * roofline it could not reach. Header-only: each benchmark is one program. */
#ifndef DK_BENCH_BANDWIDTH_H
#define DK_BENCH_BANDWIDTH_H

#include <cuda_runtime_api.h>
#include <stdio.h>

#include "common/util.h"
#include "kernels/ops.h"

/* Device-to-device copies of 1 GiB, read + write bytes per second, the
 * best of 3 rounds of 10. */
static inline double bench_copy_bandwidth(ops_ctx *ctx) {
    const size_t bytes = (size_t)1 << 30;
    void *a = ops_alloc(ctx, bytes), *b = ops_alloc(ctx, bytes);
    ops_zero(ctx, a, bytes);
    ops_sync(ctx);
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        const int N = 10;
        double t0 = dk_now();
        for (int i = 0; i < N; i++)
            if (cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream) != cudaSuccess)
                DK_ABORT("bench_copy_bandwidth: cudaMemcpyAsync failed");
        ops_sync(ctx);
        const double bw = 2.0 * bytes * N / (dk_now() - t0);
        if (bw > best) best = bw;
    }
    ops_free(ctx, a), ops_free(ctx, b);
    return best;
}

/* The roofline's bandwidth: bw when a --bw gave one (> 0), else the copy
 * bandwidth measured here; both printed. */
static inline double bench_roofline_bandwidth(ops_ctx *ctx, double bw) {
    const double measured = bench_copy_bandwidth(ctx);
    if (bw == 0.0) bw = measured;
    printf("copy bandwidth: %.2f TB/s measured (1 GiB device to device, read + write); roofline at %.2f TB/s%s\n",
           measured / 1e12, bw / 1e12, bw != measured ? " (--bw)" : "");
    return bw;
}

#endif
