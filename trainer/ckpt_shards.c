/* ckpt_shards.c: the per-rank HF writes and optimizer files of
 * ckpt_shards.h. An optimizer file is little-endian:
 *   "DKOPTIM\0", u32 version (2), u32 world, u32 rank, u32 step, u64 units,
 *   per unit u64 size, u64 begin, u64 end   (this rank's slice of the unit)
 *   per unit fp32 master[end - begin], m[end - begin], v[end - begin]
 * Version 1 (one process, before sharding) had per unit u64 global offset,
 * u64 size in the table and the whole unit as the slice; it still loads. */
#define _POSIX_C_SOURCE 200809L
#include "trainer/ckpt_shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/util.h"
#include "dist/shard.h"
#include "model/weights.h"
#include "model/weights_shards.h"

#define OPT_MAGIC "DKOPTIM\0"
#define OPT_VERSION 2u

dk_status ckpt_shards_sync(const ckpt_shards_io *io, dk_status st, const char *what) {
    if (io->all_ok) {
        int ok = io->all_ok(io->ctx, st == DK_OK);
        if (st != DK_OK) return st;
        if (!ok) return dk_fail(DK_ERR_RUNTIME, "%s failed on another rank", what);
        return DK_OK;
    }
    if (io->barrier) io->barrier(io->ctx);
    return st;
}

/* Calls FN for this rank's slice of every unit that has one, with zeroed
 * host arrays for the slice's master, m and v (the bound on host memory:
 * three times the largest slice). */
typedef dk_status (*slice_fn)(void *arg, int u, size_t b, size_t e, float *ma, float *m, float *v);

static dk_status for_each_slice(const model_config *c, const param_layout *pl, const ckpt_shards_io *io, slice_fn fn,
                                void *arg) {
    dk_status st = DK_OK;
    for (int u = 0; u < weights_n_units(c) && st == DK_OK; u++) {
        size_t b, e;
        shard_range(weights_unit_size(c, pl, u), io->world, io->rank, &b, &e);
        if (b == e) continue;
        const size_t len = e - b;
        float *buf = dk_calloc(3 * len, sizeof(float));
        st = fn(arg, u, b, e, buf, buf + len, buf + 2 * len);
        free(buf);
    }
    return st;
}

/* ---- saving ------------------------------------------------------------------ */

typedef struct {
    FILE *f;
    const char *path;
    uint32_t crc;
    uint64_t size;
} out_file;

static dk_status out_write(out_file *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n) return dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", o->path, strerror(errno));
    o->crc = crc32c_extend(o->crc, p, n);
    o->size += n;
    return DK_OK;
}

/* Header and table of this rank's file. */
static dk_status write_header(out_file *o, const model_config *c, const param_layout *pl, int step_t,
                              const ckpt_shards_io *io) {
    const int n_units = weights_n_units(c);
    uint32_t hdr[4] = {OPT_VERSION, (uint32_t)io->world, (uint32_t)io->rank, (uint32_t)step_t};
    uint64_t nu = (uint64_t)n_units;
    DK_TRY(out_write(o, OPT_MAGIC, 8));
    DK_TRY(out_write(o, hdr, sizeof hdr));
    DK_TRY(out_write(o, &nu, sizeof nu));
    for (int u = 0; u < n_units; u++) {
        size_t n = weights_unit_size(c, pl, u), b, e;
        shard_range(n, io->world, io->rank, &b, &e);
        uint64_t row[3] = {n, b, e};
        DK_TRY(out_write(o, row, sizeof row));
    }
    return DK_OK;
}

/* One slice on its way out: into the HF files and this rank's optimizer file. */
typedef struct {
    out_file *o;
    const weights_plan *plan;
    const char *dir;
    const ckpt_shards_io *io;
} save_arg;

static dk_status save_slice(void *arg, int u, size_t b, size_t e, float *ma, float *m, float *v) {
    save_arg *a = arg;
    const size_t len = e - b;
    DK_TRY(a->io->get(a->io->ctx, u, b, e, ma, m, v));
    DK_TRY(weights_plan_write(a->plan, a->dir, u, b, len, ma));
    DK_TRY(out_write(a->o, ma, len * sizeof(float)));
    DK_TRY(out_write(a->o, m, len * sizeof(float)));
    return out_write(a->o, v, len * sizeof(float));
}

