/* util.c: checked allocation, file and directory helpers, timing. */
#define _POSIX_C_SOURCE 200809L
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *dk_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) DK_ABORT("out of host memory allocating %zu bytes", n);
    return p;
}

void *dk_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) DK_ABORT("out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *dk_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) DK_ABORT("out of host memory reallocating %zu bytes", n);
    return q;
}

char *dk_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = dk_malloc(n);
    memcpy(p, s, n);
    return p;
}

dk_status dk_read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot seek", path);
    }
    long n = ftell(f);
    rewind(f);
    char *buf = dk_malloc((size_t)n + 1);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return dk_fail(DK_ERR_RUNTIME, "%s: short read", path);
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    if (len) *len = (size_t)n;
    return DK_OK;
}

dk_status dk_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, len, f);
    int c = fclose(f);
    if (w != len || c != 0) return dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno));
    return DK_OK;
}

dk_status dk_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return dk_fail(DK_ERR_RUNTIME, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return dk_fail(DK_ERR_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    return DK_OK;
}

void dk_remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) continue;
            struct stat st; /* lstat: a link is removed, never followed */
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) dk_remove_tree(sub);
            else unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

int dk_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dk_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

double dk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
