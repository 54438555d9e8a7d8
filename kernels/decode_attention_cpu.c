/* decode_attention_cpu.c: ops_decode_attention on the CPU backend, the
 * definition the CUDA kernel is checked against: the q|k|v tail
 * (ops_qkv_to_cache) and then the paged attention with one query per
 * sequence. */
#include "kernels/ops_cpu.h"

void cpu_decode_attention(ops_ctx *ctx, void *out, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                          const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                          const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q, int T,
                          int Hq, int Hkv, int D, int page_size, float scale, float eps, float theta) {
    cpu_qkv_to_cache(ctx, q_out, k_cache, v_cache, qkv, q_norm_w, k_norm_w, pos, slot_mapping, T, Hq, Hkv, D, eps,
                     theta);
    cpu_paged_attention(ctx, out, q_out, k_cache, v_cache, block_table, max_pages, ctx_lens, cu_q, T, T, Hq, Hkv, D,
                        page_size, scale);
}
