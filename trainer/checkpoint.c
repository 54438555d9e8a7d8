/* checkpoint.c: writes and reads the checkpoint directory of checkpoint.h.
 * The optimizer file is a flat binary: a header, a table of units (the flat
 * parameter buffers: embedding, each layer, final norm, lm head) with their
 * global element offsets, then per unit the fp32 master, m and v. A later
 * sharded run writes one file per rank with the offsets of its shard. */
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
#include <unistd.h>

#include "common/util.h"

#define OPT_MAGIC "DKOPTIM\0"
#define OPT_VERSION 1u

/* The model's flat units in their global order. */
typedef struct {
    int n;
    size_t count[512];
    size_t offset[512];
    void *param[512];
    float *master[512], *m[512], *v[512];
} units;

static void units_of(units *u, const model *mdl, const optim *o) {
    const param_layout *pl = &mdl->layout;
    const param_buffers *p = &mdl->params;
    u->n = 0;
    size_t off = 0;
#define ADD(cnt, P, MA, M, V)                                                                      \
    do {                                                                                           \
        if ((cnt) > 0) {                                                                           \
            DK_ASSERT(u->n < 512);                                                                 \
            u->count[u->n] = (cnt);                                                                \
            u->offset[u->n] = off;                                                                 \
            u->param[u->n] = (P);                                                                  \
            u->master[u->n] = o->has_master ? (float *)(MA) : NULL;                                \
            u->m[u->n] = (float *)(M);                                                             \
            u->v[u->n] = (float *)(V);                                                             \
            u->n++;                                                                                \
            off += (cnt);                                                                          \
        }                                                                                          \
    } while (0)
    ADD(pl->embed_size, p->embed, o->master.embed, o->m.embed, o->v.embed);
    for (int l = 0; l < mdl->cfg.n_layers; l++)
        ADD(pl->layer_size, p->layers[l], o->master.layers ? o->master.layers[l] : NULL, o->m.layers[l],
            o->v.layers[l]);
    ADD(pl->final_norm_size, p->final_norm, o->master.final_norm, o->m.final_norm, o->v.final_norm);
    ADD(pl->lm_head_size, p->lm_head, o->master.lm_head, o->m.lm_head, o->v.lm_head);
#undef ADD
}

static dk_status write_all(FILE *f, const void *p, size_t n, const char *path) {
    if (fwrite(p, 1, n, f) != n) return dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno));
    return DK_OK;
}

static dk_status save_optim(const char *path, const model *mdl, const optim *o) {
    units u;
    units_of(&u, mdl, o);
    FILE *f = fopen(path, "wb");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    uint32_t hdr[4] = {OPT_VERSION, 1u /* world size */, 0u /* rank */, (uint32_t)o->t};
    uint64_t n_units = (uint64_t)u.n;
    dk_status st = write_all(f, OPT_MAGIC, 8, path);
    if (st == DK_OK) st = write_all(f, hdr, sizeof hdr, path);
    if (st == DK_OK) st = write_all(f, &n_units, sizeof n_units, path);
    for (int i = 0; st == DK_OK && i < u.n; i++) {
        uint64_t e[2] = {u.offset[i], u.count[i]};
        st = write_all(f, e, sizeof e, path);
    }
    ops_ctx *ctx = mdl->ctx;
    for (int i = 0; st == DK_OK && i < u.n; i++) {
        float *buf = dk_malloc(u.count[i] * sizeof(float));
        size_t bytes = u.count[i] * sizeof(float);
        if (u.master[i]) ops_download(ctx, buf, u.master[i], bytes);
        else ops_download_act(ctx, buf, u.param[i], u.count[i]); /* fp32 params are the masters */
        st = write_all(f, buf, bytes, path);
        if (st == DK_OK) {
            ops_download(ctx, buf, u.m[i], bytes);
            st = write_all(f, buf, bytes, path);
        }
        if (st == DK_OK) {
            ops_download(ctx, buf, u.v[i], bytes);
            st = write_all(f, buf, bytes, path);
        }
        free(buf);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) st = dk_fail(DK_ERR_RUNTIME, "%s: flush failed", path);
    fclose(f);
    return st;
}

