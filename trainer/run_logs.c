/* run_logs.c: recorded log sizes per checkpoint step and the cut-back at
 * resume (run_logs.h). The offsets file is a JSON object
 *   {"2": {"metrics.jsonl": 812, "rollouts.jsonl": 20344}, "4": {...}}
 * keyed by the step as a decimal string. */
#define _GNU_SOURCE
#include "trainer/run_logs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/durable.h"
#include "common/util.h"

static const char *const log_names[] = {"metrics.jsonl", "rollouts.jsonl"};
enum { N_LOGS = 2 };

static void path_of(char *out, size_t n, const char *run_dir, const char *name) {
    snprintf(out, n, "%s/%s", run_dir, name);
}

/* The offsets object (an empty one when the file does not exist). */
static dk_status offsets_load(const char *run_dir, cJSON **out) {
    char path[4096];
    path_of(path, sizeof path, run_dir, "logs_offsets.json");
    *out = NULL;
    if (!dk_file_exists(path)) {
        *out = cJSON_CreateObject();
        return DK_OK;
    }
    char *text = NULL;
    size_t len = 0;
    DK_TRY(dk_read_file(path, &text, &len));
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return dk_fail(DK_ERR_RUNTIME, "%s: not a JSON object (delete it to cut the logs back by step instead)", path);
    }
    *out = o;
    return DK_OK;
}

static dk_status offsets_save(const char *run_dir, cJSON *o) {
    char path[4096];
    path_of(path, sizeof path, run_dir, "logs_offsets.json");
    char *text = cJSON_PrintUnformatted(o);
    if (!text) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    dk_status st = dk_write_file_durable(path, text, strlen(text));
    free(text);
    return st;
}

/* Keeps the complete lines of `path` that start with {"step":N and N <= step. */
static dk_status cut_by_step(const char *path, int step) {
    char *text = NULL;
    size_t len = 0;
    DK_TRY(dk_read_file(path, &text, &len));
    size_t kept = 0;
    for (size_t i = 0; i < len;) {
        char *nl = memchr(text + i, '\n', len - i);
        if (!nl) break; /* a half-written last line */
        size_t n = (size_t)(nl - (text + i)) + 1;
        int s;
        if (sscanf(text + i, "{\"step\":%d", &s) == 1 && s <= step) {
            memmove(text + kept, text + i, n);
            kept += n;
        }
        i += n;
    }
    dk_status st = dk_write_file_durable(path, text, kept);
    free(text);
    return st;
}

/* Truncates `path` to `size` bytes; *short_file when it holds fewer. */
static dk_status cut_to(const char *path, long long size, int *short_file) {
    *short_file = 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && size == 0) return DK_OK;
        if (errno == ENOENT) {
            *short_file = 1;
            return DK_OK;
        }
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    dk_status st = DK_OK;
    if (fstat(fd, &sb) != 0) st = dk_fail(DK_ERR_RUNTIME, "%s: cannot stat: %s", path, strerror(errno));
    else if ((long long)sb.st_size < size) *short_file = 1;
    else if ((long long)sb.st_size > size && (ftruncate(fd, (off_t)size) != 0 || fsync(fd) != 0))
        st = dk_fail(DK_ERR_RUNTIME, "%s: cannot truncate to %lld bytes: %s", path, size, strerror(errno));
    close(fd);
    return st;
}

dk_status run_logs_resume(const char *run_dir, int step) {
    char path[4096];
    if (step <= 0) {
        for (int i = 0; i < N_LOGS; i++) {
            path_of(path, sizeof path, run_dir, log_names[i]);
            int short_file;
            DK_TRY(cut_to(path, 0, &short_file));
        }
        path_of(path, sizeof path, run_dir, "logs_offsets.json");
        if (unlink(path) != 0 && errno != ENOENT)
            return dk_fail(DK_ERR_RUNTIME, "%s: cannot remove: %s", path, strerror(errno));
        return DK_OK;
    }
    cJSON *offs = NULL;
    DK_TRY(offsets_load(run_dir, &offs));
    char key[32];
    snprintf(key, sizeof key, "%d", step);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(offs, key);
    dk_status st = DK_OK;
    for (int i = 0; i < N_LOGS && st == DK_OK; i++) {
        path_of(path, sizeof path, run_dir, log_names[i]);
        const cJSON *size = at ? cJSON_GetObjectItemCaseSensitive(at, log_names[i]) : NULL;
        int short_file = 0;
        if (cJSON_IsNumber(size) && size->valuedouble >= 0) {
            st = cut_to(path, (long long)size->valuedouble, &short_file);
            if (st == DK_OK && short_file)
                fprintf(stderr, "warning: %s is shorter than the %lld bytes recorded at step %d; keeping its lines "
                                "of steps <= %d\n", path, (long long)size->valuedouble, step, step);
        }
        if (st == DK_OK && (!cJSON_IsNumber(size) || short_file) && dk_file_exists(path)) st = cut_by_step(path, step);
    }
    /* Sizes recorded for later steps describe lines just dropped. */
    if (st == DK_OK) {
        for (cJSON *e = offs->child, *next; e; e = next) {
            next = e->next;
            if (atoi(e->string) > step) cJSON_DetachItemViaPointer(offs, e), cJSON_Delete(e);
        }
        st = offsets_save(run_dir, offs);
    }
    cJSON_Delete(offs);
    return st;
}

dk_status run_logs_mark(const char *run_dir, int step) {
    cJSON *offs = NULL;
    DK_TRY(offsets_load(run_dir, &offs));
    char key[32], path[4096];
    snprintf(key, sizeof key, "%d", step);
    cJSON *at = cJSON_CreateObject();
    dk_status st = DK_OK;
    for (int i = 0; i < N_LOGS && st == DK_OK; i++) {
        path_of(path, sizeof path, run_dir, log_names[i]);
        struct stat sb;
        long long size = 0;
        if (stat(path, &sb) == 0) {
            size = (long long)sb.st_size;
            st = dk_fsync_path(path);
        } else if (errno != ENOENT) {
            st = dk_fail(DK_ERR_RUNTIME, "%s: cannot stat: %s", path, strerror(errno));
        }
        cJSON_AddNumberToObject(at, log_names[i], (double)size);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(offs, key);
    cJSON_AddItemToObject(offs, key, at);
    if (st == DK_OK) st = offsets_save(run_dir, offs);
    cJSON_Delete(offs);
    return st;
}
