/* wgmma_common.cuh: the Hopper (sm_90a) building blocks of the
 * warp-specialized kernels (attention_wgmma.cu, matmul_skinny_wgmma.cu):
 * warpgroup MMA (wgmma) with operands in shared memory described by matrix
 * descriptors, its fences and waits, mbarriers, TMA tile loads and the host
 * side of TMA (tensor maps). Every shared-memory tile is in the 128-byte
 * swizzled layout TMA writes and the descriptors read: a [rows, 64] bf16
 * box per 64-column block, 128-byte rows, 16-byte chunk c of row r at
 * position c ^ (r % 8) (attention_wgmma.cu explains the descriptors).
 *
 * Device passes that cannot emit wgmma (the compute_90 PTX the build also
 * embeds) see only WG_NO_WGMMA: the kernels built on this trap there, and
 * their hosts never launch them on such devices. */
#ifndef DK_WGMMA_COMMON_CUH
#define DK_WGMMA_COMMON_CUH

#include <cudaTypedefs.h>
#include <stdint.h>

#include "kernels/mma_common.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_NO_WGMMA 1 /* this device pass cannot emit wgmma */
#endif

#ifndef WG_NO_WGMMA

/* The asm operands of the 64 columns (eight n8 tiles from n-tile j) of a
 * wgmma accumulator: per thread 4 floats per n8 tile, in the m16n8 order. */
#define WG_ACC_N8(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define WG_ACC_N64(d, j)                                                                                         \
    WG_ACC_N8(d, j), WG_ACC_N8(d, j + 1), WG_ACC_N8(d, j + 2), WG_ACC_N8(d, j + 3), WG_ACC_N8(d, j + 4),         \
        WG_ACC_N8(d, j + 5), WG_ACC_N8(d, j + 6), WG_ACC_N8(d, j + 7)

/* d (+)= a (registers) * B (descriptor), m64n64k16; TRANS_B = 1: B is MN-major. */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
        : WG_ACC_N64(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TRANS_B), "r"(1));
}

/* d (+)= a (registers) * B (descriptor), m64n128k16; TRANS_B = 1: B is MN-major. */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
        : WG_ACC_N64(d, 0), WG_ACC_N64(d, 8)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TRANS_B), "r"(1));
}

/* d = (scale_d ? d : 0) + A (descriptor) * B (descriptor), m64n64k16, each
 * operand K-major (TRANS = 0) or MN-major (TRANS = 1): bf16 operands may
 * come from shared memory either way, so a tile written [K rows, M cols]
 * serves as A without a transposed copy. */
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wg_ss_n64t(float (&d)[8][4], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : WG_ACC_N64(d, 0)
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

/* d = (scale_d ? d : 0) + A (descriptor, K-major) * B (descriptor, K-major), m64n64k16. */
__device__ __forceinline__ void wg_ss_n64(float (&d)[8][4], uint64_t da, uint64_t db, int scale_d) {
    wg_ss_n64t<0, 0>(d, da, db, scale_d);
}

/* Shared-memory matrix descriptor, 128-byte swizzle; lbo, sbo in bytes. */
__device__ __forceinline__ uint64_t gdesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/* k16 step kk of a K-major operand stored as a swizzled [ROWS, D] tile. */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_k(uint32_t tile, int kk) {
    return gdesc(tile + (kk >> 2) * (ROWS * 128) + (kk & 3) * 32, 16, 1024);
}

/* k16 step kk (rows 16kk..16kk+15) of an MN-major operand, same storage. */
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mn(uint32_t tile, int kk) {
    return gdesc(tile + kk * 16 * 128, ROWS * 128, 1024);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(r[i][e])::"memory");
}

template <int N>
__device__ __forceinline__ void zero(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) r[i][0] = r[i][1] = r[i][2] = r[i][3] = 0.0f;
}

