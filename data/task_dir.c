/* task_dir.c: listing a KernelBench-style folder (task_dir.h): the filters,
 * the leading number and the sort. */
#define _POSIX_C_SOURCE 200809L
#include "data/task_dir.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

long task_dir_number(const char *name) {
    if (!isdigit((unsigned char)name[0])) return -1;
    char *end;
    errno = 0;
    long v = strtol(name, &end, 10);
    if (errno == ERANGE) return -1;
    return (*end == '_' || *end == '.' || *end == '-') ? v : -1;
}

long task_dir_level(const char *name) {
    if (strncmp(name, "level", 5) != 0 || !isdigit((unsigned char)name[5])) return -1;
    char *end;
    long v = strtol(name + 5, &end, 10);
    return *end || v > 1000000 ? -1 : v;
}

static int entry_cmp(const void *a, const void *b) {
    const task_dir_entry *x = a, *y = b;
    if ((x->num < 0) != (y->num < 0)) return x->num < 0 ? 1 : -1;
    if (x->num != y->num) return x->num < y->num ? -1 : 1;
    return strcmp(x->name, y->name);
}

dk_status task_dir_list(const char *dir, task_dir_kind kind, task_dir_entry **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return dk_fail(DK_ERR_RUNTIME, "%s: cannot read folder: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    char full[4200];
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || nm[0] == '_') continue;
        snprintf(full, sizeof full, "%s/%s", dir, nm);
        size_t len = strlen(nm);
        long num;
        if (kind == TASK_DIR_FILES) {
            if (len < 4 || strcmp(nm + len - 3, ".py") != 0 || !dk_file_exists(full)) continue;
            num = task_dir_number(nm);
        } else {
            num = task_dir_level(nm);
            if (num < 0 || !dk_dir_exists(full)) continue;
        }
        if (*n == cap) *out = dk_realloc(*out, (size_t)(cap = cap ? 2 * cap : 64) * sizeof **out);
        (*out)[(*n)++] = (task_dir_entry){dk_strdup(nm), num};
    }
    closedir(d);
    if (*n) qsort(*out, (size_t)*n, sizeof **out, entry_cmp);
    return DK_OK;
}

void task_dir_free(task_dir_entry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].name);
    free(e);
}
