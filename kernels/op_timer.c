/* op_timer.c: the per-op timer of kernels/op_timer.h: the window's calls
 * and their marks, the table they add up to, and its printout. A mark is a
 * clock reading on the CPU backend and a CUDA event (kernels/op_timer.cu) on
 * the CUDA backend; the events are made as the first windows need them and
 * reused by the later ones, so a window of a few thousand ops makes none
 * after the first. */
#include "kernels/op_timer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    const char *op;
    int start, end; /* mark indices; end -1 until the op returns */
} timed_call;

struct ops_timer {
    int on, depth;
    pthread_t owner;
    timed_call *calls;
    int n_calls, cap_calls;
    double *clock; /* CPU marks: dk_now() seconds */
    void **event;  /* CUDA marks: events, kept across windows */
    int n_marks, cap_marks, n_events;
};

/* Ops that do no work in the context's stream, or whose work runs beside
 * it (the lanes): not timed, and what they call is not timed either. */
static int untimed(const char *op) {
    static const char *names[] = {"act_size",    "alloc",      "free",      "host_alloc",    "host_free",
                                  "sync",        "event_new",  "event_sync", "event_free",   "graph_capture",
                                  "graph_free",  "upload_lane", "download_lane"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(op, names[i]) == 0) return 1;
    return 0;
}

static int mark(const ops_ctx *ctx, struct ops_timer *t) {
    const int cuda = ctx->device == DK_DEVICE_CUDA;
    if (t->n_marks == t->cap_marks) { /* only the device's kind of mark is kept */
        t->cap_marks = t->cap_marks ? 2 * t->cap_marks : 1024;
        if (cuda) t->event = dk_realloc(t->event, (size_t)t->cap_marks * sizeof(void *));
        else t->clock = dk_realloc(t->clock, (size_t)t->cap_marks * sizeof(double));
    }
    int i = t->n_marks++;
    if (cuda) {
#ifdef DK_HAVE_CUDA_OPS
        if (i == t->n_events) t->event[t->n_events++] = cuda_timer_mark_new();
        cuda_timer_mark_record(ctx, t->event[i]);
#endif
    } else {
        t->clock[i] = dk_now();
    }
    return i;
}

static double between_ms(const ops_ctx *ctx, struct ops_timer *t, int from, int to) {
#ifdef DK_HAVE_CUDA_OPS
    if (ctx->device == DK_DEVICE_CUDA) return cuda_timer_mark_ms(t->event[from], t->event[to]);
#endif
    (void)ctx;
    return (t->clock[to] - t->clock[from]) * 1e3;
}

static int capturing(const ops_ctx *ctx) {
#ifdef DK_HAVE_CUDA_OPS
    if (ctx->device == DK_DEVICE_CUDA) return cuda_timer_capturing(ctx);
#endif
    (void)ctx;
    return 0;
}

void ops_timer_begin(ops_ctx *ctx) {
    if (!ctx->timer) ctx->timer = dk_calloc(1, sizeof(struct ops_timer));
    struct ops_timer *t = ctx->timer;
    if (t->on) DK_ABORT("ops_timer_begin: a window is already open on this context");
    t->on = 1;
    t->depth = 0;
    t->owner = pthread_self();
    t->n_calls = 0;
    t->n_marks = 0;
}

int op_timer_enter_timed(const ops_ctx *ctx, const char *op) {
    struct ops_timer *t = ctx->timer;
    if (!t->on || !pthread_equal(t->owner, pthread_self())) return OP_TIMER_NONE;
    if (t->depth++ > 0 || untimed(op) || capturing(ctx)) return -1;
    if (t->n_calls == t->cap_calls) {
        t->cap_calls = t->cap_calls ? 2 * t->cap_calls : 512;
        t->calls = dk_realloc(t->calls, (size_t)t->cap_calls * sizeof(timed_call));
    }
    timed_call *c = &t->calls[t->n_calls];
    c->op = op;
    c->start = mark(ctx, t);
    c->end = -1;
    return t->n_calls++;
}

void op_timer_leave_timed(const ops_ctx *ctx, int token) {
    struct ops_timer *t = ctx->timer;
    t->depth--;
    if (token >= 0) t->calls[token].end = mark(ctx, t);
}

static ops_time_row *row_of(ops_time_table *tab, const char *op) {
    for (int i = 0; i < tab->n_rows; i++)
        if (strcmp(tab->row[i].op, op) == 0) return &tab->row[i];
    if (tab->n_rows == OPS_TIME_MAX_ROWS) DK_ABORT("ops_timer_end: more than %d ops", OPS_TIME_MAX_ROWS);
    ops_time_row *r = &tab->row[tab->n_rows++];
    r->op = op;
    r->calls = 0;
    r->ms = 0.0;
    return r;
}

void ops_timer_end(ops_ctx *ctx, ops_time_table *tab) {
    struct ops_timer *t = ctx->timer;
    if (!t || !t->on) DK_ABORT("ops_timer_end: no window is open on this context");
    if (t->depth != 0) DK_ABORT("ops_timer_end: called from inside an op");
    t->on = 0; /* the sync below is not part of the window */
    ops_sync(ctx);
    tab->windows++;
    for (int i = 0; i < t->n_calls; i++) {
        const timed_call *c = &t->calls[i];
        ops_time_row *r = row_of(tab, c->op);
        double ms = between_ms(ctx, t, c->start, c->end);
        r->calls++;
        r->ms += ms;
        tab->op_ms += ms;
        if (i > 0) tab->gap_ms += between_ms(ctx, t, t->calls[i - 1].end, c->start);
    }
    tab->calls += t->n_calls;
    if (t->n_calls > 0) tab->span_ms += between_ms(ctx, t, t->calls[0].start, t->calls[t->n_calls - 1].end);
}

static int by_ms_desc(const void *a, const void *b) {
    const ops_time_row *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : strcmp(x->op, y->op);
}

void ops_time_table_print(const ops_time_table *tab, FILE *f, const char *title) {
    const double w = tab->windows > 0 ? tab->windows : 1;
    const double span = tab->span_ms > 0 ? tab->span_ms : 1;
    ops_time_row rows[OPS_TIME_MAX_ROWS];
    memcpy(rows, tab->row, (size_t)tab->n_rows * sizeof(ops_time_row));
    qsort(rows, (size_t)tab->n_rows, sizeof(ops_time_row), by_ms_desc);
    fprintf(f, "%s: time per op, per window (%d window%s)\n", title, tab->windows, tab->windows == 1 ? "" : "s");
    fprintf(f, "  %-28s %8s %11s %7s\n", "op", "calls", "ms", "share");
    for (int i = 0; i < tab->n_rows; i++)
        fprintf(f, "  %-28s %8.0f %11.3f %6.1f%%\n", rows[i].op, rows[i].calls / w, rows[i].ms / w,
                100.0 * rows[i].ms / span);
    fprintf(f, "  %-28s %8s %11.3f %6.1f%%\n", "(between ops)", "", tab->gap_ms / w, 100.0 * tab->gap_ms / span);
    fprintf(f, "  %-28s %8.0f %11.3f %6.1f%%\n", "(span)", tab->calls / w, tab->span_ms / w, 100.0);
}

void op_timer_free(ops_ctx *ctx) {
    struct ops_timer *t = ctx->timer;
    if (!t) return;
#ifdef DK_HAVE_CUDA_OPS
    for (int i = 0; i < t->n_events; i++) cuda_timer_mark_free(t->event[i]);
#endif
    free(t->calls);
    free(t->clock);
    free(t->event);
    free(t);
    ctx->timer = NULL;
}
