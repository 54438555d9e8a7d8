/* weights_shards.c: the planned, parallel HF writer and the unit-range reader
 * of weights_shards.h. Both walk the same slot table (weights.c): a unit
 * range is cut at slot boundaries into pieces, each a contiguous range of one
 * HF tensor. */
#define _POSIX_C_SOURCE 200809L
#include "model/weights_shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/durable.h"
#include "common/util.h"

static void map_init(weights_map *m, const model_config *c, const param_layout *pl) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->pl = *pl;
    m->n_units = weights_n_units(c);
    m->slots = dk_malloc((size_t)weights_max_slots(c) * sizeof *m->slots);
    m->n_slots = weights_slots(c, pl, m->slots);
    m->unit_first = dk_malloc((size_t)(m->n_units + 1) * sizeof *m->unit_first);
    int i = 0;
    for (int u = 0; u < m->n_units; u++) {
        m->unit_first[u] = i;
        while (i < m->n_slots && m->slots[i].unit == u) i++;
    }
    m->unit_first[m->n_units] = i;
    DK_ASSERT(i == m->n_slots); /* the slots come in unit order */
}

static void map_free(weights_map *m) {
    free(m->slots);
    free(m->unit_first);
    memset(m, 0, sizeof *m);
}

static dk_status check_range(const weights_map *m, const char *dir, int unit, size_t begin, size_t count) {
    if (unit < 0 || unit >= m->n_units)
        return dk_fail(DK_ERR_RUNTIME, "%s: unit %d does not exist (the model has %d)", dir, unit, m->n_units);
    size_t n = weights_unit_size(&m->cfg, &m->pl, unit);
    if (begin > n || count > n - begin)
        return dk_fail(DK_ERR_RUNTIME, "%s: range [%zu, %zu) is outside unit %d of %zu elements", dir, begin,
                       begin + count, unit, n);
    return DK_OK;
}

/* The overlap of [begin, end) with slot s, as [*a, *b) in unit coordinates;
 * 0 when empty. */
static int piece(const weights_slot *s, size_t begin, size_t end, size_t *a, size_t *b) {
    *a = begin > s->offset ? begin : s->offset;
    *b = end < s->offset + s->numel ? end : s->offset + s->numel;
    return *a < *b;
}

/* ---- the plan ------------------------------------------------------------------ */

dk_status weights_plan_init(weights_plan *p, const model_config *c, const param_layout *pl, st_dtype dtype,
                            size_t max_shard_bytes) {
    memset(p, 0, sizeof *p);
    map_init(&p->map, c, pl);
    p->entries = weights_entries(c, p->map.slots, p->map.n_slots, NULL);
    dk_status s = safetensors_layout_plan(&p->layout, p->entries, p->map.n_slots, dtype, max_shard_bytes);
    if (s != DK_OK) weights_plan_free(p);
    return s;
}

void weights_plan_free(weights_plan *p) {
    safetensors_layout_free(&p->layout);
    free(p->entries);
    map_free(&p->map);
    memset(p, 0, sizeof *p);
}

dk_status weights_plan_create(const weights_plan *p, const char *dir) {
    DK_TRY(weights_save_config(dir, &p->map.cfg, p->layout.dtype));
    return safetensors_layout_create(&p->layout, p->entries, dir);
}

static void file_path(const weights_plan *p, const char *dir, int k, char *buf, size_t cap) {
    char name[64];
    safetensors_layout_file_name(&p->layout, k, name, sizeof name);
    snprintf(buf, cap, "%s/%s", dir, name);
}

/* Converts and writes SRC[0, n) at byte POS of the open file FD. */
static dk_status write_piece(int fd, const char *path, const char *tensor, size_t pos, const float *src, size_t n,
                             st_dtype dt, void *buf, size_t chunk) {
    const size_t es = safetensors_dtype_size(dt);
    for (size_t k = 0; k < n; k += chunk) {
        size_t m = n - k < chunk ? n - k : chunk;
        safetensors_convert_f32(src + k, m, dt, buf);
        const char *b = buf;
        size_t left = m * es, at = pos + k * es;
        while (left > 0) {
            ssize_t w = pwrite(fd, b, left, (off_t)at);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0)
                return dk_fail(DK_ERR_RUNTIME, "%s: write failed at tensor '%s': %s", path, tensor,
                               w < 0 ? strerror(errno) : "no progress");
            b += w;
            at += (size_t)w;
            left -= (size_t)w;
        }
    }
    return DK_OK;
}

