/* ops.c: the dispatcher behind kernels/ops.h. Every ops_X forwards to cpu_X
 * (kernels/ops_cpu.h) or, in a build whose op table carries the CUDA kernels
 * (DK_HAVE_CUDA_OPS, declared in kernels/ops_cuda.h), to cuda_X, chosen by
 * ctx->device. Nothing here computes; the only logic is picking the backend
 * and refusing a device this build cannot run. */
#include "kernels/ops.h"

#include <string.h>

#include "kernels/ops_cpu.h"
#ifdef DK_HAVE_CUDA_OPS
#include "kernels/ops_cuda.h"
#include "kernels/ops_cuda_infer.h"
#endif

/* A ctx that names a device outside this build's table can only come from a
 * ctx not made by ops_ctx_init (which refuses it), so it is a programming
 * error and aborts with the op's name. */
static int on_cuda(const ops_ctx *ctx, const char *op) {
    if (!ctx) DK_ABORT("%s: NULL ops_ctx", op);
    if (ctx->device == DK_DEVICE_CPU) return 0;
#ifdef DK_HAVE_CUDA_OPS
    if (ctx->device == DK_DEVICE_CUDA) return 1;
#endif
    DK_ABORT("%s: ops_ctx device %d is not in this build's op table (CPU backend only)", op, (int)ctx->device);
}

