/* device.cu: CUDA runtime queries behind device.h. Compiled by nvcc for
 * sm_90a + PTX with the rest of the CUDA sources. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "kernels/device.h"

extern "C" int device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" int device_describe(int ordinal, char *buf, size_t n) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    snprintf(buf, n, "%s, sm_%d%d, %.1f GiB, %d SMs", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.multiProcessorCount);
    return 0;
}

extern "C" int device_compute_capability(int ordinal) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

/* cudaMemGetInfo on `ordinal`, leaving the current device as it was. */
static int mem_info(int ordinal, size_t *free_b, size_t *total) {
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(ordinal) != cudaSuccess ||
        cudaMemGetInfo(free_b, total) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    cudaSetDevice(prev);
    return 0;
}

extern "C" size_t device_free_bytes(int ordinal) {
    size_t free_b = 0, total = 0;
    return mem_info(ordinal, &free_b, &total) == 0 ? free_b : 0;
}

extern "C" size_t device_total_bytes(int ordinal) {
    size_t free_b = 0, total = 0;
    return mem_info(ordinal, &free_b, &total) == 0 ? total : 0;
}