static dk_status read_all(FILE *f, void *p, size_t n, const char *path, const char *what) {
    if (fread(p, 1, n, f) != n) return dk_fail(DK_ERR_RUNTIME, "%s: truncated file while reading %s", path, what);
    return DK_OK;
}

static dk_status load_optim(const char *path, model *mdl, optim *o) {
    units u;
    units_of(&u, mdl, o);
    FILE *f = fopen(path, "rb");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    char magic[8];
    uint32_t hdr[4];
    uint64_t n_units = 0;
    dk_status st = read_all(f, magic, 8, path, "the magic");
    if (st == DK_OK && memcmp(magic, OPT_MAGIC, 8) != 0) st = dk_fail(DK_ERR_RUNTIME, "%s: not an optimizer file", path);
    if (st == DK_OK) st = read_all(f, hdr, sizeof hdr, path, "the header");
    if (st == DK_OK && hdr[0] != OPT_VERSION)
        st = dk_fail(DK_ERR_RUNTIME, "%s: version %u, expected %u", path, hdr[0], OPT_VERSION);
    if (st == DK_OK && hdr[1] != 1u)
        st = dk_fail(DK_ERR_RUNTIME, "%s: written by %u ranks; this run has 1", path, hdr[1]);
    if (st == DK_OK) st = read_all(f, &n_units, sizeof n_units, path, "the unit count");
    if (st == DK_OK && n_units != (uint64_t)u.n)
        st = dk_fail(DK_ERR_RUNTIME, "%s: %llu parameter units, the model has %d (a different model shape?)", path,
                     (unsigned long long)n_units, u.n);
    for (int i = 0; st == DK_OK && i < u.n; i++) {
        uint64_t e[2];
        st = read_all(f, e, sizeof e, path, "the unit table");
        if (st == DK_OK && (e[0] != u.offset[i] || e[1] != u.count[i]))
            st = dk_fail(DK_ERR_RUNTIME, "%s: unit %d is [%llu, +%llu), the model expects [%zu, +%zu)", path, i,
                         (unsigned long long)e[0], (unsigned long long)e[1], u.offset[i], u.count[i]);
    }
    ops_ctx *ctx = mdl->ctx;
    for (int i = 0; st == DK_OK && i < u.n; i++) {
        size_t bytes = u.count[i] * sizeof(float);
        float *buf = dk_malloc(bytes);
        st = read_all(f, buf, bytes, path, "master weights");
        if (st == DK_OK) {
            if (u.master[i]) ops_upload(ctx, u.master[i], buf, bytes);
            ops_upload_act(ctx, u.param[i], buf, u.count[i]);
            st = read_all(f, buf, bytes, path, "first moments");
        }
        if (st == DK_OK) {
            ops_upload(ctx, u.m[i], buf, bytes);
            st = read_all(f, buf, bytes, path, "second moments");
        }
        if (st == DK_OK) ops_upload(ctx, u.v[i], buf, bytes);
        free(buf);
    }
    fclose(f);
    if (st == DK_OK) o->t = (int)hdr[3];
    return st;
}

static dk_status save_state(const char *path, const ckpt_state *s) {
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "{\"step\": %d, \"data_cursor\": %ld, \"seed\": %llu, \"world_size\": %d, \"rng\": "
                     "\"counter-based, keyed by (seed, step, sample)\"}\n",
                     s->step, s->data_cursor, (unsigned long long)s->seed, s->world_size);
    return dk_write_file(path, buf, (size_t)n);
}

