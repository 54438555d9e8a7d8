/* checkpoint.c: writes, checks and reads the checkpoint directory of
 * checkpoint.h. The sharded files (weights, optimizer state) go through
 * ckpt_shards.c and their checksums through ckpt_manifest.c; this file adds
 * what makes a checkpoint durable and recognisable: state.json, the fsyncs,
 * DONE, the rename, the run id, pruning, and the choice of checkpoint at
 * resume. A single-process run is world 1: its model and optimizer are read
 * and written through the same callbacks a ZeRO-3 rank passes. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "trainer/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/durable.h"
#include "common/util.h"
#include "model/weights.h"
#include "trainer/ckpt_manifest.h"

#define PATH_CAP 4400

/* ---- the run id ---------------------------------------------------------------- */

static char g_run_id[17];

const char *ckpt_run_id(void) {
    if (!g_run_id[0]) {
        uint64_t x = 0;
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&x, sizeof x, 1, f) != 1) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            x = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
        }
        if (f) fclose(f);
        snprintf(g_run_id, sizeof g_run_id, "%016llx", (unsigned long long)x);
    }
    return g_run_id;
}

/* ---- one process: the model and optimizer as rank 0 of 1 -------------------------- */

typedef struct {
    model *m;
    optim *o;
} local_state;

static void *unit_at(const model_config *c, const param_buffers *b, int u, size_t first, size_t elem) {
    return (char *)weights_unit_ptr(c, b, u) + first * elem;
}

static dk_status local_get(void *ctx, int u, size_t b, size_t e, float *ma, float *m, float *v) {
    local_state *s = ctx;
    const model_config *c = &s->m->cfg;
    ops_ctx *ox = s->m->ctx;
    const size_t n = e - b, bytes = n * sizeof(float);
    if (s->o->has_master) ops_download(ox, ma, unit_at(c, &s->o->master, u, b, 4), bytes);
    else ops_download_act(ox, ma, unit_at(c, &s->m->params, u, b, ops_act_size(ox)), n); /* fp32 params are the masters */
    ops_download(ox, m, unit_at(c, &s->o->m, u, b, 4), bytes);
    ops_download(ox, v, unit_at(c, &s->o->v, u, b, 4), bytes);
    ops_sync(ox);
    return DK_OK;
}

static dk_status local_put(void *ctx, int u, size_t b, size_t e, const float *ma, const float *m, const float *v) {
    local_state *s = ctx;
    const model_config *c = &s->m->cfg;
    ops_ctx *ox = s->m->ctx;
    const size_t n = e - b, bytes = n * sizeof(float);
    if (s->o->has_master) ops_upload(ox, unit_at(c, &s->o->master, u, b, 4), ma, bytes);
    ops_upload_act(ox, unit_at(c, &s->m->params, u, b, ops_act_size(ox)), ma, n);
    ops_upload(ox, unit_at(c, &s->o->m, u, b, 4), m, bytes);
    ops_upload(ox, unit_at(c, &s->o->v, u, b, 4), v, bytes);
    ops_sync(ox); /* the caller reuses the host arrays next */
    return DK_OK;
}

static ckpt_shards_io local_io(local_state *s) {
    ckpt_shards_io io = {1, 0, s, local_get, local_put, NULL, NULL};
    return io;
}

/* ---- state.json ---------------------------------------------------------------------- */

static dk_status save_state(const char *dir, const ckpt_state *s, int world) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", s->step);
    cJSON_AddNumberToObject(j, "data_cursor", (double)s->data_cursor);
    cJSON_AddNumberToObject(j, "seed", (double)s->seed);
    cJSON_AddNumberToObject(j, "world_size", world);
    cJSON_AddStringToObject(j, "run_id", ckpt_run_id());
    cJSON_AddStringToObject(j, "rng", "counter-based, keyed by (seed, step, sample)");
    cJSON *files = cJSON_AddObjectToObject(j, "files");
    dk_status st = ckpt_manifest_merge(dir, world, files);
    if (st == DK_OK) {
        char *text = cJSON_Print(j), path[PATH_CAP];
        snprintf(path, sizeof path, "%s/state.json", dir);
        st = dk_write_file_synced(path, text, strlen(text));
        cJSON_free(text);
    }
    cJSON_Delete(j);
    return st;
}

