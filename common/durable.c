/* durable.c: fsync, then rename, then fsync the directory (durable.h). */
#define _GNU_SOURCE
#include "common/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

dk_status dk_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open to sync: %s", path, strerror(errno));
    int bad = fsync(fd) != 0;
    int e = errno;
    close(fd);
    /* Some file systems refuse fsync on a directory; the data files matter more. */
    if (bad && e != EINVAL) return dk_fail(DK_ERR_RUNTIME, "%s: fsync failed: %s", path, strerror(e));
    return DK_OK;
}

dk_status dk_write_file_synced(const char *path, const void *data, size_t len) {
    DK_TRY(dk_write_file(path, data, len));
    return dk_fsync_path(path);
}

dk_status dk_rename_durable(const char *tmp, const char *path) {
    DK_TRY(dk_fsync_path(tmp));
    if (rename(tmp, path) != 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    return dk_fsync_path(dir);
}

dk_status dk_write_file_durable(const char *path, const void *data, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    DK_TRY(dk_write_file(tmp, data, len));
    return dk_rename_durable(tmp, path);
}
