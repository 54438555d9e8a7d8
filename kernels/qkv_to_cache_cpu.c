/* qkv_to_cache_cpu.c: the fp32 reference of ops_qkv_to_cache: the q|k|v rows
 * of a step split into q, k and v, then exactly the unfused ops a step would
 * run (q/k RMSNorm, RoPE, kv_write), so the fused op and the sequence it
 * replaces give the same values on this backend. */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops_cpu.h"

void cpu_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                      const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                      int T, int Hq, int Hkv, int D, float eps, float theta) {
    if (T < 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || D % 2)
        DK_ABORT("ops_qkv_to_cache: bad shape T=%d Hq=%d Hkv=%d D=%d (D even)", T, Hq, Hkv, D);
    if (!q_norm_w != !k_norm_w) DK_ABORT("ops_qkv_to_cache: q_norm_w and k_norm_w must be both set or both NULL");
    if (T == 0) return;
    const size_t Q = (size_t)Hq * D, KV = (size_t)Hkv * D, row = Q + 2 * KV;
    const float *src = qkv;
    float *q = q_out;
    float *qr = dk_malloc((size_t)T * Q * sizeof(float));
    float *k = dk_malloc((size_t)T * KV * sizeof(float)), *kn = dk_malloc((size_t)T * KV * sizeof(float));
    float *v = dk_malloc((size_t)T * KV * sizeof(float));
    float *rstd = dk_malloc((size_t)T * (Hq > Hkv ? Hq : Hkv) * sizeof(float));
    for (int t = 0; t < T; t++) {
        memcpy(qr + (size_t)t * Q, src + (size_t)t * row, Q * sizeof(float));
        memcpy(k + (size_t)t * KV, src + (size_t)t * row + Q, KV * sizeof(float));
        memcpy(v + (size_t)t * KV, src + (size_t)t * row + Q + KV, KV * sizeof(float));
    }
    if (q_norm_w) {
        cpu_rmsnorm_forward(ctx, q, rstd, qr, q_norm_w, T * Hq, D, eps);
        cpu_rmsnorm_forward(ctx, kn, rstd, k, k_norm_w, T * Hkv, D, eps);
    } else {
        memcpy(q, qr, (size_t)T * Q * sizeof(float));
        memcpy(kn, k, (size_t)T * KV * sizeof(float));
    }
    cpu_rope_forward(ctx, q, pos, T, Hq, D, theta);
    cpu_rope_forward(ctx, kn, pos, T, Hkv, D, theta);
    cpu_kv_write(ctx, k_cache, v_cache, kn, v, slot_mapping, T, Hkv, D);
    free(qr), free(k), free(kn), free(v), free(rstd);
}
