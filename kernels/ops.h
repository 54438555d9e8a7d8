/* ops.h: the one op table. The model, the generation engine and the trainer
 * call compute only through these functions, so the same code runs on the CPU
 * backend (fp32, the numerical reference, *_cpu.c) and the CUDA backend (bf16
 * storage with fp32 accumulation, *.cu). Each op dispatches on ctx->device.
 * The ops themselves, with their contracts, are listed once in
 * kernels/ops_list.h; this header declares ops_X for each entry, the types
 * they take, and the few functions whose dispatch is written by hand.
 *
 * Conventions (docs/DESIGN.md §4):
 * - Raw pointers and explicit sizes; all matrices are row-major.
 * - "act" buffers (activations, parameters, their gradients w.r.t.
 *   activations) are in the backend's storage type: float on CPU, bf16 on CUDA.
 *   They are passed as void*. Buffers typed float* are fp32 on both backends
 *   (norm statistics, logsumexps, per-token logprobs, parameter gradients,
 *   fp32 master weights and AdamW moments).
 * - Parameter gradients are fp32 and backward ops ACCUMULATE into them (+=),
 *   so gradient accumulation over micro-batches needs no extra pass.
 *   Gradients w.r.t. inputs (dx) are OVERWRITTEN unless the name says _acc.
 * - No op allocates; temporary space comes from ctx->scratch.
 * - Pointers live on the ctx's device; ops never copy to the host except the
 *   few that return a host scalar (ops_sumsq), which synchronise. */
#ifndef DK_OPS_H
#define DK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef enum { DK_DEVICE_CPU = 0, DK_DEVICE_CUDA = 1 } dk_device;

/* The most rows ops_matmul's few-row kernels take on CUDA (matmul_gemv.cu,
 * matmul_skinny*.cu): they add beta * C to the fp32 product and round once,
 * in place. Past them cuBLASLt in place rounds the product first
 * (ops_matmul_residual, ops_list.h). */
#define OPS_MATMUL_FEW_ROWS 64

/* ops_paged_attention's kernels on CUDA (paged_attention.cu): the warp
 * kernel for few query rows per sequence (paged_decode.cuh), the
 * tensor-core kernel, and the plain one for other head dims. */
typedef enum { OPS_PAGED_AUTO = 0, OPS_PAGED_DECODE, OPS_PAGED_MMA, OPS_PAGED_PLAIN } ops_paged_kernel;

/* Choices the CUDA backend otherwise makes per call, pinned by the
 * benchmarks that compare them and the tests that run every path. All 0,
 * as ops_ctx_init leaves them, is the automatic choice, which the trainer
 * and the generation engine run with; the CPU backend reads none of them.
 * A value outside a field's range aborts the op that reads it, naming the
 * field. A captured graph (ops_graph_capture) keeps the choices made while
 * it was captured. */
