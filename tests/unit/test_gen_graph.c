/* test_gen_graph.c: the decode-step graph cache of model/gen_graph.c on its
 * own, with the graph calls it makes (ops_graph_capture / _launch / _free)
 * and the step it captures (gen_forward_run) replaced by fakes defined in
 * this file, which the linker takes before the library's. On the GPU the
 * same cache runs in gpu/test_gen_cuda_engine; here every path is forced,
 * including the ones a healthy GPU never takes:
 *   - a step of a new shape is captured (running the step once inside the
 *     capture) and launched; the same shape again is only launched;
 *   - any field of the shape, pointers included, makes a new shape;
 *   - with every slot taken, the least recently launched graph is freed;
 *   - a failed capture says so once on stderr and turns graphs off: that
 *     step and every later one come back GEN_GRAPH_NONE (the engine then
 *     runs them directly) without another capture attempt;
 *   - gen_graphs_free frees each graph still held, exactly once;
 *   - every capture starts after a sync (the engine may have a step queued
 *     ahead, perhaps on the graph being replaced). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "model/gen_graph.h"
#include "model/model.h"
#include "tests/check.h"

/* ---- fakes ---------------------------------------------------------------------------- */

#define MAX_GRAPHS 256

struct ops_graph {
    int id;
};

static int fail_capture;   /* 1: the next captures fail */
static int capture_calls;  /* attempts, failed ones included */
static int step_runs;      /* gen_forward_run calls (inside captures) */
static int n_graphs;       /* graphs made */
static int launches[MAX_GRAPHS], frees[MAX_GRAPHS];
static int last_launched = -1;
static int synced;         /* ops_sync ran since the last capture */

/* A step queued ahead may still run: a capture must start after a sync. */
void ops_sync(ops_ctx *ctx) {
    (void)ctx;
    synced = 1;
}

ops_graph *ops_graph_capture(ops_ctx *ctx, void (*fn)(void *user), void *user) {
    (void)ctx;
    CHECK(synced, "a capture began without a sync of the stream");
    synced = 0;
    capture_calls++;
    if (fail_capture) {
        dk_fail(DK_ERR_RUNTIME, "the capture failed (fake)");
        return NULL;
    }
    if (n_graphs == MAX_GRAPHS) DK_ABORT("test_gen_graph: too many graphs");
    fn(user);
    ops_graph *g = malloc(sizeof *g);
    g->id = n_graphs++;
    return g;
}

void ops_graph_launch(ops_ctx *ctx, ops_graph *g) {
    (void)ctx;
    CHECK(frees[g->id] == 0, "graph %d launched after it was freed", g->id);
    launches[g->id]++;
    last_launched = g->id;
}

void ops_graph_free(ops_ctx *ctx, ops_graph *g) {
    (void)ctx;
    frees[g->id]++;
    free(g);
}

void gen_forward_run(gen_forward *f, const gen_step *st) {
    (void)f, (void)st;
    step_runs++;
}

/* ---- helpers -------------------------------------------------------------------------- */

static int32_t buf_a[8], buf_b[8];

/* A decode step of n sequences (distinct n, distinct shape). */
static gen_step step_of(int n) {
    gen_step st;
    memset(&st, 0, sizeof st);
    st.T = st.n_seqs = st.n_rows = n;
    st.max_pages = 16;
    st.sample = 1;
    st.tokens = st.pos = st.slots = st.cu_q = st.ctx_lens = st.block_table = buf_a;
    return st;
}

/* Runs one step and checks what came back and which graph was launched
 * (-1: none). */
static void run_expect(gen_graphs *gg, gen_forward *f, const gen_step *st, gen_graph_result want, int want_graph,
                       const char *what) {
    last_launched = -1;
    gen_graph_result r = gen_graphs_run(gg, f, st);
    CHECK(r == want, "%s: result %d, expected %d", what, r, want);
    CHECK(last_launched == want_graph, "%s: launched graph %d, expected %d", what, last_launched, want_graph);
}

/* ---- cases ---------------------------------------------------------------------------- */

