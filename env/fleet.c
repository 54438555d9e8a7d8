/* fleet.c: start, supervise and stop a fleet (fleet.h). */
#define _GNU_SOURCE
#include "env/fleet.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "env/proc_util.h"
#include "env/redis_conn.h"

#define KG_FLEET_BACKOFF_MIN_S 1.0
#define KG_FLEET_BACKOFF_MAX_S 30.0
#define KG_FLEET_STABLE_S 60.0 /* a worker that ran this long starts the next backoff afresh */

void kg_fleet_config_default(kg_fleet_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->redis, sizeof c->redis, "auto");
    snprintf(c->device, sizeof c->device, "auto");
    c->n_cpu_workers = 1;
}

int kg_fleet_find_exe(char *out, size_t n) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash && strcmp(slash + 1, "kernelgym") == 0) {
            snprintf(out, n, "%s", self);
            return 1;
        }
        if (slash) {
            *slash = '\0';
            const char *rel[] = {"kernelgym", "../kernelgym"};
            for (int i = 0; i < 2; i++) {
                snprintf(out, n, "%s/%s", self, rel[i]);
                if (access(out, X_OK) == 0) return 1;
            }
        }
    }
    const char *build = getenv("DK_BUILD");
    if (build && *build) {
        snprintf(out, n, "%s/kernelgym", build);
        if (access(out, X_OK) == 0) return 1;
    }
    return kg_find_in_path("kernelgym", out, n);
}

extern char **environ;

/* This process's environment plus the worker's own: the Redis URL (never
 * on a command line, where `ps` would show its password) and the GPU
 * memory cap. malloc'ed, for execve. */
static char **worker_env(const kg_fleet *f, const kg_fleet_config *c) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = dk_calloc(n + 3, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "KERNELGYM_REDIS=", 16) != 0 && strncmp(environ[i], "DK_KG_GPU_MEMORY_GB=", 20) != 0)
            env[k++] = dk_strdup(environ[i]);
    size_t len = strlen(f->url) + 17;
    env[k] = dk_malloc(len);
    snprintf(env[k++], len, "KERNELGYM_REDIS=%s", f->url);
    if (c->gpu_memory_gb > 0) {
        env[k] = dk_malloc(64);
        snprintf(env[k++], 64, "DK_KG_GPU_MEMORY_GB=%g", c->gpu_memory_gb);
    }
    return env;
}

static void free_env(char **env) {
    for (size_t i = 0; env[i]; i++) {
        if (!strncmp(env[i], "KERNELGYM_REDIS=", 16)) memset(env[i], 0, strlen(env[i])); /* the password */
        free(env[i]);
    }
    free(env);
}

/* Starts the worker of slot i (a new slot when i == f->n). */
static dk_status spawn_worker(kg_fleet *f, const kg_fleet_config *c, int gpu, const char *label, int i) {
    char gpu_s[16];
    snprintf(gpu_s, sizeof gpu_s, "%d", gpu);
    const char *argv[16 + 64];
    int a = 0;
    argv[a++] = c->exe;
    argv[a++] = "worker";
    argv[a++] = "--device";
    argv[a++] = c->device;
    if (gpu >= 0) {
        argv[a++] = "--gpu";
        argv[a++] = gpu_s;
    }
    for (int i = 0; i < c->n_extra && a < 16 + 62; i++) argv[a++] = c->extra[i];
    argv[a] = NULL;
    /* The environment is made before the fork: the caller has threads (MPI's,
     * the comm's progress thread, the supervisor), so the child may only make
     * async-signal-safe calls until exec, and setenv allocates. */
    char **envp = worker_env(f, c);
    char fail_msg[4200];
    int fail_len = snprintf(fail_msg, sizeof fail_msg, "kernelgym fleet: cannot run %s\n", c->exe);
    if (fail_len < 0 || fail_len >= (int)sizeof fail_msg) fail_len = (int)sizeof fail_msg - 1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        free_env(envp);
        return dk_fail(DK_ERR_RUNTIME, "fleet: fork for worker %s: %s", label, strerror(errno));
    }
    if (pid == 0) {
        kg_child_setup(parent, SIGTERM);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execve(c->exe, (char *const *)argv, envp);
        ssize_t w = write(2, fail_msg, (size_t)fail_len);
        (void)w;
        _exit(127);
    }
    free_env(envp);
    f->pid[i] = pid;
    f->gpu[i] = gpu;
    f->started[i] = dk_now();
    f->restart_at[i] = 0;
    if (f->backoff[i] <= 0) f->backoff[i] = KG_FLEET_BACKOFF_MIN_S;
    if (label != f->label[i]) snprintf(f->label[i], sizeof f->label[i], "%s", label);
    if (i == f->n) f->n++;
    return DK_OK;
}

dk_status kg_fleet_start(kg_fleet *f, const kg_fleet_config *c0) {
    memset(f, 0, sizeof *f);
    kg_fleet_config c = *c0;
    if (!c.exe[0] && !kg_fleet_find_exe(c.exe, sizeof c.exe))
        return dk_fail(DK_ERR_RUNTIME, "fleet: cannot find the kernelgym executable (set DK_BUILD or PATH)");
    int n = c.n_gpus > 0 ? c.n_gpus : c.n_cpu_workers;
    if (n < 1 || n > KG_FLEET_MAX) return dk_fail(DK_ERR_USAGE, "fleet: %d workers requested (1 to %d)", n, KG_FLEET_MAX);
    f->cfg = c;
    if (strcmp(c.redis, "auto") == 0) {
        DK_TRY(c.redis_tcp ? kg_redis_auto_start_tcp(&f->redis, 10.0) : kg_redis_auto_start(&f->redis, 10.0));
        f->own_redis = 1;
        snprintf(f->url, sizeof f->url, "%s", f->redis.url);
    } else {
        snprintf(f->url, sizeof f->url, "%s", c.redis);
    }
    for (int i = 0; i < n; i++) {
        char label[32];
        if (c.n_gpus > 0) snprintf(label, sizeof label, "gpu%d", c.gpus[i]);
        else snprintf(label, sizeof label, "cpu%d", i);
        dk_status s = spawn_worker(f, &c, c.n_gpus > 0 ? c.gpus[i] : -1, label, f->n);
        if (s != DK_OK) {
            kg_fleet_stop(f, 5.0);
            return s;
        }
    }
    return DK_OK;
}