dk_status weights_plan_write(const weights_plan *p, const char *dir, int unit, size_t begin, size_t count,
                             const float *src) {
    const weights_map *m = &p->map;
    DK_TRY(check_range(m, dir, unit, begin, count));
    enum { CHUNK = 1 << 16 };
    void *buf = dk_malloc(CHUNK * sizeof(float));
    const size_t es = safetensors_dtype_size(p->layout.dtype), end = begin + count;
    dk_status s = DK_OK;
    for (int i = m->unit_first[unit]; i < m->unit_first[unit + 1] && s == DK_OK; i++) {
        size_t a, b;
        if (!piece(&m->slots[i], begin, end, &a, &b)) continue;
        char path[4200];
        file_path(p, dir, p->layout.file_of[i], path, sizeof path);
        int fd = open(path, O_WRONLY);
        if (fd < 0) {
            s = dk_fail(DK_ERR_RUNTIME, "%s: cannot open for writing (created by rank 0?): %s", path, strerror(errno));
            break;
        }
        size_t pos = p->layout.offset[i] + (a - m->slots[i].offset) * es;
        s = write_piece(fd, path, m->slots[i].name, pos, src + (a - begin), b - a, p->layout.dtype, buf, CHUNK);
        if (close(fd) != 0 && s == DK_OK) s = dk_fail(DK_ERR_RUNTIME, "%s: close failed: %s", path, strerror(errno));
    }
    free(buf);
    return s;
}

dk_status weights_plan_finish(const weights_plan *p, const char *dir) {
    char path[4200];
    for (int k = 0; k < p->layout.n_files; k++) {
        file_path(p, dir, k, path, sizeof path);
        DK_TRY(dk_fsync_path(path));
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    DK_TRY(dk_fsync_path(path));
    if (p->layout.n_files > 1) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        DK_TRY(dk_fsync_path(path));
    }
    return DK_OK;
}

/* ---- the reader --------------------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* With tied embeddings a checkpoint may still carry lm_head.weight; accept it
 * only when it is the embedding, since the model will use the embedding.
 * Compared in chunks: the head of a large vocabulary is gigabytes in fp32. */
static dk_status check_tied_head(const st_reader *r, const st_tensor *embed, const model_config *c) {
    const int64_t shape[2] = {c->vocab_size, c->hidden_size};
    const st_tensor *t;
    DK_TRY(safetensors_check(r, "lm_head.weight", 2, shape, &t));
    enum { CHUNK = 1 << 16 };
    float *a = dk_malloc(CHUNK * sizeof *a), *b = dk_malloc(CHUNK * sizeof *b);
    dk_status s = DK_OK;
    for (size_t k = 0; k < t->numel && s == DK_OK; k += CHUNK) {
        size_t m = t->numel - k < CHUNK ? t->numel - k : CHUNK;
        safetensors_tensor_to_f32_range(t, k, m, a);
        safetensors_tensor_to_f32_range(embed, k, m, b);
        if (memcmp(a, b, m * sizeof *a) != 0)
            s = dk_fail(DK_ERR_RUNTIME,
                        "%s: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but the config ties them "
                        "(tie_word_embeddings = true)",
                        t->file);
    }
    free(a);
    free(b);
    return s;
}

static dk_status reader_check(weights_reader *w, const model_config *c) {
    const st_reader *r = &w->r;
    unsigned char *used = dk_calloc((size_t)(r->n_tensors ? r->n_tensors : 1), 1);
    dk_status s = DK_OK;
    for (int i = 0; i < w->map.n_slots && s == DK_OK; i++) {
        const weights_slot *sl = &w->map.slots[i];
        s = safetensors_check(r, sl->name, sl->ndim, sl->shape, &w->tensor[i]);
        if (s == DK_OK) used[w->tensor[i] - r->tensors] = 1;
    }
    const st_tensor *head = safetensors_find(r, "lm_head.weight");
    if (s == DK_OK && c->tie_embeddings && head) {
        s = check_tied_head(r, w->tensor[0], c);
        used[head - r->tensors] = 1;
    }
    for (int i = 0; i < r->n_tensors && s == DK_OK; i++) {
        if (used[i] || ends_with(r->tensors[i].name, ".rotary_emb.inv_freq")) continue;
        s = dk_fail(DK_ERR_RUNTIME, "%s: unexpected tensor '%s': not part of a %s model with this config",
                    r->tensors[i].file, r->tensors[i].name, model_arch_name(c->arch));
    }
    free(used);
    return s;
}

dk_status weights_reader_open(weights_reader *w, const char *dir, const model_config *c, const param_layout *pl) {
    memset(w, 0, sizeof *w);
    DK_TRY(safetensors_open(&w->r, dir));
    map_init(&w->map, c, pl);
    w->tensor = dk_calloc((size_t)w->map.n_slots, sizeof *w->tensor);
    dk_status s = reader_check(w, c);
    if (s != DK_OK) weights_reader_close(w);
    return s;
}

dk_status weights_reader_read(const weights_reader *w, int unit, size_t begin, size_t count, float *out) {
    const weights_map *m = &w->map;
    DK_TRY(check_range(m, w->r.source, unit, begin, count));
    const size_t end = begin + count;
    for (int i = m->unit_first[unit]; i < m->unit_first[unit + 1]; i++) {
        size_t a, b;
        if (piece(&m->slots[i], begin, end, &a, &b))
            safetensors_tensor_to_f32_range(w->tensor[i], a - m->slots[i].offset, b - a, out + (a - begin));
    }
    return DK_OK;
}

void weights_reader_close(weights_reader *w) {
    safetensors_close(&w->r);
    map_free(&w->map);
    free(w->tensor);
    memset(w, 0, sizeof *w);
}
