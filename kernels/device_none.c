/* device_none.c: device.h for builds without nvcc: no GPU is visible. The
 * CUDA build compiles device.cu instead (CMake drops this file there). */
#ifndef DK_HAVE_CUDA
#include <stdio.h>

#include "kernels/device.h"

int device_count(void) { return 0; }

int device_describe(int ordinal, char *buf, size_t n) {
    snprintf(buf, n, "no CUDA support in this build (device %d)", ordinal);
    return -1;
}

size_t device_free_bytes(int ordinal) {
    (void)ordinal;
    return 0;
}

int device_compute_capability(int ordinal) {
    (void)ordinal;
    return 0;
}

size_t device_total_bytes(int ordinal) {
    (void)ordinal;
    return 0;
}
#else
/* ISO C forbids an empty translation unit. */
typedef int dk_device_none_unused;
#endif