typedef struct ops_tuning {
    /* Blocks of a few-row product (M <= 8 rows times W^T: ops_matmul and
     * ops_rmsnorm_matmul*, gemv_common.cuh) a multiprocessor holds, as a
     * share of the most it can: 0 all of it, -1 a block for every group of
     * columns however many waves that makes, n >= 1 1/n of it. */
    int gemv_residency;
    /* Split-K count of the 9..64-row products (matmul_skinny.cu and
     * matmul_skinny_wgmma.cu, a thread-block cluster per column tile): 0
     * chosen per call, 1..8 pinned (at most K / 64). */
    int skinny_splits;
    /* Output columns per block of those products: 0 chosen per call, 64
     * or 128 pinned, and 96, 192 or 256 on the wgmma kernel (skinny_use 2;
     * 192 and 256 are two warpgroups of 96 and 128). */
    int skinny_bn;
    /* Which 9..64-row products (M rows times W^T) the skinny kernel takes:
     * 0 those with a long K (the dispatcher's choice, matmul.cu: on sm_90
     * the wgmma kernel, matmul_skinny_wgmma.cu; elsewhere the mma.sync
     * one, matmul_skinny.cu, for at most 2048 columns), 1 every one it can
     * on the mma.sync kernel (K % 64 == 0), 2 every one it can on the
     * wgmma kernel (sm_90 only, as 1 elsewhere), -1 none (cuBLASLt, with
     * its fp32 detour for a long K). */
    int skinny_use;
    /* ops_rmsnorm_matmul_swiglu at 9..64 rows on sm_90: 0 gate|up and the
     * SwiGLU in one wgmma skinny launch where the plan is unsplit, -1 the
     * ops in turn (the product, then ops_swiglu_forward). */
    int swiglu_fuse;
    /* The Hopper attention backward at head_dim 128: 0 chosen (the one
     * pass), 1 two passes (dK / dV, then dQ recomputing S and dP), 2 one
     * pass that adds dQ up through ctx->scratch in a fixed order
     * (attention_wgmma.cu); 0 and 2 take the two passes where the GPU,
     * head_dim, alignment or scratch does not allow the one. Both give the
     * same bits on every run. */
    int attn_bwd;
    /* The Hopper attention forward: 0 chosen (today a block per query
     * tile), 1 a block per query tile, 2 persistent: a block per SM that
     * walks the tiles, loading the next one's Q and keys while it finishes
     * the last. */
    int attn_fwd;
    /* ops_paged_attention's kernel (ops_paged_kernel): OPS_PAGED_AUTO
     * chosen per call. A pinned kernel that cannot serve a call gives way:
     * head dims other than 32, 64, 128, 256 or unaligned buffers take the
     * plain kernel, query groups the warp kernel cannot hold the
     * tensor-core one. */
    int paged_kernel;
    /* The warp kernel's plan: decode_warps a CTA (4, 8 or 16) and
     * decode_splits along the context (1 up to the cluster size; 0 is 1).
     * decode_warps 0 chooses both per call, and so do 8 and 16 where a
     * query group is too wide for that many warps. */
    int decode_warps;
    int decode_splits;
    /* How the warp kernel loads its key rows (paged_decode.cuh): 0 chosen
     * (where the batch's (token, KV head) units are fewer than the SMs,
     * next rows in registers for groups of up to 2 heads and a shared ring
     * for wider ones; else direct loads), -1 direct loads at each
     * step, 1 each warp's next rows requested into registers before the
     * math of its current ones, 2 the shared-memory ring. */
    int decode_prefetch;
    /* How the warp kernel's splits merge: 0 chosen (paged_decode.cu's
     * plan), 1 in a thread-block cluster, 2 through partials and a second
     * kernel (not with groups of shared pages, which keep the cluster). */
    int decode_merge;
    /* Non-zero: the decode-step kernels start as ordinary launches rather
     * than programmatic dependent ones (cuda_common.cuh). */
    int no_pdl;
    /* The most token rows at which a decode-step kernel other than the
     * skinny products (always) starts as a programmatic dependent launch:
     * 0 the default (cuda_common.cuh: OPS_MATMUL_FEW_ROWS), n >= 1 n. No
     * effect under no_pdl. */
    int pdl_rows;
    /* The lm head (ops_lmhead_forward / _backward without kept logits):
     * 0 chosen (on sm_90 one wgmma kernel per pass that reduces the logits
     * in registers, lmhead_wgmma.cu, where its operands and the scratch
     * allow, its blocks in clusters of two that share W's tiles), 1 the
     * same kernel one block a tile, -1 cuBLASLt writes fp32 logits into
     * scratch and separate kernels reduce them (lmhead.cu). */
    int lmhead_kernel;
} ops_tuning;

typedef struct ops_ctx {
    dk_device device;
    int gpu;              /* CUDA device ordinal */
    void *stream;         /* cudaStream_t */
    void *blaslt;         /* cublasLtHandle_t */
    void *blaslt_ws;      /* cuBLASLt workspace */
    size_t blaslt_ws_size;
    void *scratch;        /* temporary space for ops (device memory) */
    size_t scratch_size;
    void *lane[2];        /* cudaStream_t: the copy lanes up and down (ops_upload_lane), made on first use */
    void *lane_ev[2];     /* cudaEvent_t: their joins with `stream` */
    ops_tuning tuning;    /* pinned kernel choices for benchmarks and tests; all 0: automatic */
    struct ops_mem_count *mem; /* live ops_alloc bytes (kernels/memory_count.c) */
    struct ops_timer *timer;   /* the per-op timer's window (kernels/op_timer.h); NULL: off */
} ops_ctx;

/* A point the host can wait for (ops_download_lane records it behind its
 * copy): what came before it has finished when ops_event_sync returns,
 * while ops queued on the context after it may still run. */
typedef struct ops_event ops_event;
/* A replayable capture of queued ops (ops_graph_capture). */
typedef struct ops_graph ops_graph;