static dk_status save_optim(const char *dir, const weights_plan *plan, const model_config *c, const param_layout *pl,
                            int step_t, const ckpt_shards_io *io, uint32_t *crc, uint64_t *size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/optim/rank_%05d.bin", dir, io->rank);
    out_file o = {fopen(path, "wb"), path, 0, 0};
    if (!o.f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    dk_status st = write_header(&o, c, pl, step_t, io);
    save_arg a = {&o, plan, dir, io};
    if (st == DK_OK) st = for_each_slice(c, pl, io, save_slice, &a);
    if (st == DK_OK && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0))
        st = dk_fail(DK_ERR_RUNTIME, "%s: flush failed: %s", path, strerror(errno));
    if (fclose(o.f) != 0 && st == DK_OK) st = dk_fail(DK_ERR_RUNTIME, "%s: close failed: %s", path, strerror(errno));
    *crc = o.crc;
    *size = o.size;
    return st;
}

dk_status ckpt_shards_save(const char *dir, const model_config *c, const param_layout *pl, int step_t,
                           size_t max_shard_bytes, const ckpt_shards_io *io, uint32_t *optim_crc,
                           uint64_t *optim_size) {
    weights_plan plan;
    DK_TRY(weights_plan_init(&plan, c, pl, ST_BF16, max_shard_bytes));
    dk_status st = io->rank == 0 ? weights_plan_create(&plan, dir) : DK_OK;
    st = ckpt_shards_sync(io, st, "creating the model files");
    if (st == DK_OK) st = save_optim(dir, &plan, c, pl, step_t, io, optim_crc, optim_size);
    if (st == DK_OK) st = weights_plan_finish(&plan, dir);
    weights_plan_free(&plan);
    return ckpt_shards_sync(io, st, "writing the checkpoint shards");
}

/* ---- loading ----------------------------------------------------------------- */

/* One old rank's file: where each unit's slice lies in it. */
typedef struct {
    int fd;
    char path[4200];
    uint64_t *begin, *end, *data; /* per unit: the slice, and the byte offset of its master */
} old_file;

