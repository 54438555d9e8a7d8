/* test_ops_embedding.c: token embedding on the CPU backend.
 * - forward is an exact row copy (compared bit for bit with torch);
 * - backward against torch's F.embedding autograd with repeated ids
 *   (tests/fixtures/ops/embedding.txt), rows never seen stay untouched;
 * - backward accumulates into dtable (a second call doubles the gradient)
 *   and is deterministic (two runs agree bit for bit).
 * - backward against finite differences of L = sum(r * out) over the table.
 * Tolerance for the backward: sums of at most 4 fp32 terms whose order may
 * differ from torch's, 1e-6 relative to the largest gradient. The lookup is
 * linear in the table, so finite differences carry only fp32 rounding noise
 * (~1e-6 at h = 1e-2): 1e-4. */
#include "tests/unit/test_ops_common.h"

#define TOL_BWD 1e-6
#define TOL_FD 1e-4

typedef struct {
    ops_ctx *ctx;
    float *table, *r, *out;
    const int32_t *ids;
    int T, C;
} emb_case;

static double emb_loss(void *p) {
    emb_case *c = p;
    ops_embedding_forward(c->ctx, c->out, c->ids, c->table, c->T, c->C);
    return dot_f64(c->r, c->out, (size_t)c->T * c->C);
}

int main(void) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }
    fixture fx = fx_load("embedding");
    const float *d = fx_get(&fx, "dims", 3);
    int T = (int)d[0], V = (int)d[1], C = (int)d[2];
    int32_t *ids = fx_ints(&fx, "ids", T);
    const float *table = fx_get(&fx, "table", (size_t)V * C), *dout = fx_get(&fx, "dout", (size_t)T * C);
    const float *want = fx_get(&fx, "dtable", (size_t)V * C);

    float *out = dk_malloc((size_t)T * C * 4);
    ops_embedding_forward(&ctx, out, ids, table, T, C);
    CHECK(max_abs_diff(out, fx_get(&fx, "out", (size_t)T * C), (size_t)T * C) == 0.0,
          "embedding forward must copy rows exactly");

    float *dt = dk_calloc((size_t)V * C, 4), *dt2 = dk_calloc((size_t)V * C, 4);
    ops_embedding_backward(&ctx, dt, dout, ids, T, C);
    double e = rel_err(dt, want, (size_t)V * C);
    int untouched = 1;
    for (int v = 0; v < V; v++) {
        int seen = 0;
        for (int t = 0; t < T; t++) seen |= ids[t] == v;
        for (int c = 0; c < C && !seen; c++) untouched &= dt[(size_t)v * C + c] == 0.0f;
    }
    printf("embedding backward vs torch T=%d V=%d C=%d (repeated ids): rel err %.3g\n", T, V, C, e);
    CHECK(e < TOL_BWD, "embedding backward vs torch: rel err %.3g", e);
    CHECK(untouched, "embedding backward wrote rows of ids that never occur");

    ops_embedding_backward(&ctx, dt2, dout, ids, T, C);
    CHECK(memcmp(dt, dt2, (size_t)V * C * 4) == 0, "embedding backward is not deterministic");
    ops_embedding_backward(&ctx, dt2, dout, ids, T, C);
    for (size_t i = 0; i < (size_t)V * C; i++) dt[i] *= 2.0f;
    double ea = rel_err(dt2, dt, (size_t)V * C);
    CHECK(ea < TOL_BWD, "embedding backward must accumulate into dtable (two calls vs twice one: %.3g)", ea);

    /* finite differences over the whole table (rows never used included) */
    emb_case c = {&ctx, fx_copy(&fx, "table", (size_t)V * C), (float *)dout, out, ids, T, C};
    memset(dt2, 0, (size_t)V * C * 4);
    ops_embedding_backward(&ctx, dt2, dout, ids, T, C);
    double efd = fd_check(c.table, (size_t)V * C, dt2, emb_loss, &c, 1e-2f);
    printf("embedding FD: rel err %.3g\n", efd);
    CHECK(efd < TOL_FD, "embedding FD: rel err %.3g", efd);
    free(c.table);

    free(ids), free(out), free(dt), free(dt2);
    fx_free(&fx);
    ops_ctx_free(&ctx);
    return test_finish("test_ops_embedding");
}
