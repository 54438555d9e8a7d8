/* paged_decode_d256.cu: the instances of the decode kernel
 * (paged_decode.cuh) for head dim 256, compiled apart from the other head
 * dims so a parallel build compiles them side by side. */
#include "kernels/paged_decode.cuh"

PD_KERNELS_OF_DIM(256)