/* Per-row sampling settings of ops_sample (device memory). temperature 0 is
 * greedy. The random draw is a counter-based function of (seed, counter),
 * so a rollout is reproducible whatever the batch it runs in. */
typedef struct {
    float temperature;
    float top_p;  /* 1: off */
    int top_k;    /* 0: off */
    int pad;
    uint64_t seed;
    uint64_t counter; /* e.g. the token's position in its sequence */
} sample_params;

/* Sequences of an ops_paged_attention call that share their leading cached
 * pages (the samples of one prompt under prefix sharing), so their common
 * keys can be read once per group instead of once per sequence. Group j is
 * the call's sequences first[j] .. end[j]-1 (groups in order, apart); their
 * first len[j] cached positions (whole pages, before every query of the
 * group) are the pages in row j of block_table (the call's max_pages per
 * row). skip[s] is the len of sequence s's group, 0 for a sequence in
 * none. All device memory but n and max_len (the largest len, which sizes
 * the launch). The result is the same attention as without the groups: the
 * CPU backend checks the contract and aborts naming what breaks it, and a
 * backend may read the keys either way. */
typedef struct ops_kv_groups {
    int n, max_len;
    const int32_t *first, *end; /* [n] */
    const int32_t *len;         /* [n] */
    const int32_t *block_table; /* [n, max_pages] */
    const int32_t *skip;        /* [n_seqs] */
} ops_kv_groups;

/* ---- context ------------------------------------------------------------------- */

/* Written by hand rather than generated from kernels/ops_list.h: creating a
 * context picks the backend (there is no ctx->device to dispatch on yet),
 * freeing one accepts NULL, and the rest take no context. */

/* Creates a context on a device; CUDA fails (DK_ERR_RUNTIME, message says why)
 * where the binary was built without CUDA or no GPU is visible. The context
 * starts with every ops_tuning field 0 (automatic); a caller may set them
 * after this returns. */
dk_status ops_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void ops_ctx_free(ops_ctx *ctx);
/* 1 when a CUDA GPU can be used. Tests and benchmarks ask it to skip (exit
 * 77) or refuse where there is none. */
int ops_cuda_available(void);
const char *ops_device_name(dk_device d);
/* Bytes ops_alloc has handed out on ctx and ops_free not yet taken back (the
 * scratch and workspace the context makes for itself are not counted), and
 * the most there were since the last ops_mem_peak_reset (or the start). */
size_t ops_mem_bytes(ops_ctx *ctx);
size_t ops_mem_peak(ops_ctx *ctx);
void ops_mem_peak_reset(ops_ctx *ctx);
/* Scratch bytes ops_attention_backward takes on CUDA: Dvec (Hq * T
 * floats), and with one_pass also the flags and fp32 dQ accumulator of the
 * one-pass Hopper backward (ops_tuning.attn_bwd 0 or 2; attention_wgmma.cu),
 * which gives way to the two passes where the scratch is smaller: a flag
 * and a [64, D] fp32 tile per query head and 64-row tile entry, of which
 * a batch has at most ceil(T / 64) + n_seqs (ops_attention_backward_tiles). */
static inline int ops_attention_backward_tiles(int T, int n_seqs) { return (T + 63) / 64 + n_seqs; }
static inline size_t ops_attention_backward_scratch(int T, int n_seqs, int Hq, int D, int one_pass) {
    const size_t a = 256, dvec = ((size_t)Hq * T * sizeof(float) + a - 1) / a * a;
    if (!one_pass) return dvec;
    const size_t entries = (size_t)ops_attention_backward_tiles(T, n_seqs);
    const size_t flags = ((size_t)Hq * entries * sizeof(int) + a - 1) / a * a;
    return dvec + flags + (size_t)Hq * entries * 64 * D * sizeof(float);
}
/* "cpu" or "cuda", the words of the config's run.device; the command-line
 * programs (tools/bench/bench_train.c, tests/gpu/model_hf_dump.c) read
 * their --device with it. */
dk_status ops_parse_device(const char *s, dk_device *out);

/* ---- the ops ---------------------------------------------------------------------- */

/* ops_X for every entry of kernels/ops_list.h, which holds each op's contract. */

#define DK_OP(name, params, args) void ops_##name params;
#define DK_OP_RET(type, name, params, args) type ops_##name params;
#include "kernels/ops_list.h"

#endif
