/* ops.h: the one op table. The model, the generation engine and the trainer
 * call compute only through these functions, so the same code runs on the CPU
 * backend (fp32, the numerical reference, *_cpu.c) and the CUDA backend (bf16
 * storage with fp32 accumulation, *.cu). Each op dispatches on ctx->device.
 * The ops themselves, with their contracts, are listed once in
 * kernels/ops_list.h; this header declares ops_X for each entry, the types
 * they take, and the few functions whose dispatch is written by hand.
 *
 * Conventions (DESIGN.md §3):
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

/* ---- context ------------------------------------------------------------------- */

/* Written by hand rather than generated from kernels/ops_list.h: creating a
 * context picks the backend (there is no ctx->device to dispatch on yet),
 * freeing one accepts NULL, and the rest take no context. */

/* Creates a context on a device; CUDA fails (DK_ERR_RUNTIME, message says why)
 * where the binary was built without CUDA or no GPU is visible. */
dk_status ops_ctx_init(ops_ctx *ctx, dk_device device, int gpu, size_t scratch_bytes);
void ops_ctx_free(ops_ctx *ctx);
/* 1 when a CUDA GPU can be used. Tests and benchmarks ask it to skip (exit
 * 77) or refuse where there is none. */
int ops_cuda_available(void);
const char *ops_device_name(dk_device d);
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
