/* op_timer.h: where a stretch of work spends its device time, op by op.
 * Between ops_timer_begin and ops_timer_end every op of kernels/ops_list.h
 * that the beginning thread calls on the context is bracketed by two marks
 * in the context's stream: CUDA events on the CUDA backend, the clock on the
 * CPU backend, whose ops have finished when they return. ops_timer_end adds
 * each op's time, and the stream's time between ops (launch gaps, host work
 * the stream waited for), into an ops_time_table; a table can sum several
 * windows, such as the steps of a benchmark.
 *
 * What is counted: the outermost op only (an op that calls another, or the
 * ops a graph capture records, count once, as the outer op); not the ops
 * that do no stream work (alloc, free, host_alloc, host_free, sync, events,
 * graph capture and free, act_size), nor the copy lanes, whose work runs
 * beside the stream. Each mark is one more call into the runtime, so gaps
 * read somewhat larger than in an untimed run; the op times do not.
 *
 * Timing is off (one pointer test per op) until ops_timer_begin. */
#ifndef DK_KERNELS_OP_TIMER_H
#define DK_KERNELS_OP_TIMER_H

#include <stdio.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_TIME_MAX_ROWS 96

typedef struct {
    const char *op; /* the name in kernels/ops_list.h */
    long calls;
    double ms;
} ops_time_row;

typedef struct {
    ops_time_row row[OPS_TIME_MAX_ROWS];
    int n_rows;
    int windows;    /* begin/end windows summed */
    long calls;     /* timed op calls */
    double op_ms;   /* sum of the rows */
    double gap_ms;  /* stream time between consecutive timed ops */
    double span_ms; /* first op's start to last op's end, per window, summed */
} ops_time_table;

/* Starts a window on ctx (the calling thread's ops are timed). The marks
 * are kept with the context between windows and freed with it. */
void ops_timer_begin(ops_ctx *ctx);
/* Ends the window: waits for the stream, then adds what it timed to *tab
 * (zeroed by the caller before the first window). */
void ops_timer_end(ops_ctx *ctx, ops_time_table *tab);
/* The table, slowest op first: calls and milliseconds per window, each op's
 * share of the span, then the gaps and the span. */
void ops_time_table_print(const ops_time_table *tab, FILE *f, const char *title);
/* With the context (ops_ctx_free). */
void op_timer_free(ops_ctx *ctx);

/* The dispatcher's side (kernels/ops.c): enter returns a token that leave
 * takes back: OP_TIMER_NONE where no window is open for this thread, -1 for
 * an op inside the window that is not timed, else the call's index. */
#define OP_TIMER_NONE (-2)
int op_timer_enter_timed(const ops_ctx *ctx, const char *op);
void op_timer_leave_timed(const ops_ctx *ctx, int token);
static inline int op_timer_enter(const ops_ctx *ctx, const char *op) {
    return ctx && ctx->timer ? op_timer_enter_timed(ctx, op) : OP_TIMER_NONE;
}
static inline void op_timer_leave(const ops_ctx *ctx, int token) {
    if (token != OP_TIMER_NONE) op_timer_leave_timed(ctx, token);
}

/* The CUDA marks (kernels/op_timer.cu): an event with timing, recorded on
 * the context's stream; milliseconds between two recorded ones (after the
 * stream was synchronised); whether the stream is being captured. */
void *cuda_timer_mark_new(void);
void cuda_timer_mark_record(const ops_ctx *ctx, void *mark);
double cuda_timer_mark_ms(void *from, void *to);
void cuda_timer_mark_free(void *mark);
int cuda_timer_capturing(const ops_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
