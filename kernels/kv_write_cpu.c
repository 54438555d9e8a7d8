/* kv_write_cpu.c: the fp32 reference of ops_kv_write: copies each new token's
 * keys and values ([Hkv, D] rows) into its slot of the paged cache. A slot of
 * -1 leaves the token out (padding rows, or rows of a strided view that are
 * not keys), the convention the CUDA kernel shares. */
#include <string.h>

#include "kernels/ops_cpu.h"

void cpu_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                  const int32_t *slot_mapping, int T, int Hkv, int D) {
    if (T < 0 || Hkv <= 0 || D <= 0) DK_ABORT("ops_kv_write: bad shape T=%d Hkv=%d D=%d", T, Hkv, D);
    const size_t row = (size_t)Hkv * D;
    float *kc = k_cache, *vc = v_cache;
    const float *kk = k, *vv = v;
    for (int t = 0; t < T; t++) {
        int32_t slot = slot_mapping[t];
        if (slot < 0) continue;
        memcpy(kc + (size_t)slot * row, kk + (size_t)t * row, row * sizeof(float));
        memcpy(vc + (size_t)slot * row, vv + (size_t)t * row, row * sizeof(float));
    }
}
