/* proc_util.c: see proc_util.h. */
#define _GNU_SOURCE
#include "env/proc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

void kg_child_setup(pid_t parent, int death_signal) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, death_signal);
    /* The parent may have died between fork and prctl. */
    if (getppid() != parent) _exit(1);
}

int kg_wait_exit(pid_t pid, double timeout_s, int *wstatus) {
    double deadline = dk_now() + timeout_s;
    for (;;) {
        int ws = 0;
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid) {
            if (wstatus) *wstatus = ws;
            return 1;
        }
        if (r < 0 && errno != EINTR) {
            if (wstatus) *wstatus = -1;
            return 1;
        }
        if (dk_now() >= deadline) return 0;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int kg_terminate(pid_t pid, int group, double grace_s) {
    if (pid <= 0) return -1;
    int ws = -1;
    kill(group ? -pid : pid, SIGTERM);
    if (kg_wait_exit(pid, grace_s, &ws)) {
        if (group) kill(-pid, SIGKILL); /* stragglers left in the group */
        return ws;
    }
    kill(group ? -pid : pid, SIGKILL);
    if (!kg_wait_exit(pid, 10.0, &ws)) ws = -1;
    return ws;
}

void kg_describe_exit(int ws, char *buf, size_t n) {
    if (ws == -1)
        snprintf(buf, n, "exit status unknown");
    else if (WIFEXITED(ws))
        snprintf(buf, n, "exit code %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else
        snprintf(buf, n, "wait status 0x%x", ws);
}

int kg_find_in_path(const char *name, char *out, size_t n) {
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0) return 0;
        snprintf(out, n, "%s", name);
        return 1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len > 0) {
            snprintf(out, n, "%.*s/%s", (int)len, path, name);
            if (access(out, X_OK) == 0) return 1;
        }
        path += len + (colon ? 1 : 0);
    }
    return 0;
}

void kg_hostname(char *out, size_t n) {
    char h[256] = {0};
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
    char *dot = strchr(h, '.');
    if (dot) *dot = '\0';
    snprintf(out, n, "%s", h);
}

void kg_random_hex(char *out, size_t n_bytes) {
    unsigned char buf[256];
    if (n_bytes > sizeof buf) n_bytes = sizeof buf;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, n_bytes) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)n_bytes) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^
                               ((unsigned long long)getpid() << 40);
        for (size_t i = 0; i < n_bytes; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (unsigned char)(x >> 24);
        }
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n_bytes; i++) {
        out[2 * i] = hex[buf[i] >> 4];
        out[2 * i + 1] = hex[buf[i] & 15];
    }
    out[2 * n_bytes] = '\0';
}

void kg_ignore_sigpipe(void) {
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}