#ifdef DK_HAVE_CUDA_OPS
#define DISPATCH(fn, ...)                                         \
    do {                                                          \
        if (on_cuda(ctx, "ops_" #fn)) cuda_##fn(__VA_ARGS__);     \
        else cpu_##fn(__VA_ARGS__);                               \
    } while (0)
#define DISPATCH_RETURN(fn, ...) return on_cuda(ctx, "ops_" #fn) ? cuda_##fn(__VA_ARGS__) : cpu_##fn(__VA_ARGS__)
#else
#define DISPATCH(fn, ...)                                         \
    do {                                                          \
        (void)on_cuda(ctx, "ops_" #fn);                           \
        cpu_##fn(__VA_ARGS__);                                    \
    } while (0)
#define DISPATCH_RETURN(fn, ...)                                  \
    do {                                                          \
        (void)on_cuda(ctx, "ops_" #fn);                           \
        return cpu_##fn(__VA_ARGS__);                             \
    } while (0)
#endif

/* ---- context and memory --------------------------------------------------- */

dk_status ops_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes) {
    if (!ctx) return dk_fail(DK_ERR_RUNTIME, "ops_ctx_init: NULL ops_ctx");
    memset(ctx, 0, sizeof *ctx);
    switch (device) {
    case DK_DEVICE_CPU:
        return cpu_ctx_init(ctx, device, gpu, scratch_bytes);
    case DK_DEVICE_CUDA:
#ifdef DK_HAVE_CUDA_OPS
        return cuda_ctx_init(ctx, device, gpu, scratch_bytes);
#else
        return dk_fail(DK_ERR_RUNTIME,
                       "device cuda (gpu %d): this build's op table has the CPU backend only "
                       "(built without the CUDA kernels); use device = cpu",
                       gpu);
#endif
    }
    return dk_fail(DK_ERR_USAGE, "ops_ctx_init: unknown device %d", (int)device);
}

void ops_ctx_free(ops_ctx *ctx) {
    if (!ctx) return;
    DISPATCH(ctx_free, ctx);
}

int ops_cuda_available(void) {
#ifdef DK_HAVE_CUDA_OPS
    return cuda_available();
#else
    return 0;
#endif
}

const char *ops_device_name(dk_device d) {
    switch (d) {
    case DK_DEVICE_CPU: return "cpu";
    case DK_DEVICE_CUDA: return "cuda";
    }
    return "unknown";
}

dk_status ops_parse_device(const char *s, dk_device *out) {
    if (!s) return dk_fail(DK_ERR_USAGE, "device: missing value (expected cpu or cuda)");
    if (strcmp(s, "cpu") == 0) *out = DK_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *out = DK_DEVICE_CUDA;
    else return dk_fail(DK_ERR_USAGE, "device: unknown value '%s' (expected cpu or cuda)", s);
    return DK_OK;
}

size_t ops_act_size(const ops_ctx *ctx) { DISPATCH_RETURN(act_size, ctx); }
void *ops_alloc(ops_ctx *ctx, size_t bytes) { DISPATCH_RETURN(alloc, ctx, bytes); }
void ops_free(ops_ctx *ctx, void *p) { DISPATCH(free, ctx, p); }
void ops_zero(ops_ctx *ctx, void *p, size_t bytes) { DISPATCH(zero, ctx, p, bytes); }
void *ops_host_alloc(ops_ctx *ctx, size_t bytes) { DISPATCH_RETURN(host_alloc, ctx, bytes); }
void ops_host_free(ops_ctx *ctx, void *p) { DISPATCH(host_free, ctx, p); }
ops_event *ops_event_new(ops_ctx *ctx) { DISPATCH_RETURN(event_new, ctx); }
void ops_event_sync(ops_ctx *ctx, ops_event *e) { DISPATCH(event_sync, e); }
void ops_event_free(ops_ctx *ctx, ops_event *e) { DISPATCH(event_free, e); }
void ops_upload_lane(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    DISPATCH(upload_lane, ctx, dst, src_host, bytes);
}
void ops_download_lane(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes, ops_event *done) {
    DISPATCH(download_lane, ctx, dst_host, src, bytes, done);
}
ops_graph *ops_graph_capture(ops_ctx *ctx, void (*fn)(void *), void *user) {
    DISPATCH_RETURN(graph_capture, ctx, fn, user);
}
void ops_graph_launch(ops_ctx *ctx, ops_graph *g) { DISPATCH(graph_launch, ctx, g); }
void ops_graph_free(ops_ctx *ctx, ops_graph *g) { DISPATCH(graph_free, g); }
void ops_sync(ops_ctx *ctx) { DISPATCH(sync, ctx); }

void ops_upload(ops_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
    DISPATCH(upload, ctx, dst, src_host, bytes);
}
void ops_download(ops_ctx *ctx, void *dst_host, const void *src, size_t bytes) {
    DISPATCH(download, ctx, dst_host, src, bytes);
}
void ops_upload_act(ops_ctx *ctx, void *dst, const float *src_host, size_t n) {
    DISPATCH(upload_act, ctx, dst, src_host, n);
}
void ops_download_act(ops_ctx *ctx, float *dst_host, const void *src, size_t n) {
    DISPATCH(download_act, ctx, dst_host, src, n);
}
void ops_cast_f32_to_act(ops_ctx *ctx, void *dst, const float *src, size_t n) {
    DISPATCH(cast_f32_to_act, ctx, dst, src, n);
}
void ops_cast_act_to_f32(ops_ctx *ctx, float *dst, const void *src, size_t n) {
    DISPATCH(cast_act_to_f32, ctx, dst, src, n);
}

/* ---- elementwise -------------------------------------------------------------- */

void ops_add(ops_ctx *ctx, void *y, const void *x, size_t n) { DISPATCH(add, ctx, y, x, n); }
void ops_scale_f32(ops_ctx *ctx, float *x, size_t n, float s) { DISPATCH(scale_f32, ctx, x, n, s); }
double ops_sumsq(ops_ctx *ctx, const float *x, size_t n) { DISPATCH_RETURN(sumsq, ctx, x, n); }

/* ---- matmul ------------------------------------------------------------------ */

void ops_matmul(ops_ctx *ctx, void *c, int c_f32, const void *a, const void *b, int M, int N, int K,
                int trans_a, int trans_b, float alpha, float beta) {
    DISPATCH(matmul, ctx, c, c_f32, a, b, M, N, K, trans_a, trans_b, alpha, beta);
}
void ops_bias_forward(ops_ctx *ctx, void *y, const void *bias, int N, int C) {
    DISPATCH(bias_forward, ctx, y, bias, N, C);
}
void ops_bias_backward(ops_ctx *ctx, float *dbias, const void *dy, int N, int C) {
    DISPATCH(bias_backward, ctx, dbias, dy, N, C);
}

/* ---- embedding --------------------------------------------------------------- */

void ops_embedding_forward(ops_ctx *ctx, void *out, const int32_t *ids, const void *table, int T, int C) {
    DISPATCH(embedding_forward, ctx, out, ids, table, T, C);
}
void ops_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout, const int32_t *ids, int T, int C) {
    DISPATCH(embedding_backward, ctx, dtable, dout, ids, T, C);
}

/* ---- normalisation ----------------------------------------------------------- */

void ops_rmsnorm_forward(ops_ctx *ctx, void *out, float *rstd, const void *x, const void *w, int N, int C,
                         float eps) {
    DISPATCH(rmsnorm_forward, ctx, out, rstd, x, w, N, C, eps);
}
void ops_rmsnorm_backward(ops_ctx *ctx, void *dx, float *dw, const void *dout, const void *x, const void *w,
                          const float *rstd, int N, int C) {
    DISPATCH(rmsnorm_backward, ctx, dx, dw, dout, x, w, rstd, N, C);
}
void ops_layernorm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w,
                           const void *b, int N, int C, float eps) {
    DISPATCH(layernorm_forward, ctx, out, mean, rstd, x, w, b, N, C, eps);
}
void ops_layernorm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x,
                            const void *w, const float *mean, const float *rstd, int N, int C) {
    DISPATCH(layernorm_backward, ctx, dx, dw, db, dout, x, w, mean, rstd, N, C);
}

