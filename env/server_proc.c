/* server_proc.c: spawning the harness server and talking to it line by line
 * over non-blocking pipes with poll() deadlines. */
#define _GNU_SOURCE
#include "env/server_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/util.h"
#include "env/proc_util.h"

static int has_harness(const char *dir) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/env/harness", dir);
    return dk_dir_exists(p);
}

/* Walks up from dir (at most 6 levels) to a folder holding env/harness. */
static int find_root_from(const char *start, char *out, size_t n) {
    char dir[PATH_MAX];
    if (!realpath(start, dir)) return 0;
    for (int i = 0; i < 6; i++) {
        if (has_harness(dir)) {
            snprintf(out, n, "%s", dir);
            return 1;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) break;
        *slash = '\0';
    }
    return 0;
}

void kg_server_config_default(kg_server_config *c) {
    memset(c, 0, sizeof *c);
    c->ready_timeout_s = 180;
    const char *src = getenv("DK_SOURCE");
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (src && *src) {
        snprintf(c->source_root, sizeof c->source_root, "%s", src);
    } else if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        if (!find_root_from(exe, c->source_root, sizeof c->source_root) &&
            !find_root_from(".", c->source_root, sizeof c->source_root))
            snprintf(c->source_root, sizeof c->source_root, ".");
    } else if (!find_root_from(".", c->source_root, sizeof c->source_root)) {
        snprintf(c->source_root, sizeof c->source_root, ".");
    }
    const char *py = getenv("DK_PYTHON");
    if (py && *py)
        snprintf(c->python, sizeof c->python, "%s", py);
    else if (snprintf(c->python, sizeof c->python, "%s/.venv/bin/python", c->source_root) < (int)sizeof c->python &&
             access(c->python, X_OK) == 0)
        ;
    else if (!kg_find_in_path("python3", c->python, sizeof c->python))
        snprintf(c->python, sizeof c->python, "python3");
    /* A bare name ("python3") is looked up in PATH now: exec gets a path. */
    if (!strchr(c->python, '/')) {
        char found[4096];
        if (kg_find_in_path(c->python, found, sizeof found)) snprintf(c->python, sizeof c->python, "%s", found);
    }
    const char *script = getenv("KERNELGYM_SERVER");
    if (script && *script) snprintf(c->script, sizeof c->script, "%s", script);
}

void kg_server_init(kg_server *s, const kg_server_config *cfg) {
    memset(s, 0, sizeof *s);
    s->to_fd = s->from_fd = -1;
    s->cfg = *cfg;
}

int kg_server_running(const kg_server *s) { return s->pid > 0; }

static void close_fds(kg_server *s) {
    if (s->to_fd >= 0) close(s->to_fd);
    if (s->from_fd >= 0) close(s->from_fd);
    s->to_fd = s->from_fd = -1;
    s->len = 0;
}

int kg_server_alive(kg_server *s, char *why, size_t why_n) {
    if (s->pid <= 0) {
        snprintf(why, why_n, "not started");
        return 0;
    }
    int ws;
    if (!kg_wait_exit(s->pid, 0, &ws)) return 1;
    char how[160];
    kg_describe_exit(ws, how, sizeof how);
    snprintf(why, why_n, "the evaluation server exited while idle (%s)", how);
    kill(-s->pid, SIGKILL);
    s->pid = 0;
    close_fds(s);
    return 0;
}

void kg_server_kill(kg_server *s) {
    /* SIGTERM first: the server then kills its sandboxed children, which
     * live in sessions of their own; one that does not react in 2 s is
     * beyond saving. */
    if (s->pid > 0) kg_terminate(s->pid, 1, 2.0);
    s->pid = 0;
    close_fds(s);
}

void kg_server_stop(kg_server *s, double grace_s) {
    if (s->pid <= 0) return;
    if (s->to_fd >= 0) close(s->to_fd);
    s->to_fd = -1;
    int ws;
    if (kg_wait_exit(s->pid, grace_s, &ws)) {
        kill(-s->pid, SIGKILL); /* anything it left in its group */
        s->pid = 0;
        close_fds(s);
        return;
    }
    kg_terminate(s->pid, 1, 2.0);
    s->pid = 0;
    close_fds(s);
}

