/* zero_ckpt.c: a ZeRO-3 model's slices through ckpt_shards_io. Putting a
 * slice sets the act shard from the master first (which also sets the
 * master to the act value cast back) and then the exact fp32 master, so
 * a resumed run holds bit-identical masters and the same act weights. */
#include "trainer/zero_ckpt.h"

static dk_status check_slice(const zero *z, int u, size_t begin, size_t end) {
    size_t n, b, e;
    zero_unit_range(z, u, &n, &b, &e);
    if (b != begin || e != end)
        return dk_fail(DK_ERR_RUNTIME, "checkpoint unit %d: asked for [%zu, %zu), this rank holds [%zu, %zu) of %zu",
                       u, begin, end, b, e, n);
    return DK_OK;
}

static dk_status zc_get(void *ctx, int u, size_t begin, size_t end, float *master, float *m, float *v) {
    zero *z = ctx;
    DK_TRY(check_slice(z, u, begin, end));
    zero_shard_get(z, u, ZERO_MASTER, master);
    zero_shard_get(z, u, ZERO_M, m);
    zero_shard_get(z, u, ZERO_V, v);
    return DK_OK;
}

/* EXACT: the checkpoint's master, else the act value read back (a fresh
 * start: as zero_load_host). */
static dk_status put_slice(zero *z, int u, size_t begin, size_t end, const float *master, const float *m,
                           const float *v, int exact) {
    DK_TRY(check_slice(z, u, begin, end));
    zero_shard_set(z, u, ZERO_PARAM, master);
    if (exact) zero_shard_set(z, u, ZERO_MASTER, master);
    zero_shard_set(z, u, ZERO_M, m);
    zero_shard_set(z, u, ZERO_V, v);
    return DK_OK;
}

static dk_status zc_put(void *ctx, int u, size_t b, size_t e, const float *ma, const float *m, const float *v) {
    return put_slice(ctx, u, b, e, ma, m, v, 1);
}

static dk_status zc_put_init(void *ctx, int u, size_t b, size_t e, const float *ma, const float *m, const float *v) {
    return put_slice(ctx, u, b, e, ma, m, v, 0);
}

static void zc_barrier(void *ctx) { comm_barrier(((zero *)ctx)->c); }

static int zc_all_ok(void *ctx, int ok) {
    zero *z = ctx;
    double n = ok ? 1.0 : 0.0;
    comm_all_reduce_host(z->c, &n, 1);
    return n == (double)z->c->world;
}

ckpt_shards_io zero_ckpt_io(zero *z) {
    ckpt_shards_io io = {z->c->world, z->c->rank, z, zc_get, zc_put, zc_barrier, zc_all_ok};
    return io;
}

ckpt_shards_io zero_ckpt_io_init(zero *z) {
    ckpt_shards_io io = zero_ckpt_io(z);
    io.put = zc_put_init;
    return io;
}
