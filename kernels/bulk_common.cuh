/* bulk_common.cuh: the mbarrier and bulk-copy (TMA) primitives of the
 * kernels that stream global memory into shared-memory rings
 * (attention_wgmma.cu, gemv_stream.cuh): a producer thread starts copies
 * whose completion is counted in bytes on a stage's mbarrier, consumers
 * spin on the barrier's phase. sm_90 instructions. */
#ifndef DK_BULK_COMMON_CUH
#define DK_BULK_COMMON_CUH

#include <stdint.h>

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* The producer's arrival: `bytes` more are on their way through TMA. */
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* Spins until the barrier's phase of parity `parity` has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
/* Makes this thread's mbarrier initialisations visible to the bulk-copy
 * unit before any copy signals them. */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/* An L2 policy for data read once: its lines are the first evicted, so a
 * stream does not push out what was prefetched for later. */
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
 * src to shared dst, completion counted on bar, with L2 policy pol. */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, uint64_t pol) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
            dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
}

#endif