/* The server, its judges and the candidates forked from them see only the
 * variables named here: the interpreter, CUDA, Triton, torch and locale
 * settings, and the project's own DK_*. Anything else the caller had (the
 * Redis URL with its password, a token of some other tool) is dropped
 * before exec: a process keeps its initial environment block in memory
 * whatever it later unsets, and candidate code runs in a fork of it. */
static int env_kept(const char *entry) {
    static const char *const exact[] = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR", "LANG",
                                        "LANGUAGE", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
                                        "CC", "CXX", "VIRTUAL_ENV", NULL};
    static const char *const prefix[] = {"DK_", "PYTHON", "CUDA_", "NVIDIA_", "CUDNN_", "CUBLAS", "TRITON_",
                                         "TORCH", "PYTORCH_", "OMP_", "MKL_", "OPENBLAS_", "LC_", "XDG_", NULL};
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    for (int i = 0; exact[i]; i++)
        if (strlen(exact[i]) == n && !strncmp(entry, exact[i], n)) return 1;
    for (int i = 0; prefix[i]; i++)
        if (!strncmp(entry, prefix[i], strlen(prefix[i]))) return 1;
    return 0;
}

static void env_scrub(void) {
    extern char **environ;
    for (;;) {
        char **e = environ;
        while (*e && env_kept(*e)) e++;
        if (!*e) return;
        char name[256];
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        if (n == 0 || n >= sizeof name) { /* not a name unsetenv takes: cut it out of the array */
            for (char **m = e; *m; m++) m[0] = m[1];
            continue;
        }
        memcpy(name, *e, n);
        name[n] = '\0';
        unsetenv(name);
    }
}

static void child_exec(const kg_server_config *c, int in_fd, int out_fd, pid_t parent) {
    kg_child_setup(parent, SIGKILL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Move the pipe ends above 3 first so the dup2s below cannot clobber them. */
    int a = fcntl(in_fd, F_DUPFD, 10), b = fcntl(out_fd, F_DUPFD, 10);
    if (a < 0 || b < 0 || dup2(a, 0) < 0 || dup2(2, 1) < 0 || dup2(b, 3) < 0) _exit(126);
    close_range(4, ~0U, 0);
    if (chdir(c->source_root) != 0) {
        fprintf(stderr, "kernelgym: cannot enter the source root %s: %s\n", c->source_root, strerror(errno));
        _exit(126);
    }
    env_scrub();
    const char *old = getenv("PYTHONPATH");
    char pp[PATH_MAX * 2];
    if (old && *old)
        snprintf(pp, sizeof pp, "%s:%s", c->source_root, old);
    else
        snprintf(pp, sizeof pp, "%s", c->source_root);
    setenv("PYTHONPATH", pp, 1);
    setenv("PYTHONUNBUFFERED", "1", 1);
    if (c->cuda_visible[0]) setenv("CUDA_VISIBLE_DEVICES", c->cuda_visible, 1);
    /* The CUPTI recorder is built beside this program (build/env/cupti/). */
    if (!getenv("DK_KGPROF_LIB") && !getenv("DK_BUILD")) {
        char exe[PATH_MAX], lib[PATH_MAX + 32];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) *slash = '\0';
            snprintf(lib, sizeof lib, "%s/env/cupti/libkgprof.so", exe);
            if (access(lib, R_OK) == 0) setenv("DK_KGPROF_LIB", lib, 1);
        }
    }
    if (c->script[0])
        execl(c->python, c->python, c->script, (char *)NULL);
    else
        execl(c->python, c->python, "-m", "env.harness.server", (char *)NULL);
    fprintf(stderr, "kernelgym: cannot run %s: %s\n", c->python, strerror(errno));
    _exit(127);
}

