/* test_op_timer.c: the per-op timer (kernels/op_timer.h) on the CPU backend.
 * - Direct ops: each timed op is a row with its call count; ops that do no
 *   stream work (alloc, free, sync) have none; another thread's ops on the
 *   same context are not counted.
 * - Times against the test's own clock around each call of a matmul long
 *   enough to measure: the table's time is inside the bracket and close to
 *   it.
 * - A training step of a small model: the timer changes no result (the
 *   logprobs and a gradient are bit-identical to an untimed step), a window
 *   of two steps has exactly twice the calls of each op of a one-step
 *   window, the ops plus the gaps make up the span, and the span covers
 *   most of the step's wall time. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/op_timer.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tests/unit/test_ops_common.h"

static const ops_time_row *find(const ops_time_table *t, const char *op) {
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(t->row[i].op, op) == 0) return &t->row[i];
    return NULL;
}

typedef struct {
    ops_ctx *ctx;
    void *y, *x;
} thread_arg;

static void *other_thread(void *p) {
    thread_arg *a = p;
    for (int i = 0; i < 4; i++) ops_add(a->ctx, a->y, a->x, 64);
    return NULL;
}

static void test_direct_ops(void) {
    ops_ctx ctx;
    CHECK(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) == DK_OK, "ops_ctx_init: %s", dk_error());
    void *y = ops_alloc(&ctx, 64 * sizeof(float)), *x = ops_alloc(&ctx, 64 * sizeof(float));
    ops_time_table tab;
    memset(&tab, 0, sizeof tab);
    ops_timer_begin(&ctx);
    for (int i = 0; i < 3; i++) ops_add(&ctx, y, x, 64);
    thread_arg a = {&ctx, y, x};
    pthread_t th;
    pthread_create(&th, NULL, other_thread, &a);
    pthread_join(th, NULL);
    ops_zero(&ctx, y, 64 * sizeof(float));
    ops_zero(&ctx, x, 64 * sizeof(float));
    void *tmp = ops_alloc(&ctx, 16);
    ops_free(&ctx, tmp);
    ops_sync(&ctx);
    ops_timer_end(&ctx, &tab);
    /* Outside the window: not counted. */
    ops_add(&ctx, y, x, 64);
    const ops_time_row *add = find(&tab, "add"), *zero = find(&tab, "zero");
    CHECK(add && add->calls == 3, "add: %ld calls, want 3 (the other thread's 4 are not this window's)",
          add ? add->calls : -1L);
    CHECK(zero && zero->calls == 2, "zero: %ld calls, want 2", zero ? zero->calls : -1L);
    CHECK(!find(&tab, "alloc") && !find(&tab, "free") && !find(&tab, "sync"), "alloc, free or sync was timed");
    CHECK(tab.n_rows == 2 && tab.calls == 5 && tab.windows == 1, "rows %d calls %ld windows %d, want 2 5 1",
          tab.n_rows, tab.calls, tab.windows);
    ops_free(&ctx, y);
    ops_free(&ctx, x);
    ops_ctx_free(&ctx);
}

static void test_against_clock(void) {
    enum { N = 192, CALLS = 6 };
    ops_ctx ctx;
    CHECK(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) == DK_OK, "ops_ctx_init: %s", dk_error());
    float *a = ops_alloc(&ctx, N * N * sizeof(float)), *b = ops_alloc(&ctx, N * N * sizeof(float));
    float *c = ops_alloc(&ctx, N * N * sizeof(float));
    for (int i = 0; i < N * N; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    ops_time_table tab;
    memset(&tab, 0, sizeof tab);
    double bracket_ms = 0.0;
    ops_timer_begin(&ctx);
    for (int i = 0; i < CALLS; i++) {
        double t0 = dk_now();
        ops_matmul(&ctx, c, 0, a, b, N, N, N, 0, 1, 1.0f, 0.0f);
        bracket_ms += (dk_now() - t0) * 1e3;
    }
    ops_timer_end(&ctx, &tab);
    const ops_time_row *mm = find(&tab, "matmul");
    CHECK(mm && mm->calls == CALLS, "matmul: %ld calls, want %d", mm ? mm->calls : -1L, CALLS);
    if (mm) {
        printf("matmul %dx%dx%d x%d: timer %.3f ms, the test's clock around the calls %.3f ms\n", N, N, N, CALLS,
               mm->ms, bracket_ms);
        CHECK(mm->ms <= bracket_ms + 1e-6, "the timer's %.4f ms exceed the bracket's %.4f ms", mm->ms, bracket_ms);
        CHECK(mm->ms >= 0.9 * bracket_ms - 0.05, "the timer's %.4f ms are far below the bracket's %.4f ms", mm->ms,
              bracket_ms);
    }
    ops_free(&ctx, a);
    ops_free(&ctx, b);
    ops_free(&ctx, c);
    ops_ctx_free(&ctx);
}