static void test_capture_replay_evict(gen_forward *f) {
    const int failures0 = failures;
    gen_graphs gg;
    memset(&gg, 0, sizeof gg);

    gen_step a = step_of(1);
    run_expect(&gg, f, &a, GEN_GRAPH_CAPTURED, 0, "first step");
    CHECK(step_runs == 1 && launches[0] == 1, "a capture runs the step once and launches it once (%d, %d)",
          step_runs, launches[0]);
    run_expect(&gg, f, &a, GEN_GRAPH_REPLAYED, 0, "same shape");
    CHECK(step_runs == 1 && capture_calls == 1, "a replay captured again");

    /* Every field of the shape counts, pointers too. */
    gen_step b = a;
    b.block_table = buf_b;
    run_expect(&gg, f, &b, GEN_GRAPH_CAPTURED, 1, "another block-table buffer");
    gen_step c = a;
    c.max_pages = 32;
    run_expect(&gg, f, &c, GEN_GRAPH_CAPTURED, 2, "a wider block table");
    run_expect(&gg, f, &a, GEN_GRAPH_REPLAYED, 0, "the first shape again");

    /* Fill the rest of the slots: shapes of 2 .. GEN_GRAPH_SLOTS - 2
     * sequences take graphs 3 .. GEN_GRAPH_SLOTS - 1. */
    for (int n = 2; n <= GEN_GRAPH_SLOTS - 2; n++) {
        gen_step s = step_of(n);
        run_expect(&gg, f, &s, GEN_GRAPH_CAPTURED, n + 1, "filling the slots");
    }
    CHECK(n_graphs == GEN_GRAPH_SLOTS, "%d graphs after filling %d slots", n_graphs, GEN_GRAPH_SLOTS);
    for (int i = 0; i < n_graphs; i++) CHECK(frees[i] == 0, "graph %d freed while slots were free", i);

    /* Least recently launched now: graph 1 (b), then 2 (c). */
    gen_step s17 = step_of(100);
    run_expect(&gg, f, &s17, GEN_GRAPH_CAPTURED, GEN_GRAPH_SLOTS, "a new shape with every slot taken");
    CHECK(frees[1] == 1, "the least recently launched graph (1) was not the one freed");
    for (int i = 0; i < n_graphs; i++)
        if (i != 1) CHECK(frees[i] == 0, "graph %d freed instead of graph 1", i);
    run_expect(&gg, f, &a, GEN_GRAPH_REPLAYED, 0, "the first shape survives");
    run_expect(&gg, f, &b, GEN_GRAPH_CAPTURED, GEN_GRAPH_SLOTS + 1, "the evicted shape is captured again");
    CHECK(frees[2] == 1, "the next least recently launched graph (2) was not freed");

    int held = 0;
    for (int i = 0; i < n_graphs; i++) held += frees[i] == 0;
    CHECK(held == GEN_GRAPH_SLOTS, "%d graphs held, expected %d", held, GEN_GRAPH_SLOTS);
    gen_graphs_free(&gg, f->m->ctx);
    for (int i = 0; i < n_graphs; i++) CHECK(frees[i] == 1, "graph %d freed %d times", i, frees[i]);
    printf("capture / replay / eviction: %d graphs, %d captures, slots %d: %s\n", n_graphs, capture_calls,
           GEN_GRAPH_SLOTS, failures == failures0 ? "ok" : "FAILED");
}

/* Reads what was written to stderr since stderr_begin. */
static int saved_fd = -1;
static FILE *stderr_file;

static void stderr_begin(void) {
    fflush(stderr);
    stderr_file = tmpfile();
    saved_fd = dup(2);
    dup2(fileno(stderr_file), 2);
}

static void stderr_end(char *out, size_t cap) {
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    rewind(stderr_file);
    size_t n = fread(out, 1, cap - 1, stderr_file);
    out[n] = '\0';
    fclose(stderr_file);
}

static void test_capture_failure(gen_forward *f) {
    const int failures0 = failures;
    gen_graphs gg;
    memset(&gg, 0, sizeof gg);
    const int calls0 = capture_calls, runs0 = step_runs, graphs0 = n_graphs;
    fail_capture = 1;
    char err[1024];
    stderr_begin();
    gen_step a = step_of(1), b = step_of(2);
    run_expect(&gg, f, &a, GEN_GRAPH_NONE, -1, "a failed capture");
    run_expect(&gg, f, &a, GEN_GRAPH_NONE, -1, "the same shape after the failure");
    run_expect(&gg, f, &b, GEN_GRAPH_NONE, -1, "a new shape after the failure");
    stderr_end(err, sizeof err);
    fail_capture = 0;
    run_expect(&gg, f, &b, GEN_GRAPH_NONE, -1, "graphs stay off once a capture failed");
    CHECK(gg.disabled == 1, "graphs not marked off after a failed capture");
    CHECK(capture_calls == calls0 + 1, "%d capture attempts after a failure, expected 1", capture_calls - calls0);
    CHECK(step_runs == runs0 && n_graphs == graphs0, "a failed capture ran or kept something");
    CHECK(strstr(err, "decode steps run without graphs") && strstr(err, "the capture failed (fake)"),
          "stderr does not say why graphs are off: '%s'", err);
    const char *second = strstr(err, "decode steps run without graphs");
    CHECK(second && !strstr(second + 1, "decode steps run without graphs"), "the failure was reported more than once");
    gen_graphs_free(&gg, f->m->ctx);
    printf("capture failure: said once (%.*s), graphs off, no retry: %s\n", (int)strcspn(err, "\n"), err,
           failures == failures0 ? "ok" : "FAILED");
}

int main(void) {
    ops_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    model m;
    memset(&m, 0, sizeof m);
    m.ctx = &ctx;
    gen_forward f;
    memset(&f, 0, sizeof f);
    f.m = &m;
    test_capture_replay_evict(&f);
    test_capture_failure(&f);
    return check_report();
}