/* Reads until a full line is buffered, the deadline passes, the server
 * closes fd 3, or *stop is set. On OK *line is malloc'd, without '\n'. */
static kg_server_outcome read_line(kg_server *s, double deadline, const volatile sig_atomic_t *stop, char **line) {
    *line = NULL;
    for (;;) {
        char *nl = s->len ? memchr(s->buf, '\n', s->len) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - s->buf);
            *line = dk_malloc(n + 1);
            memcpy(*line, s->buf, n);
            (*line)[n] = '\0';
            memmove(s->buf, nl + 1, s->len - n - 1);
            s->len -= n + 1;
            return KG_SERVER_OK;
        }
        if (stop && *stop) return KG_SERVER_INTERRUPTED;
        double left = deadline - dk_now();
        if (left <= 0) return KG_SERVER_TIMEOUT;
        int ms = left > 0.2 ? 200 : (int)(left * 1000) + 1; /* wake up to notice *stop */
        struct pollfd p = {s->from_fd, POLLIN, 0};
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR) return KG_SERVER_DIED;
        if (r <= 0) continue;
        if (s->len + 65536 > s->cap) {
            s->cap = (s->len + 65536) * 2;
            s->buf = dk_realloc(s->buf, s->cap);
        }
        ssize_t got = read(s->from_fd, s->buf + s->len, s->cap - s->len);
        if (got > 0) s->len += (size_t)got;
        else if (got == 0) return KG_SERVER_DIED;
        else if (errno != EAGAIN && errno != EINTR) return KG_SERVER_DIED;
    }
}

static kg_server_outcome write_all(kg_server *s, const char *data, size_t n, double deadline,
                                   const volatile sig_atomic_t *stop) {
    size_t off = 0;
    while (off < n) {
        if (stop && *stop) return KG_SERVER_INTERRUPTED;
        double left = deadline - dk_now();
        if (left <= 0) return KG_SERVER_TIMEOUT;
        struct pollfd p = {s->to_fd, POLLOUT, 0};
        int r = poll(&p, 1, left > 0.2 ? 200 : (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) return KG_SERVER_DIED;
        if (r <= 0) continue;
        if (p.revents & (POLLERR | POLLHUP)) return KG_SERVER_DIED;
        ssize_t w = write(s->to_fd, data + off, n - off);
        if (w > 0) off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR) return KG_SERVER_DIED;
    }
    return KG_SERVER_OK;
}

/* Describes how a dead server ended (reaping it). */
static void death_text(kg_server *s, char *why, size_t n, const char *when) {
    int ws = -1;
    if (s->pid > 0 && kg_wait_exit(s->pid, 2.0, &ws)) {
        char how[160];
        kg_describe_exit(ws, how, sizeof how);
        snprintf(why, n, "the evaluation server died %s (%s)", when, how);
        kill(-s->pid, SIGKILL);
        s->pid = 0;
    } else {
        snprintf(why, n, "the evaluation server closed its result pipe %s", when);
    }
}