static const model_config cfg = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 96, .hidden_size = 48, .intermediate_size = 80, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .max_position = 128, .rope_theta = 10000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};
enum { T = 40, SEQS = 2 };

/* One step (forward, backward) of the batch; its logprobs and the first
 * layer's gradient sum come back. */
static void step(model *m, const model_batch *b, float *lp, double *gsum) {
    model_zero_grad(m);
    CHECK(model_forward(m, b, 1.0f) == DK_OK, "forward: %s", dk_error());
    float dl[T];
    for (int t = 0; t < T; t++) dl[t] = b->targets[t] >= 0 ? -1.0f / T : 0.0f;
    ops_upload(m->ctx, m->dlogprob, dl, sizeof dl);
    model_backward(m, m->dlogprob, NULL);
    ops_download(m->ctx, lp, m->logprob, T * sizeof(float));
    float *g = dk_malloc(m->layout.layer_size * sizeof(float));
    ops_download(m->ctx, g, m->grads.layers[0], m->layout.layer_size * sizeof(float));
    *gsum = 0.0;
    for (size_t i = 0; i < m->layout.layer_size; i++) *gsum += g[i];
    free(g);
}

static void test_model_step(void) {
    ops_ctx ctx;
    model m;
    CHECK(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, model_scratch_bytes(&cfg, T)) == DK_OK, "ops_ctx_init: %s",
          dk_error());
    CHECK(model_create(&m, &cfg, &ctx, T, 0) == DK_OK, "model_create: %s", dk_error());
    model_init_random(&m, 7, 0.2f);
    int32_t tokens[T], targets[T], cu[SEQS + 1] = {0, 25, T};
    for (int t = 0; t < T; t++) tokens[t] = (t * 37 + 11) % cfg.vocab_size;
    for (int q = 0; q < SEQS; q++)
        for (int t = cu[q]; t < cu[q + 1]; t++) targets[t] = t + 1 < cu[q + 1] ? tokens[t + 1] : -1;
    model_batch b = {.T = T, .n_seqs = SEQS, .tokens = tokens, .cu_seqlens = cu, .targets = targets};

    float lp0[T], lp1[T];
    double g0, g1;
    step(&m, &b, lp0, &g0); /* untimed */
    ops_time_table one, two;
    memset(&one, 0, sizeof one);
    memset(&two, 0, sizeof two);
    double t0 = dk_now();
    ops_timer_begin(&ctx);
    step(&m, &b, lp1, &g1);
    ops_timer_end(&ctx, &one);
    double wall_ms = (dk_now() - t0) * 1e3;
    CHECK(memcmp(lp0, lp1, sizeof lp0) == 0 && g0 == g1, "a timed step differs from an untimed one");
    ops_timer_begin(&ctx);
    step(&m, &b, lp1, &g1);
    step(&m, &b, lp1, &g1);
    ops_timer_end(&ctx, &two);
    ops_time_table_print(&one, stdout, "one training step, CPU backend");

    CHECK(one.n_rows == two.n_rows && one.n_rows >= 5, "rows: one step %d, two steps %d", one.n_rows, two.n_rows);
    for (int i = 0; i < one.n_rows; i++) {
        const ops_time_row *r2 = find(&two, one.row[i].op);
        CHECK(r2 && r2->calls == 2 * one.row[i].calls, "%s: %ld calls in one step, %ld in two", one.row[i].op,
              one.row[i].calls, r2 ? r2->calls : -1L);
    }
    CHECK(find(&one, "matmul") || find(&one, "rmsnorm_matmul"), "no product among the timed ops");
    CHECK(fabs(one.op_ms + one.gap_ms - one.span_ms) <= 1e-6 * fmax(1.0, one.span_ms),
          "ops %.6f + gaps %.6f != span %.6f ms", one.op_ms, one.gap_ms, one.span_ms);
    CHECK(one.span_ms <= wall_ms && one.span_ms >= 0.5 * wall_ms, "span %.3f ms of a %.3f ms step", one.span_ms,
          wall_ms);
    model_free(&m);
    ops_ctx_free(&ctx);
}

int main(void) {
    test_direct_ops();
    test_against_clock();
    test_model_step();
    return test_finish("test_op_timer");
}