/* 1 when the fleet's Redis answers a PING right now. */
static int redis_answers(const kg_fleet *f) {
    kg_redis_url u;
    redisContext *c = NULL;
    int ok = kg_redis_url_parse(f->url, &u) == DK_OK && kg_redis_connect(&u, 2.0, &c) == DK_OK;
    if (c) redisFree(c);
    dk_error_clear();
    return ok;
}

static void supervise_redis(kg_fleet *f) {
    if (!f->own_redis) return;
    char how[1024];
    if (f->redis.pid > 0 && kg_redis_auto_alive(&f->redis, how, sizeof how)) return;
    if (f->redis.pid > 0 || f->redis_retry_at == 0) /* just died */
        fprintf(stderr, "kernelgym fleet: the private redis-server exited: %s; restarting it\n", how);
    else if (dk_now() < f->redis_retry_at)
        return;
    if (kg_redis_auto_restart(&f->redis, 30.0) == DK_OK) {
        f->redis_restarts++;
        f->redis_retry_at = 0;
        fprintf(stderr, "kernelgym fleet: private redis-server restarted (pid %d, restart %d), its AOF replayed\n",
                (int)f->redis.pid, f->redis_restarts);
    } else {
        fprintf(stderr, "kernelgym fleet: %s; trying again in 5 s\n", dk_error());
        f->redis_retry_at = dk_now() + 5.0;
    }
}

int kg_fleet_check(kg_fleet *f) {
    supervise_redis(f);
    int alive = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->pid[i] > 0) {
            int ws;
            pid_t r = waitpid(f->pid[i], &ws, WNOHANG);
            if (r != f->pid[i]) {
                alive++;
                continue;
            }
            char how[160];
            kg_describe_exit(ws, how, sizeof how);
            double ran = dk_now() - f->started[i];
            /* A signal is a crash or a kill; an error exit with Redis away is
             * a worker that gave up waiting for it. Either way it can work
             * again. Anything else was the worker's own decision. */
            int restart = WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) != 127 &&
                                              !redis_answers(f));
            if (ran >= KG_FLEET_STABLE_S) f->backoff[i] = KG_FLEET_BACKOFF_MIN_S;
            if (restart) {
                fprintf(stderr, "kernelgym fleet: worker %s (pid %d) exited after %.0f s: %s; restarting it in %.0f s\n",
                        f->label[i], (int)f->pid[i], ran, how, f->backoff[i]);
                f->restart_at[i] = dk_now() + f->backoff[i];
                f->backoff[i] = f->backoff[i] * 2 < KG_FLEET_BACKOFF_MAX_S ? f->backoff[i] * 2 : KG_FLEET_BACKOFF_MAX_S;
            } else {
                fprintf(stderr, "kernelgym fleet: worker %s (pid %d) exited: %s; it left on its own (its message is "
                                "above), so it is not restarted\n", f->label[i], (int)f->pid[i], how);
            }
            f->pid[i] = 0;
        }
        if (f->pid[i] == 0 && f->restart_at[i] > 0) {
            if (dk_now() >= f->restart_at[i]) {
                if (spawn_worker(f, &f->cfg, f->gpu[i], f->label[i], i) == DK_OK) {
                    f->worker_restarts++;
                    fprintf(stderr, "kernelgym fleet: worker %s restarted (pid %d)\n", f->label[i], (int)f->pid[i]);
                } else {
                    fprintf(stderr, "kernelgym fleet: %s\n", dk_error());
                    f->restart_at[i] = dk_now() + f->backoff[i];
                }
            }
            alive++; /* running, or due to run */
        }
    }
    return alive;
}

static void *watch_main(void *arg) {
    kg_fleet *f = arg;
    while (!f->watch_quit) {
        kg_fleet_check(f);
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

dk_status kg_fleet_watch(kg_fleet *f) {
    f->watch_quit = 0;
    if (pthread_create(&f->watcher, NULL, watch_main, f) != 0)
        return dk_fail(DK_ERR_RUNTIME, "fleet: cannot start the supervising thread");
    f->watching = 1;
    return DK_OK;
}

void kg_fleet_stop(kg_fleet *f, double grace_s) {
    if (f->watching) {
        f->watch_quit = 1;
        pthread_join(f->watcher, NULL);
        f->watching = 0;
    }
    for (int i = 0; i < f->n; i++) {
        f->restart_at[i] = 0;
        if (f->pid[i] > 0) kill(f->pid[i], SIGTERM);
    }
    double deadline = dk_now() + grace_s;
    for (int i = 0; i < f->n; i++) {
        if (f->pid[i] <= 0) continue;
        double left = deadline - dk_now();
        if (!kg_wait_exit(f->pid[i], left > 0 ? left : 0, NULL)) {
            kill(f->pid[i], SIGKILL);
            kg_wait_exit(f->pid[i], 10.0, NULL);
        }
        f->pid[i] = 0;
    }
    if (f->own_redis) kg_redis_auto_stop(&f->redis);
    f->own_redis = 0;
}
