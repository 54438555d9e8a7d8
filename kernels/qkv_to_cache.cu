/* qkv_to_cache.cu: ops_qkv_to_cache on the CUDA backend. A decode step
 * otherwise runs four to six small kernels between the q|k|v projection and
 * the attention (a gather into [q | k | v] planes, the q and k RMSNorms, two
 * rotations, kv_write), each moving a few kilobytes per token and costing
 * mostly its launch; here one block per token does it all.
 *
 * A warp serves one head of one token (q, k or v). A lane owns the pairs
 * (i, i + D/2) for i = lane, lane + 32, ... in registers, so the RMSNorm sum
 * of squares is one warp reduction and the rotation needs no exchange. The
 * arithmetic is that of the unfused kernels: the norm as (x * r) * w with
 * r = 1 / sqrt(mean(x^2) + eps), rounded to bf16; the angle pos * inv_freq
 * (rope_inv_freq_at, as rope.cu), cos and sin by sincosf; the rotated value
 * rounded once. A programmatic dependent launch (cuda_common.cuh) in
 * few-row decode steps. */
#include <math.h>

#include "kernels/cuda_common.cuh"

#define QC_WARPS 4
#define QC_PAIRS 8 /* rotation pairs per lane: D <= 2 * 32 * QC_PAIRS */

/* Block (t, y): warp w serves head y * QC_WARPS + w of token t (q heads,
 * then k heads, then v heads), so every head is one short dependency chain
 * and a one-token step still spreads over many SMs. */
__global__ void __launch_bounds__(QC_WARPS * 32)
    qkv_to_cache_kernel(bf16 *q_out, bf16 *kc, bf16 *vc, const bf16 *__restrict__ qkv, const bf16 *__restrict__ qn,
                        const bf16 *__restrict__ kn, const int32_t *__restrict__ pos, const int32_t *__restrict__ slots,
                        int Hq, int Hkv, int D, float eps, float theta) {
    const int half = D / 2, t = blockIdx.x, lane = threadIdx.x & 31;
    const int hh = blockIdx.y * QC_WARPS + (threadIdx.x >> 5);
    const size_t Q = (size_t)Hq * D, KV = (size_t)Hkv * D;
    const bf16 *row = qkv + (size_t)t * (Q + 2 * KV);
    const bf16 *src = NULL, *w = NULL;
    bf16 *dst = NULL;
    bool rotate = false;
    /* Before pdl_wait: everything that is not the kernel before's output
     * (the slot and position, uploaded before the step; the norm weights;
     * the angles), so after it only the q|k|v row's load, one reduction and
     * the stores remain. */
    if (hh < Hq) {
        src = row + (size_t)hh * D;
        dst = q_out + ((size_t)t * Hq + hh) * D;
        w = qn;
        rotate = true;
    } else if (hh < Hq + 2 * Hkv) {
        const int slot = slots[t];
        const bool is_k = hh < Hq + Hkv;
        const int g = is_k ? hh - Hq : hh - Hq - Hkv;
        if (slot >= 0) {
            src = row + Q + (is_k ? 0 : KV) + (size_t)g * D;
            dst = (is_k ? kc : vc) + ((size_t)slot * Hkv + g) * D;
        }
        if (is_k) w = kn, rotate = true; /* v: a copy */
    }
    float cs[QC_PAIRS], sn[QC_PAIRS], w1[QC_PAIRS], w2[QC_PAIRS];
    if (rotate && src) {
        const float p = (float)pos[t];
#pragma unroll
        for (int j = 0; j < QC_PAIRS; j++) {
            const int i = lane + 32 * j;
            cs[j] = sn[j] = w1[j] = w2[j] = 0.0f;
            if (i < half) {
                sincosf(p * rope_inv_freq_at(i, D, theta), &sn[j], &cs[j]);
                if (w) w1[j] = __bfloat162float(w[i]), w2[j] = __bfloat162float(w[i + half]);
            }
        }
    }
    pdl_wait(); /* the q|k|v rows are the kernel before's output */
    pdl_launch_dependents();
    if (!src) return;
    if (!rotate) {
        for (int i = lane; i < D; i += 32) dst[i] = src[i];
        return;
    }
    float x1[QC_PAIRS], x2[QC_PAIRS], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < QC_PAIRS; j++) {
        const int i = lane + 32 * j;
        x1[j] = i < half ? __bfloat162float(src[i]) : 0.0f;
        x2[j] = i < half ? __bfloat162float(src[i + half]) : 0.0f;
        ss = fmaf(x1[j], x1[j], ss);
        ss = fmaf(x2[j], x2[j], ss);
    }
    float r = 1.0f;
    if (w) r = 1.0f / sqrtf(warp_sum(ss) / (float)D + eps);
#pragma unroll
    for (int j = 0; j < QC_PAIRS; j++) {
        const int i = lane + 32 * j;
        if (i >= half) break;
        float a = x1[j], b = x2[j];
        if (w) {
            a = __bfloat162float(__float2bfloat16_rn((a * r) * w1[j]));
            b = __bfloat162float(__float2bfloat16_rn((b * r) * w2[j]));
        }
        dst[i] = __float2bfloat16_rn(a * cs[j] - b * sn[j]);
        dst[i + half] = __float2bfloat16_rn(b * cs[j] + a * sn[j]);
    }
}

extern "C" void cuda_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                                  const void *q_norm_w, const void *k_norm_w, const int32_t *pos,
                                  const int32_t *slot_mapping, int T, int Hq, int Hkv, int D, float eps,
                                  float theta) {
    if (T < 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || D % 2 || D / 2 > 32 * QC_PAIRS)
        DK_ABORT("ops_qkv_to_cache: bad shape T=%d Hq=%d Hkv=%d D=%d (D even, at most %d)", T, Hq, Hkv, D,
                 64 * QC_PAIRS);
    if (!q_norm_w != !k_norm_w) DK_ABORT("ops_qkv_to_cache: q_norm_w and k_norm_w must be both set or both NULL");
    if (T == 0) return;
    dim3 grid((unsigned)T, (unsigned)((Hq + 2 * Hkv + QC_WARPS - 1) / QC_WARPS));
    cuda_launch_pdl(ctx_stream(ctx), cuda_pdl_rows(ctx, T), qkv_to_cache_kernel, grid, dim3(QC_WARPS * 32), 0,
                    (bf16 *)q_out, (bf16 *)k_cache, (bf16 *)v_cache, (const bf16 *)qkv, (const bf16 *)q_norm_w,
                    (const bf16 *)k_norm_w, pos, slot_mapping, Hq, Hkv, D, eps, theta);
}