static dk_status load_state(const char *path, ckpt_state *s) {
    char *text;
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
    cJSON_Delete(j);
    return DK_OK;
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(sub);
            else unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

/* Complete checkpoints (step_NNNNNNNN with DONE), sorted by step ascending. */
static int list_complete(const char *ckdir, int *steps, int cap) {
    DIR *d = opendir(ckdir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char tail;
        if (sscanf(e->d_name, "step_%d%c", &step, &tail) != 1) continue; /* skips step_X.tmp */
        char done[4096];
        snprintf(done, sizeof done, "%s/%s/DONE", ckdir, e->d_name);
        if (!dk_file_exists(done) || n == cap) continue;
        steps[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            int t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

dk_status ckpt_save(const char *run_dir, const model *m, const optim *o, const dk_config *cfg, const ckpt_state *st,
                    int keep) {
    char ckdir[4096], tmp[4200], final[4200], path[4400];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    snprintf(tmp, sizeof tmp, "%s/step_%08d.tmp", ckdir, st->step);
    snprintf(final, sizeof final, "%s/step_%08d", ckdir, st->step);
    remove_tree(tmp);
    snprintf(path, sizeof path, "%s/optim", tmp);
    DK_TRY(dk_mkdirs(path));
    DK_TRY(model_save_hf(m, tmp, "bf16"));
    snprintf(path, sizeof path, "%s/optim/rank_00000.bin", tmp);
    DK_TRY(save_optim(path, m, o));
    snprintf(path, sizeof path, "%s/state.json", tmp);
    DK_TRY(save_state(path, st));
    snprintf(path, sizeof path, "%s/config.ini", tmp);
    DK_TRY(config_save(cfg, path));
    snprintf(path, sizeof path, "%s/DONE", tmp);
    DK_TRY(dk_write_file(path, "", 0));
    remove_tree(final); /* a re-run of the same step replaces it */
    if (rename(tmp, final) != 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (keep > 0) {
        int steps[4096];
        int n = list_complete(ckdir, steps, 4096);
        for (int i = 0; i < n - keep; i++) {
            snprintf(path, sizeof path, "%s/step_%08d", ckdir, steps[i]);
            remove_tree(path);
        }
    }
    return DK_OK;
}

dk_status ckpt_find_latest(const char *run_dir, char *path, size_t n) {
    char ckdir[4096];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    int steps[4096];
    int k = list_complete(ckdir, steps, 4096);
    if (k == 0) path[0] = '\0';
    else snprintf(path, n, "%s/step_%08d", ckdir, steps[k - 1]);
    return DK_OK;
}

dk_status ckpt_load(const char *path, model *m, optim *o, ckpt_state *st) {
    char p[4400];
    snprintf(p, sizeof p, "%s/DONE", path);
    if (!dk_file_exists(p)) return dk_fail(DK_ERR_RUNTIME, "%s: not a complete checkpoint (no DONE file)", path);
    snprintf(p, sizeof p, "%s/state.json", path);
    DK_TRY(load_state(p, st));
    if (st->world_size != 1)
        return dk_fail(DK_ERR_RUNTIME, "%s: written by %d ranks; this run has 1", p, st->world_size);
    snprintf(p, sizeof p, "%s/optim/rank_00000.bin", path);
    return load_optim(p, m, o);
}

dk_status ckpt_resume(const dk_config *cfg, model *m, optim *o, int *start) {
    char path[4096];
    const char *r = cfg->ckpt.resume;
    *start = 0;
    if (!strcmp(r, "none")) return DK_OK;
    if (!strcmp(r, "auto")) {
        DK_TRY(ckpt_find_latest(cfg->run.dir, path, sizeof path));
        if (!path[0]) return DK_OK;
    } else {
        snprintf(path, sizeof path, "%s", r);
    }
    ckpt_state cs;
    dk_status st = ckpt_load(path, m, o, &cs);
    if (st != DK_OK) return dk_wrap(st, "[ckpt] resume: ");
    if ((uint64_t)cfg->run.seed != cs.seed)
        return dk_fail(DK_ERR_USAGE, "[ckpt] resume: %s was trained with run.seed = %llu, this run has %d", path,
                       (unsigned long long)cs.seed, cfg->run.seed);
    *start = cs.step;
    printf("resumed from %s (step %d)\n", path, cs.step);
    return DK_OK;
}
