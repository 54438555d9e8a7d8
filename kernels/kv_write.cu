/* kv_write.cu: ops_kv_write on the CUDA backend: each new token's keys and
 * values ([Hkv, D] bf16 rows) are copied into their cache slot; slot -1
 * skips the token. One block per token; 16-byte moves when the rows and
 * pointers allow, element moves otherwise. */
#include "kernels/cuda_common.cuh"

/* E = uint4: 16-byte moves, `row` counted in chunks of 8 elements; E = bf16:
 * element moves. */
template <typename E>
__global__ void kv_write_rows(E *kc, E *vc, const E *k, const E *v, const int32_t *slots, int row) {
    const int t = blockIdx.x;
    const int32_t slot = slots[t];
    if (slot < 0) return;
    const size_t src = (size_t)t * row, dst = (size_t)slot * row;
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        kc[dst + c] = k[src + c];
        vc[dst + c] = v[src + c];
    }
}

extern "C" void cuda_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                              const int32_t *slot_mapping, int T, int Hkv, int D) {
    if (T < 0 || Hkv <= 0 || D <= 0) DK_ABORT("ops_kv_write: bad shape T=%d Hkv=%d D=%d", T, Hkv, D);
    if (T == 0) return;
    const int row = Hkv * D;
    cudaStream_t st = ctx_stream(ctx);
    if (row % 8 == 0 && is_aligned16(k_cache) && is_aligned16(v_cache) && is_aligned16(k) && is_aligned16(v)) {
        const int chunks = row / 8;
        const int threads = chunks < 128 ? 32 * (int)div_up((size_t)chunks, 32) : 128;
        kv_write_rows<<<T, threads, 0, st>>>((uint4 *)k_cache, (uint4 *)v_cache, (const uint4 *)k, (const uint4 *)v,
                                             slot_mapping, chunks);
    } else {
        kv_write_rows<<<T, 128, 0, st>>>((bf16 *)k_cache, (bf16 *)v_cache, (const bf16 *)k, (const bf16 *)v,
                                          slot_mapping, row);
    }
    CUDA_LAUNCH_CHECK();
}
