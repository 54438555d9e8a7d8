/* ops_cpu.h: the CPU backend of the op table. One cpu_X for every ops_X of
 * kernels/ops.h that takes a context, with the identical parameter list, so
 * the dispatcher in ops.c is a plain forward and a reader can check the two
 * lists side by side. On this backend every "act" buffer is float, so the
 * void* arguments are float arrays and the casts are copies. The code is
 * fp32, single-threaded except for OpenBLAS, and written to be read: it is
 * the numerical reference the CUDA kernels are tested against. */
#ifndef DK_OPS_CPU_H
#define DK_OPS_CPU_H

#include "kernels/ops.h"

/* memory_cpu.c */
dk_status cpu_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void cpu_ctx_free(ops_ctx *ctx);
size_t cpu_act_size(const ops_ctx *ctx);
void *cpu_alloc(ops_ctx *ctx, size_t bytes);
void cpu_free(ops_ctx *ctx, void *p);
void *cpu_host_alloc(ops_ctx *ctx, size_t bytes);
void cpu_host_free(ops_ctx *ctx, void *p);
void cpu_zero(ops_ctx *ctx, void *p, size_t bytes);
void cpu_sync(ops_ctx *ctx);
void cpu_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void cpu_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes);
void cpu_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n);
void cpu_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n);

/* elementwise_cpu.c */
void cpu_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n);
void cpu_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n);
void cpu_add(ops_ctx *ctx, void *y, const void *x, size_t n);
void cpu_scale_f32(ops_ctx *ctx, float *x, size_t n, float s);
double cpu_sumsq(ops_ctx *ctx, const float *x, size_t n);

/* matmul_cpu.c, bias_cpu.c */
void cpu_matmul(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                int trans_a, int trans_b, float alpha, float beta);
void cpu_bias_forward(ops_ctx *ctx, void *y, const void *bias, int N, int C);
void cpu_bias_backward(ops_ctx *ctx, float *dbias, const void *dy, int N, int C);

/* embedding_cpu.c */
void cpu_embedding_forward(ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T, int C);
void cpu_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T, int C);

/* rmsnorm_cpu.c, layernorm_cpu.c */
void cpu_rmsnorm_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x, const void *w,
                          const float *rstd, int N, int C);
void cpu_layernorm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w,
                           const void *b, int N, int C, float eps);
void cpu_layernorm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x,
                            const void *w, const float *mean, const float *rstd, int N, int C);

/* rope_cpu.c */
void cpu_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta);
void cpu_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta);

/* attention_cpu.c */
void cpu_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                           const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);
void cpu_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *out, const float *lse,
                            const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale);

/* swiglu_cpu.c */
void cpu_swiglu_forward(ops_ctx *ctx, void *out, const void *gu, int N, int inter);
void cpu_swiglu_backward(ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter);

/* lmhead_cpu.c */
void cpu_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                        const int32_t *target, int T, int C, int V, float inv_temp, int chunk);
void cpu_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                         const void *h, const void *W, const int32_t *target, const float *lse,
                         const float *entropy, int T, int C, int V, float inv_temp, int chunk);

/* event_cpu.c */
ops_event *cpu_event_new(ops_ctx *ctx);
void cpu_event_sync(ops_event *e);
void cpu_event_free(ops_event *e);
void cpu_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes);
void cpu_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done);

/* graph_cpu.c */
ops_graph *cpu_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user);
void cpu_graph_launch(ops_ctx *ctx, ops_graph *g);
void cpu_graph_free(ops_graph *g);

/* adamw_cpu.c */
void cpu_adamw(ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale);

/* fused_matmul_cpu.c */
void cpu_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                        int N, int K, float eps, float alpha, float beta);
void cpu_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w,
                               const void *w, int M, int I, int K, float eps);

/* qkv_to_cache_cpu.c */
void cpu_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                      const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                      int T, int Hq, int Hkv, int D, float eps, float theta);

/* kv_write_cpu.c, paged_attention_cpu.c, sample_cpu.c */
void cpu_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                  const int32_t *slot_mapping, int T, int Hkv, int D);
void cpu_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                         int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale);
void cpu_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n,
                int V);

#endif
