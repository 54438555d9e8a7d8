/* device.h: what GPUs this process can see, for start-up banners and for
 * tests that must skip (exit 77) where there is no GPU. Works in every build:
 * without nvcc it reports zero devices. */
#ifndef DK_DEVICE_H
#define DK_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 without a driver, a GPU or CUDA support). */
int device_count(void);
/* "NVIDIA H200, sm_90, 139.8 GiB, 132 SMs" into buf; returns 0 on success. */
int device_describe(int ordinal, char *buf, size_t n);

/* Compute capability as major * 10 + minor (90 on H100 / H200; 0 without
 * a GPU): which kernels a device runs (the sm_90a ones need 90). */
int device_compute_capability(int ordinal);

/* Free device memory in bytes (0 without a GPU). */
size_t device_free_bytes(int ordinal);
/* Total device memory in bytes, as cudaMemGetInfo reports it (0 without a
 * GPU): what the memory plan of a run is checked against. */
size_t device_total_bytes(int ordinal);

#ifdef __cplusplus
}
#endif

#endif