/* Parses state.json; *files (may be NULL) gets the manifest to check. */
static dk_status load_state(const char *dir, ckpt_state *s, char *run_id, size_t run_id_cap, cJSON **json) {
    char path[PATH_CAP], *text;
    snprintf(path, sizeof path, "%s/state.json", dir);
    DK_TRY(dk_read_file(path, &text, NULL));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return dk_fail(DK_ERR_RUNTIME, "%s: invalid JSON", path);
    const char *need[] = {"step", "data_cursor", "seed", "world_size"};
    for (int i = 0; i < 4; i++) {
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, need[i]))) {
            cJSON_Delete(j);
            return dk_fail(DK_ERR_RUNTIME, "%s: field '%s' is missing or not a number", path, need[i]);
        }
    }
    s->step = cJSON_GetObjectItemCaseSensitive(j, "step")->valueint;
    s->data_cursor = (long)cJSON_GetObjectItemCaseSensitive(j, "data_cursor")->valuedouble;
    s->seed = (uint64_t)cJSON_GetObjectItemCaseSensitive(j, "seed")->valuedouble;
    s->world_size = cJSON_GetObjectItemCaseSensitive(j, "world_size")->valueint;
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    if (run_id) snprintf(run_id, run_id_cap, "%s", cJSON_IsString(rid) ? rid->valuestring : "");
    if (json) *json = j;
    else cJSON_Delete(j);
    return DK_OK;
}

/* ---- listing and pruning -------------------------------------------------------------- */

typedef struct {
    int step;
    int current; /* written by this run */
} ckpt_entry;

/* Complete checkpoints (step_NNNNNNNN with DONE), newest first: this run's
 * by step, then the others by step. Returns the count. */
static int list_complete(const char *ckdir, ckpt_entry *out, int cap) {
    DIR *d = opendir(ckdir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char tail;
        if (sscanf(e->d_name, "step_%d%c", &step, &tail) != 1) continue; /* skips step_X.tmp */
        char sub[PATH_CAP], done[PATH_CAP + 8];
        snprintf(sub, sizeof sub, "%s/%s", ckdir, e->d_name);
        snprintf(done, sizeof done, "%s/DONE", sub);
        if (!dk_file_exists(done) || n == cap) continue;
        ckpt_state cs;
        char rid[64] = "";
        if (load_state(sub, &cs, rid, sizeof rid, NULL) != DK_OK) dk_error_clear();
        out[n].step = step;
        out[n].current = !strcmp(rid, ckpt_run_id());
        n++;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            ckpt_entry a = out[j - 1], b = out[j];
            int b_newer = b.current != a.current ? b.current : b.step > a.step;
            if (!b_newer) break;
            out[j - 1] = b;
            out[j] = a;
        }
    return n;
}

static void prune(const char *ckdir, int keep) {
    ckpt_entry es[4096];
    int n = list_complete(ckdir, es, 4096);
    for (int i = keep; i < n; i++) {
        char path[PATH_CAP];
        snprintf(path, sizeof path, "%s/step_%08d", ckdir, es[i].step);
        dk_remove_tree(path);
    }
}

/* ---- saving -------------------------------------------------------------------------------- */

/* Rank 0, once every shard is on disk: state.json with the manifest, DONE,
 * the directory fsyncs, the rename, pruning. */