static dk_status read_at(const old_file *f, void *p, size_t n, uint64_t at, const char *what) {
    char *b = p;
    while (n > 0) {
        ssize_t r = pread(f->fd, b, n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return dk_fail(DK_ERR_RUNTIME, "%s: read failed in %s: %s", f->path, what, strerror(errno));
        if (r == 0) return dk_fail(DK_ERR_RUNTIME, "%s: truncated file while reading %s", f->path, what);
        b += r;
        at += (uint64_t)r;
        n -= (size_t)r;
    }
    return DK_OK;
}

/* Opens old rank Q's file and checks its header against the model and the
 * shard rule; *world is set from rank 0's file and checked in the others. */
static dk_status old_open(old_file *f, const char *dir, int q, int *world, int *step_t, const model_config *c,
                          const param_layout *pl) {
    const int n_units = weights_n_units(c);
    snprintf(f->path, sizeof f->path, "%s/optim/rank_%05d.bin", dir, q);
    f->fd = open(f->path, O_RDONLY);
    if (f->fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", f->path, strerror(errno));
    char magic[8];
    uint32_t hdr[4];
    uint64_t nu;
    DK_TRY(read_at(f, magic, 8, 0, "the magic"));
    if (memcmp(magic, OPT_MAGIC, 8) != 0) return dk_fail(DK_ERR_RUNTIME, "%s: not an optimizer file", f->path);
    DK_TRY(read_at(f, hdr, sizeof hdr, 8, "the header"));
    DK_TRY(read_at(f, &nu, sizeof nu, 24, "the unit count"));
    const uint32_t version = hdr[0];
    if (version != 1u && version != OPT_VERSION)
        return dk_fail(DK_ERR_RUNTIME, "%s: version %u, expected %u", f->path, version, OPT_VERSION);
    if (q == 0) {
        if (hdr[1] < 1u || hdr[1] > 1u << 20)
            return dk_fail(DK_ERR_RUNTIME, "%s: world size %u in the header", f->path, hdr[1]);
        *world = (int)hdr[1];
        *step_t = (int)hdr[3];
    } else if ((int)hdr[1] != *world || (int)hdr[3] != *step_t) {
        return dk_fail(DK_ERR_RUNTIME, "%s: world size %u, step %u; rank 0's file says %d, %d", f->path, hdr[1],
                       hdr[3], *world, *step_t);
    }
    if ((int)hdr[2] != q) return dk_fail(DK_ERR_RUNTIME, "%s: written by rank %u, expected %d", f->path, hdr[2], q);
    if (nu != (uint64_t)n_units)
        return dk_fail(DK_ERR_RUNTIME, "%s: %llu parameter units, the model has %d (a different model shape?)", f->path,
                       (unsigned long long)nu, n_units);
    f->begin = dk_malloc(3 * (size_t)n_units * sizeof(uint64_t));
    f->end = f->begin + n_units;
    f->data = f->end + n_units;
    const uint64_t row_bytes = version == 1u ? 16 : 24; /* v1: offset, size */
    uint64_t at = 32, pos = 32 + row_bytes * (uint64_t)n_units;
    for (int u = 0; u < n_units; u++, at += row_bytes) {
        uint64_t row[3] = {0, 0, 0};
        DK_TRY(read_at(f, row, (size_t)row_bytes, at, "the unit table"));
        size_t n = weights_unit_size(c, pl, u), b, e;
        shard_range(n, *world, q, &b, &e);
        uint64_t size = version == 1u ? row[1] : row[0], rb = version == 1u ? 0 : row[1], re = version == 1u ? row[1] : row[2];
        if (size != n || rb != b || re != e)
            return dk_fail(DK_ERR_RUNTIME,
                           "%s: unit %d holds [%llu, %llu) of %llu elements; the model and the shard rule at world %d "
                           "expect [%zu, %zu) of %zu",
                           f->path, u, (unsigned long long)rb, (unsigned long long)re, (unsigned long long)size, *world,
                           b, e, n);
        f->begin[u] = b;
        f->end[u] = e;
        f->data[u] = pos;
        pos += 3 * (e - b) * sizeof(float);
    }
    return DK_OK;
}

static void old_close(old_file *f) {
    if (f->fd >= 0) close(f->fd);
    free(f->begin);
    f->fd = -1;
    f->begin = NULL;
}

/* The new slice [b, e) of unit U from the old files that hold its pieces. */
typedef struct {
    old_file *old;
    int world; /* of the old files */
    const model_config *c;
    const param_layout *pl;
    const ckpt_shards_io *io;
} load_arg;

static dk_status load_slice(void *arg, int u, size_t b, size_t e, float *ma, float *m, float *v) {
    load_arg *g = arg;
    const size_t len = shard_len(weights_unit_size(g->c, g->pl, u), g->world);
    for (size_t q = b / len; q < (size_t)g->world && q * len < e; q++) {
        const old_file *f = &g->old[q];
        size_t a = b > f->begin[u] ? b : f->begin[u], z = e < f->end[u] ? e : f->end[u];
        if (a >= z) continue;
        const uint64_t L = f->end[u] - f->begin[u], at = f->data[u] + (a - f->begin[u]) * sizeof(float);
        const size_t bytes = (z - a) * sizeof(float);
        char what[64];
        snprintf(what, sizeof what, "unit %d", u);
        DK_TRY(read_at(f, ma + (a - b), bytes, at, what));
        DK_TRY(read_at(f, m + (a - b), bytes, at + L * sizeof(float), what));
        DK_TRY(read_at(f, v + (a - b), bytes, at + 2 * L * sizeof(float), what));
    }
    return g->io->put(g->io->ctx, u, b, e, ma, m, v);
}

dk_status ckpt_shards_load(const char *dir, const model_config *c, const param_layout *pl, const ckpt_shards_io *io,
                           int *step_t) {
    int world = 0, t = 0;
    old_file first = {.fd = -1};
    dk_status st = old_open(&first, dir, 0, &world, &t, c, pl);
    const int n_old = st == DK_OK ? world : 1;
    old_file *old = dk_calloc((size_t)n_old, sizeof *old);
    old[0] = first;
    for (int q = 1; q < n_old; q++) old[q].fd = -1;
    for (int q = 1; q < n_old && st == DK_OK; q++) st = old_open(&old[q], dir, q, &world, &t, c, pl);
    load_arg g = {old, world, c, pl, io};
    if (st == DK_OK) st = for_each_slice(c, pl, io, load_slice, &g);
    for (int q = 0; q < n_old; q++) old_close(&old[q]);
    free(old);
    if (st == DK_OK) *step_t = t;
    return st;
}

/* ---- a fresh start from HF weights ---------------------------------------------- */

typedef struct {
    const weights_reader *w;
    const ckpt_shards_io *io;
} init_arg;

static dk_status init_slice(void *arg, int u, size_t b, size_t e, float *ma, float *m, float *v) {
    init_arg *a = arg;
    DK_TRY(weights_reader_read(a->w, u, b, e - b, ma));
    return a->io->put(a->io->ctx, u, b, e, ma, m, v); /* m and v: zero */
}

dk_status ckpt_shards_init_from_hf(const char *dir, const model_config *c, const param_layout *pl,
                                   const ckpt_shards_io *io) {
    weights_reader w;
    dk_status st = weights_reader_open(&w, dir, c, pl);
    if (st == DK_OK) {
        init_arg a = {&w, io};
        st = for_each_slice(c, pl, io, init_slice, &a);
        weights_reader_close(&w);
    }
    return ckpt_shards_sync(io, st, "loading the initial weights");
}