dk_status kg_server_start(kg_server *s) {
    kg_server_kill(s);
    kg_ignore_sigpipe();
    const kg_server_config *c = &s->cfg;
    if (c->script[0] == '\0') {
        char mod[PATH_MAX + 32];
        snprintf(mod, sizeof mod, "%s/env/harness/server.py", c->source_root);
        if (!dk_file_exists(mod))
            return dk_fail(DK_ERR_RUNTIME, "evaluation server: %s not found (set DK_SOURCE to the drkernel source tree)", mod);
    }
    int in_p[2], out_p[2];
    if (pipe2(in_p, O_CLOEXEC) != 0) return dk_fail(DK_ERR_RUNTIME, "evaluation server: pipe: %s", strerror(errno));
    if (pipe2(out_p, O_CLOEXEC) != 0) {
        close(in_p[0]);
        close(in_p[1]);
        return dk_fail(DK_ERR_RUNTIME, "evaluation server: pipe: %s", strerror(errno));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(in_p[0]), close(in_p[1]), close(out_p[0]), close(out_p[1]);
        return dk_fail(DK_ERR_RUNTIME, "evaluation server: fork: %s", strerror(errno));
    }
    if (pid == 0) child_exec(c, in_p[0], out_p[1], parent);
    setpgid(pid, pid); /* also done by the child; whichever runs first wins the race */
    close(in_p[0]);
    close(out_p[1]);
    s->pid = pid;
    s->to_fd = in_p[1];
    s->from_fd = out_p[0];
    fcntl(s->to_fd, F_SETFL, fcntl(s->to_fd, F_GETFL) | O_NONBLOCK);
    fcntl(s->from_fd, F_SETFL, fcntl(s->from_fd, F_GETFL) | O_NONBLOCK);
    s->len = 0;
    s->cuda = 0;
    s->ready_line[0] = '\0';

    double deadline = dk_now() + c->ready_timeout_s;
    const char *what = c->script[0] ? c->script : "-m env.harness.server";
    for (;;) {
        char *line = NULL;
        kg_server_outcome o = read_line(s, deadline, NULL, &line);
        if (o == KG_SERVER_TIMEOUT) {
            kg_server_kill(s);
            return dk_fail(DK_ERR_RUNTIME, "evaluation server (%s %s) sent no ready line within %.0f s", c->python, what,
                           c->ready_timeout_s);
        }
        if (o != KG_SERVER_OK) {
            char why[256];
            death_text(s, why, sizeof why, "during start-up");
            kg_server_kill(s);
            return dk_fail(DK_ERR_RUNTIME, "%s: %s %s in %s (its stderr above says why)", why, c->python, what,
                           c->source_root);
        }
        cJSON *j = cJSON_Parse(line);
        int ready = j && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ready"));
        if (ready) {
            s->cuda = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "cuda"));
            snprintf(s->ready_line, sizeof s->ready_line, "%s", line);
        }
        cJSON_Delete(j);
        free(line);
        if (ready) {
            s->last_answer = dk_now();
            return DK_OK;
        }
    }
}

kg_server_outcome kg_server_request(kg_server *s, const char *line, double timeout_s, const volatile sig_atomic_t *stop,
                                    char **reply, char *why, size_t why_n) {
    *reply = NULL;
    why[0] = '\0';
    if (s->pid <= 0) {
        snprintf(why, why_n, "the evaluation server is not running");
        return KG_SERVER_DIED;
    }
    double deadline = dk_now() + timeout_s;
    size_t n = strlen(line);
    char *msg = dk_malloc(n + 2);
    memcpy(msg, line, n);
    msg[n] = '\n';
    msg[n + 1] = '\0';
    kg_server_outcome o = write_all(s, msg, n + 1, deadline, stop);
    free(msg);
    if (o == KG_SERVER_OK) o = read_line(s, deadline, stop, reply);
    if (o == KG_SERVER_OK) s->last_answer = dk_now();
    switch (o) {
    case KG_SERVER_OK:
        break;
    case KG_SERVER_TIMEOUT:
        snprintf(why, why_n, "the evaluation server gave no answer within %.0f s", timeout_s);
        break;
    case KG_SERVER_DIED:
        death_text(s, why, why_n, "during the job");
        break;
    case KG_SERVER_INTERRUPTED:
        snprintf(why, why_n, "interrupted by a stop request");
        break;
    }
    return o;
}

kg_server_outcome kg_server_ping(kg_server *s, double timeout_s, char *why, size_t why_n) {
    char *reply = NULL;
    kg_server_outcome o = kg_server_request(s, "{\"kind\":\"ping\"}", timeout_s, NULL, &reply, why, why_n);
    if (o == KG_SERVER_OK) {
        cJSON *j = cJSON_Parse(reply);
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "pong"))) {
            snprintf(why, why_n, "the evaluation server answered a ping with: %.200s", reply);
            o = KG_SERVER_DIED;
        }
        cJSON_Delete(j);
    }
    free(reply);
    return o;
}
