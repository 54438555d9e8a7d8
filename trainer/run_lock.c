/* run_lock.c: the run-directory lock of run_lock.h. fcntl(F_SETLK) rather
 * than flock: a record lock belongs to the process, so a child forked before
 * an exec cannot keep it alive after the trainer died, and F_GETLK names the
 * holder's pid even when its owner line is still being written. */
#define _GNU_SOURCE
#include "trainer/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

static struct flock whole_file(short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0; /* to the end of the file, however long */
    return fl;
}

/* "pid 123 on host h since 2026-01-02T03:04:05Z" from the file, else from F_GETLK. */
static void describe_owner(int fd, char *out, size_t n) {
    char buf[256] = "";
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    if (got > 0) {
        buf[got] = '\0';
        char *nl = strchr(buf, '\n');
        if (nl) *nl = '\0';
    }
    if (buf[0]) {
        snprintf(out, n, "%s", buf);
        return;
    }
    struct flock fl = whole_file(F_WRLCK);
    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) snprintf(out, n, "pid %d", (int)fl.l_pid);
    else snprintf(out, n, "another process");
}

dk_status run_lock_acquire(const char *run_dir, run_lock *l) {
    l->fd = -1;
    DK_TRY(dk_mkdirs(run_dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/run.lock", run_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", path, strerror(errno));
    struct flock fl = whole_file(F_WRLCK);
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int e = errno;
        if (e == EACCES || e == EAGAIN) {
            char owner[300];
            describe_owner(fd, owner, sizeof owner);
            close(fd);
            return dk_fail(DK_ERR_RUNTIME,
                           "%s: the run directory is in use by %s; stop that run or choose another [run] dir", path,
                           owner);
        }
        close(fd);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot lock: %s", path, strerror(e));
    }
    char host[128] = "?", stamp[32] = "?", line[400];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int len = snprintf(line, sizeof line, "pid %d on host %s since %s\n", (int)getpid(), host, stamp);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        dk_status s = dk_fail(DK_ERR_RUNTIME, "%s: cannot write the owner: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    l->fd = fd;
    return DK_OK;
}

void run_lock_release(run_lock *l) {
    if (l->fd < 0) return;
    /* Emptied first so a reader that finds the file unlocked sees no owner. */
    if (ftruncate(l->fd, 0) != 0) { /* informative content only */
    }
    close(l->fd);
    l->fd = -1;
}
