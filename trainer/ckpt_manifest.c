/* ckpt_manifest.c: the checksum manifest of ckpt_manifest.h: the ranks'
 * shares as text lines "crc32c size name" under sums/, merged by rank 0 into
 * state.json's "files", and the checks at resume. */
#define _POSIX_C_SOURCE 200809L
#include "trainer/ckpt_manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/durable.h"
#include "common/util.h"
#include "model/weights_shards.h"

#define PATH_CAP 4400

/* CRC-32C and size of a whole file, read in 8 MB blocks. */
static dk_status file_crc(const char *path, uint32_t *crc, uint64_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    enum { BLOCK = 8 << 20 };
    char *buf = dk_malloc(BLOCK);
    uint32_t c = 0;
    uint64_t n = 0;
    dk_status st = DK_OK;
    for (;;) {
        ssize_t r = read(fd, buf, BLOCK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = dk_fail(DK_ERR_RUNTIME, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        c = crc32c_extend(c, buf, (size_t)r);
        n += (uint64_t)r;
    }
    free(buf);
    close(fd);
    *crc = c;
    *size = n;
    return st;
}

/* One line of a rank's checksum share: "crc32c size name". */
static int append_sum(char **buf, size_t *len, const char *name, uint32_t crc, uint64_t size) {
    char line[512];
    int n = snprintf(line, sizeof line, "%08x %llu %s\n", crc, (unsigned long long)size, name);
    *buf = dk_realloc(*buf, *len + (size_t)n + 1);
    memcpy(*buf + *len, line, (size_t)n + 1);
    *len += (size_t)n;
    return n;
}

/* The files of a checkpoint other than state.json and DONE, in a fixed
 * order: config.json, the index (sharded), the model files, config.ini
 * (rank 0's share), then each rank's optimizer file. */
static int model_file_names(const model_config *c, const param_layout *pl, size_t max_shard_bytes, char ***names) {
    weights_plan plan;
    if (weights_plan_init(&plan, c, pl, ST_BF16, max_shard_bytes) != DK_OK) DK_ABORT("planning the model files: %s", dk_error());
    int n = plan.layout.n_files;
    *names = dk_malloc((size_t)n * sizeof **names);
    for (int k = 0; k < n; k++) {
        (*names)[k] = dk_malloc(64);
        safetensors_layout_file_name(&plan.layout, k, (*names)[k], 64);
    }
    weights_plan_free(&plan);
    return n;
}

dk_status ckpt_manifest_share(const char *dir, const model_config *c, const param_layout *pl, size_t max_shard_bytes,
                                 const ckpt_shards_io *io, uint32_t optim_crc, uint64_t optim_size) {
    char **names;
    int n = model_file_names(c, pl, max_shard_bytes, &names);
    char *buf = NULL, path[PATH_CAP];
    size_t len = 0;
    dk_status st = DK_OK;
    const char *small[] = {"config.json", "model.safetensors.index.json", "config.ini"};
    for (int i = 0; i < 3 && io->rank == 0 && st == DK_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, small[i]);
        if (i == 1 && n == 1) continue; /* one model file: no index */
        uint32_t crc;
        uint64_t size;
        st = file_crc(path, &crc, &size);
        if (st == DK_OK) append_sum(&buf, &len, small[i], crc, size);
    }
    for (int k = io->rank; k < n && st == DK_OK; k += io->world) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        uint32_t crc;
        uint64_t size;
        st = file_crc(path, &crc, &size);
        if (st == DK_OK) append_sum(&buf, &len, names[k], crc, size);
    }
    char name[64];
    snprintf(name, sizeof name, "optim/rank_%05d.bin", io->rank);
    append_sum(&buf, &len, name, optim_crc, optim_size);
    snprintf(path, sizeof path, "%s/sums/rank_%05d.txt", dir, io->rank);
    if (st == DK_OK) st = dk_write_file_synced(path, buf, len);
    for (int k = 0; k < n; k++) free(names[k]);
    free(names);
    free(buf);
    return st;
}

dk_status ckpt_manifest_merge(const char *dir, int world, cJSON *files) {
    for (int r = 0; r < world; r++) {
        char path[PATH_CAP], *text;
        snprintf(path, sizeof path, "%s/sums/rank_%05d.txt", dir, r);
        DK_TRY(dk_read_file(path, &text, NULL));
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            unsigned crc;
            unsigned long long size;
            char name[256];
            if (sscanf(line, "%8x %llu %255s", &crc, &size, name) != 3) {
                free(text);
                return dk_fail(DK_ERR_RUNTIME, "%s: bad line '%s'", path, line);
            }
            char hex[9];
            snprintf(hex, sizeof hex, "%08x", crc);
            cJSON *e = cJSON_AddObjectToObject(files, name);
            cJSON_AddNumberToObject(e, "size", (double)size);
            cJSON_AddStringToObject(e, "crc32c", hex);
        }
        free(text);
    }
    return DK_OK;
}

void ckpt_manifest_clear(const char *dir, int world) {
    char path[PATH_CAP];
    for (int r = 0; r < world; r++) {
        snprintf(path, sizeof path, "%s/sums/rank_%05d.txt", dir, r);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/sums", dir);
    rmdir(path);
}

dk_status ckpt_manifest_verify(const char *dir, const cJSON *state, int world, int rank, int all) {
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(state, "files");
    if (!cJSON_IsObject(files)) {
        if (rank == 0)
            fprintf(stderr, "warning: %s/state.json records no checksums (an older checkpoint): its files are not checked\n",
                    dir);
        return DK_OK;
    }
    int i = 0;
    for (const cJSON *e = files->child; e; e = e->next, i++) {
        if (!all && i % world != rank) continue;
        char path[PATH_CAP];
        snprintf(path, sizeof path, "%s/%s", dir, e->string);
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "size");
        const cJSON *jc = cJSON_GetObjectItemCaseSensitive(e, "crc32c");
        if (!cJSON_IsNumber(js) || !cJSON_IsString(jc))
            return dk_fail(DK_ERR_RUNTIME, "%s/state.json: entry '%s' needs a numeric 'size' and a string 'crc32c'", dir,
                           e->string);
        struct stat sb;
        if (stat(path, &sb) != 0) return dk_fail(DK_ERR_RUNTIME, "%s: missing: %s", path, strerror(errno));
        if ((double)sb.st_size != js->valuedouble)
            return dk_fail(DK_ERR_RUNTIME, "%s: %lld bytes, state.json records %.0f (truncated or rewritten)", path,
                           (long long)sb.st_size, js->valuedouble);
        uint32_t crc;
        uint64_t size;
        DK_TRY(file_crc(path, &crc, &size));
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", crc);
        if (strcmp(hex, jc->valuestring) != 0)
            return dk_fail(DK_ERR_RUNTIME, "%s: CRC-32C %s, state.json records %s (the file is damaged)", path, hex,
                           jc->valuestring);
    }
    return DK_OK;
}