static dk_status seal(const char *ckdir, const char *tmp, const char *final, const ckpt_state *st, int world,
                      int keep) {
    char path[PATH_CAP];
    DK_TRY(save_state(tmp, st, world));
    ckpt_manifest_clear(tmp, world);
    snprintf(path, sizeof path, "%s/optim", tmp);
    DK_TRY(dk_fsync_path(path));
    DK_TRY(dk_fsync_path(tmp)); /* every entry is on disk before DONE is */
    snprintf(path, sizeof path, "%s/DONE", tmp);
    DK_TRY(dk_write_file_synced(path, "", 0));
    DK_TRY(dk_fsync_path(tmp));
    dk_remove_tree(final); /* a re-run of the same step replaces it */
    if (rename(tmp, final) != 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    DK_TRY(dk_fsync_path(ckdir));
    if (keep > 0) prune(ckdir, keep);
    return DK_OK;
}

dk_status ckpt_save_shards(const char *run_dir, const model_config *c, const param_layout *pl, int step_t,
                           const ckpt_shards_io *io, const dk_config *cfg, const ckpt_state *st, int keep,
                           size_t max_shard_bytes) {
    char ckdir[4096], tmp[4200], final[4200], path[PATH_CAP];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    snprintf(tmp, sizeof tmp, "%s/step_%08d.tmp", ckdir, st->step);
    snprintf(final, sizeof final, "%s/step_%08d", ckdir, st->step);
    dk_status s = DK_OK;
    if (io->rank == 0) {
        dk_remove_tree(tmp);
        snprintf(path, sizeof path, "%s/optim", tmp);
        s = dk_mkdirs(path);
        snprintf(path, sizeof path, "%s/sums", tmp);
        if (s == DK_OK) s = dk_mkdirs(path);
        snprintf(path, sizeof path, "%s/config.ini", tmp);
        if (s == DK_OK) s = config_save(cfg, path);
        if (s == DK_OK) s = dk_fsync_path(path);
    }
    DK_TRY(ckpt_shards_sync(io, s, "creating the checkpoint directory"));
    uint32_t crc = 0;
    uint64_t size = 0;
    DK_TRY(ckpt_shards_save(tmp, c, pl, step_t, max_shard_bytes, io, &crc, &size));
    s = ckpt_manifest_share(tmp, c, pl, max_shard_bytes, io, crc, size);
    DK_TRY(ckpt_shards_sync(io, s, "checksumming the checkpoint"));
    s = io->rank == 0 ? seal(ckdir, tmp, final, st, io->world, keep) : DK_OK;
    return ckpt_shards_sync(io, s, "completing the checkpoint");
}

dk_status ckpt_save(const char *run_dir, const model *m, const optim *o, const dk_config *cfg, const ckpt_state *st,
                    int keep) {
    local_state ls = {(model *)m, (optim *)o};
    ckpt_shards_io io = local_io(&ls);
    ckpt_state s1 = *st;
    s1.world_size = 1;
    return ckpt_save_shards(run_dir, &m->cfg, &m->layout, o->t, &io, cfg, &s1, keep, CKPT_MAX_SHARD_BYTES);
}

/* ---- loading and resuming -------------------------------------------------------------------- */

/* DONE, state.json and this rank's share of the files; every rank learns
 * whether all shares passed. */
static dk_status verify(const char *path, const ckpt_shards_io *io, ckpt_state *st) {
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s/DONE", path);
    dk_status s = DK_OK;
    cJSON *j = NULL;
    if (!dk_file_exists(p)) s = dk_fail(DK_ERR_RUNTIME, "%s: not a complete checkpoint (no DONE file)", path);
    if (s == DK_OK) s = load_state(path, st, NULL, 0, &j);
    if (s == DK_OK) s = ckpt_manifest_verify(path, j, io->world, io->rank, io->all_ok == NULL);
    cJSON_Delete(j);
    return ckpt_shards_sync(io, s, "checking the checkpoint");
}

dk_status ckpt_load_shards(const char *path, const model_config *c, const param_layout *pl, const ckpt_shards_io *io,
                           ckpt_state *st, int *step_t) {
    DK_TRY(verify(path, io, st));
    dk_status s = ckpt_shards_load(path, c, pl, io, step_t);
    return ckpt_shards_sync(io, s, "loading the checkpoint");
}

dk_status ckpt_load(const char *path, model *m, optim *o, ckpt_state *st) {
    local_state ls = {m, o};
    ckpt_shards_io io = local_io(&ls);
    return ckpt_load_shards(path, &m->cfg, &m->layout, &io, st, &o->t);
}

/* resume = none: a fresh start, refused over existing checkpoints unless
 * ckpt.overwrite clears them. */
static dk_status start_clean(const dk_config *cfg, const ckpt_shards_io *io) {
    char ckdir[4096];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", cfg->run.dir);
    ckpt_entry one;
    if (list_complete(ckdir, &one, 1) == 0) return DK_OK; /* a half-written step_X.tmp is no checkpoint */
    if (!cfg->ckpt.overwrite)
        return dk_fail(DK_ERR_USAGE,
                       "[ckpt] resume = none, but %s already holds checkpoints: set ckpt.resume = auto to continue "
                       "them, or ckpt.overwrite = true to delete them and start clean",
                       ckdir);
    dk_status s = DK_OK;
    if (io->rank == 0) {
        dk_remove_tree(ckdir);
        if (dk_dir_exists(ckdir)) s = dk_fail(DK_ERR_RUNTIME, "%s: cannot delete (ckpt.overwrite = true)", ckdir);
        else printf("ckpt.overwrite: deleted the checkpoints in %s\n", ckdir);
    }
    return ckpt_shards_sync(io, s, "deleting the old checkpoints");
}

/* resume = auto: the newest complete checkpoint whose files pass, falling
 * back past damaged ones; PATH empty when there is none at all. */
static dk_status pick_latest(const char *run_dir, const ckpt_shards_io *io, char *path, size_t cap) {
    char ckdir[4096];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    ckpt_entry es[4096];
    int n = list_complete(ckdir, es, 4096);
    for (int i = 1; i < n; i++) /* by step alone, newest first */
        for (int j = i; j > 0 && es[j].step > es[j - 1].step; j--) {
            ckpt_entry t = es[j];
            es[j] = es[j - 1];
            es[j - 1] = t;
        }
    path[0] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(path, cap, "%s/step_%08d", ckdir, es[i].step);
        ckpt_state cs;
        if (verify(path, io, &cs) == DK_OK) return DK_OK;
        fprintf(stderr, "warning: [ckpt] resume: skipping %s: %s%s\n", path, dk_error(),
                i + 1 < n ? "; falling back to the previous checkpoint" : "");
    }
    if (n > 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: none of its %d complete checkpoints passed its checks (see the warnings)",
                       ckdir, n);
    return DK_OK;
}