/* ---- rotary embedding -------------------------------------------------------- */

void ops_rope_forward(ops_ctx *ctx, void *x, const int32_t *pos, int T, int H, int D, float theta) {
    DISPATCH(rope_forward, ctx, x, pos, T, H, D, theta);
}
void ops_rope_backward(ops_ctx *ctx, void *dx, const int32_t *pos, int T, int H, int D, float theta) {
    DISPATCH(rope_backward, ctx, dx, pos, T, H, D, theta);
}

/* ---- attention --------------------------------------------------------------- */

void ops_attention_forward(ops_ctx *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                           const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    DISPATCH(attention_forward, ctx, out, lse, q, k, v, cu_seqlens, n_seqs, T, Hq, Hkv, D, scale);
}
void ops_attention_backward(ops_ctx *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *k, const void *v, const void *out, const float *lse,
                            const int32_t *cu_seqlens, int n_seqs, int T, int Hq, int Hkv, int D, float scale) {
    DISPATCH(attention_backward, ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, n_seqs, T, Hq, Hkv, D,
             scale);
}

/* ---- MLP --------------------------------------------------------------------- */

void ops_swiglu_forward(ops_ctx *ctx, void *out, const void *gu, int N, int inter) {
    DISPATCH(swiglu_forward, ctx, out, gu, N, inter);
}
void ops_swiglu_backward(ops_ctx *ctx, void *dgu, const void *dout, const void *gu, int N, int inter) {
    DISPATCH(swiglu_backward, ctx, dgu, dout, gu, N, inter);
}

/* ---- fused lm head ----------------------------------------------------------- */

void ops_lmhead_forward(ops_ctx *ctx, float *logprob, float *entropy, float *lse, const void *h, const void *W,
                        const int32_t *target, int T, int C, int V, float inv_temp, int chunk) {
    DISPATCH(lmhead_forward, ctx, logprob, entropy, lse, h, W, target, T, C, V, inv_temp, chunk);
}
void ops_lmhead_backward(ops_ctx *ctx, void *dh, float *dW, const float *dlogprob, const float *dentropy,
                         const void *h, const void *W, const int32_t *target, const float *lse,
                         const float *entropy, int T, int C, int V, float inv_temp, int chunk) {
    DISPATCH(lmhead_backward, ctx, dh, dW, dlogprob, dentropy, h, W, target, lse, entropy, T, C, V, inv_temp,
             chunk);
}

/* ---- optimizer ---------------------------------------------------------------- */

void ops_adamw(ops_ctx *ctx, void *param, float *master, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    DISPATCH(adamw, ctx, param, master, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

/* ---- generation ----------------------------------------------------------------- */

void ops_rmsnorm_matmul(ops_ctx *ctx, void *c, int c_f32, void *tmp, const void *x, const void *norm_w, const void *w, int M,
                        int N, int K, float eps, float alpha, float beta) {
    DISPATCH(rmsnorm_matmul, ctx, c, c_f32, tmp, x, norm_w, w, M, N, K, eps, alpha, beta);
}
void ops_rmsnorm_matmul_swiglu(ops_ctx *ctx, void *h, void *gu, void *tmp, const void *x, const void *norm_w,
                               const void *w, int M, int I, int K, float eps) {
    DISPATCH(rmsnorm_matmul_swiglu, ctx, h, gu, tmp, x, norm_w, w, M, I, K, eps);
}
void ops_qkv_to_cache(ops_ctx *ctx, void *q_out, void *k_cache, void *v_cache, const void *qkv,
                      const void *q_norm_w, const void *k_norm_w, const int32_t *pos, const int32_t *slot_mapping,
                      int T, int Hq, int Hkv, int D, float eps, float theta) {
    DISPATCH(qkv_to_cache, ctx, q_out, k_cache, v_cache, qkv, q_norm_w, k_norm_w, pos, slot_mapping, T, Hq, Hkv, D,
             eps, theta);
}
void ops_kv_write(ops_ctx *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                  const int32_t *slot_mapping, int T, int Hkv, int D) {
    DISPATCH(kv_write, ctx, k_cache, v_cache, k, v, slot_mapping, T, Hkv, D);
}

void ops_paged_attention(ops_ctx *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                         const int32_t *block_table, int max_pages, const int32_t *ctx_lens, const int32_t *cu_q,
                         int n_seqs, int T, int Hq, int Hkv, int D, int page_size, float scale) {
    DISPATCH(paged_attention, ctx, out, q, k_cache, v_cache, block_table, max_pages, ctx_lens, cu_q, n_seqs, T, Hq,
             Hkv, D, page_size, scale);
}

void ops_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n,
                int V) {
    DISPATCH(sample, ctx, tokens, logprob, logits, params, n, V);
}
