/* mma_common.cuh: the warp-level tensor-core helpers that flash attention
 * (attention.cu, attention_wgmma.cu), paged attention and the split-K
 * matmul share: cp.async global -> shared copies, ldmatrix fragment loads,
 * the mma.sync m16n8k16 bf16 product, and bf16x2 packing. Shared-memory
 * operands are taken either as a 32-bit shared address (smem_addr) or as a
 * generic pointer into shared memory. */
#ifndef DK_MMA_COMMON_CUH
#define DK_MMA_COMMON_CUH

#include "kernels/cuda_common.cuh"

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte global -> shared copy that bypasses L1; zero-fills when !valid
 * (src must still be a mapped address, it is not read). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    cp_async16(smem_addr(dst), src, valid);
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool valid) {
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i
 * and register i receives it in mma fragment order. */
__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    ldsm_x4(r0, r1, r2, r3, smem_addr(p));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *p) {
    ldsm_x4_t(r0, r1, r2, r3, smem_addr(p));
}

/* d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate. */
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats as one bf16x2 register, the lower column in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

#endif