dk_status ckpt_resume_shards(const dk_config *cfg, const model_config *c, const param_layout *pl,
                             const ckpt_shards_io *io, int *start, int *step_t) {
    char path[PATH_CAP];
    const char *r = cfg->ckpt.resume;
    *start = 0;
    if (!strcmp(r, "none")) return start_clean(cfg, io);
    if (!strcmp(r, "auto")) {
        DK_TRY(pick_latest(cfg->run.dir, io, path, sizeof path));
        if (!path[0]) return DK_OK;
    } else {
        snprintf(path, sizeof path, "%s", r);
    }
    ckpt_state cs;
    dk_status st = ckpt_load_shards(path, c, pl, io, &cs, step_t);
    if (st != DK_OK) return dk_wrap(st, "[ckpt] resume: ");
    if ((uint64_t)cfg->run.seed != cs.seed)
        return dk_fail(DK_ERR_USAGE, "[ckpt] resume: %s was trained with run.seed = %llu, this run has %d", path,
                       (unsigned long long)cs.seed, cfg->run.seed);
    *start = cs.step;
    if (io->rank == 0) {
        if (cs.world_size != io->world)
            printf("resharded %s from %d ranks to %d\n", path, cs.world_size, io->world);
        printf("resumed from %s (step %d)\n", path, cs.step);
    }
    return DK_OK;
}

dk_status ckpt_resume(const dk_config *cfg, model *m, optim *o, int *start) {
    local_state ls = {m, o};
    ckpt_shards_io io = local_io(&ls);
    return ckpt_resume_shards(cfg, &m->cfg, &m->layout, &io, start, &o->t);
}