/* Byte offset of 16-byte chunk c of row r in a swizzled [ROWS, D] tile. */
template <int ROWS>
__device__ __forceinline__ uint32_t sw_off(int r, int c) {
    return (uint32_t)((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* The dynamic shared memory rounded up to the 1024-byte swizzle atom. */
__device__ __forceinline__ uint32_t smem_base() {
    extern __shared__ __align__(16) unsigned char smem[];
    return (smem_addr(smem) + 1023u) & ~1023u;
}

/* d = (scale_d ? d : 0) + A (descriptor, K-major) * B (descriptor, K-major), m64n128k16. */
__device__ __forceinline__ void wg_ss_n128(float (&d)[16][4], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC_N64(d, 0), WG_ACC_N64(d, 8)
        : "l"(da), "l"(db), "r"(scale_d));
}

/* d = (scale_d ? d : 0) + A (descriptor, K-major) * B (descriptor, K-major), m64n96k16. */
__device__ __forceinline__ void wg_ss_n96(float (&d)[12][4], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
        "}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC_N64(d, 0), WG_ACC_N8(d, 8), WG_ACC_N8(d, 9), WG_ACC_N8(d, 10), WG_ACC_N8(d, 11)
        : "l"(da), "l"(db), "r"(scale_d));
}

/* d = (scale_d ? d : 0) + A (descriptor, K-major) * B (descriptor, K-major), m64n256k16:
 * the widest wgmma, which reads A once per 256 columns. */
__device__ __forceinline__ void wg_ss_n256(float (&d)[32][4], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC_N64(d, 0), WG_ACC_N64(d, 8), WG_ACC_N64(d, 16), WG_ACC_N64(d, 24)
        : "l"(da), "l"(db), "r"(scale_d));
}

template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

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

/* TMA: the [rows, 64] box at (column col, row row) of the 2-D map into dst,
 * completion counted on bar. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int col, int row, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"((uint64_t)map), "r"(col), "r"(row), "r"(bar)
        : "memory");
}

/* Thread block clusters. A box multicast by TMA lands at offset dst of the
 * shared memory of every block whose rank is set in cta_mask, each block
 * counting its bytes on its own barrier at offset bar; the blocks lay out
 * their shared memory alike. */
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, int col, int row, uint32_t bar,
                                               uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
        "%3}], [%4], %5;\n" ::"r"(dst),
        "l"((uint64_t)map), "r"(col), "r"(row), "r"(bar), "h"(cta_mask)
        : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* An arrival on the barrier at offset bar of the cluster's block `rank`. */
__device__ __forceinline__ void mbar_arrive_rank(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(
                     bar),
                 "r"(rank)
                 : "memory");
}
/* Every thread of the cluster meets here (all threads of each warp). */
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* A whole [rows, D] tile: D / 64 boxes side by side. */
template <int ROWS, int D>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap *map, int col, int row, uint32_t bar) {
#pragma unroll
    for (int b = 0; b < D / 64; b++) tma_load_2d(dst + b * ROWS * 128, map, col + b * 64, row, bar);
}

/* Bulk copies from shared to global memory (the async proxy, no tensor
 * map): `bytes` (a multiple of 16, both ends 16-byte aligned) stored, or
 * added element-wise as fp32 into what global memory holds. Each is one
 * operation of the issuing thread's bulk group. */
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* The thread's bulk groups have read their shared-memory sources (which may
 * then be overwritten). */
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
/* The thread's bulk groups have completed, their writes made. */
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* Orders this thread's global accesses through the async proxy (bulk
 * copies) with its generic ones (flags). */
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/* A flag in global memory shared by the blocks of one grid. */
__device__ __forceinline__ int flag_load_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void flag_add_release(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void named_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* Producer: before the use-th filling of a stage, waits until the
 * consumers have handed back its previous one (none before the first). */
__device__ __forceinline__ void stage_wait_empty(uint32_t empty, int use) {
    if (use > 0) mbar_wait(empty, (use - 1) & 1);
}

/* Consumer: this warp is done with a stage (one arrival per warp). */
__device__ __forceinline__ void stage_release(uint32_t empty) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(empty);
}

#endif /* !WG_NO_WGMMA */

/* ---- host ---------------------------------------------------------------------------- */

template <typename K>
static void wg_smem(K kern, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

/* cuTensorMapEncodeTiled, from the driver through the runtime (the build
 * links no libcuda). */
static PFN_cuTensorMapEncodeTiled_v12000 tmap_encode(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    if (!fn) {
        cudaDriverEntryPointQueryResult found;
        void *p = NULL;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !p) DK_ABORT("the CUDA driver has no cuTensorMapEncodeTiled");
        fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

/* TMA map of a packed [rows, cols] bf16 tensor read in [box_rows, 64] boxes
 * with the 128-byte swizzle; rows past the end read as zeros. */
static CUtensorMap tmap_rows(const bf16 *base, int cols, int rows, int box_rows) {
    CUtensorMap m;
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t stride[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    CUresult r = tmap_encode()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, elem,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) DK_ABORT("cuTensorMapEncodeTiled failed (%d) for [%d, %d]", (int)r, rows, cols);
    return m;
}

#endif
