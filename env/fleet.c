/* fleet.c: see fleet.h. */
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

static dk_status spawn_worker(kg_fleet *f, const kg_fleet_config *c, int gpu, const char *label) {
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
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return dk_fail(DK_ERR_RUNTIME, "fleet: fork for worker %s: %s", label, strerror(errno));
    if (pid == 0) {
        kg_child_setup(parent, SIGTERM);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        setenv("KERNELGYM_REDIS", f->url, 1);
        execv(c->exe, (char *const *)argv);
        fprintf(stderr, "kernelgym fleet: cannot run %s: %s\n", c->exe, strerror(errno));
        _exit(127);
    }
    f->pid[f->n] = pid;
    snprintf(f->label[f->n], sizeof f->label[f->n], "%s", label);
    f->n++;
    return DK_OK;
}

dk_status kg_fleet_start(kg_fleet *f, const kg_fleet_config *c0) {
    memset(f, 0, sizeof *f);
    kg_fleet_config c = *c0;
    if (!c.exe[0] && !kg_fleet_find_exe(c.exe, sizeof c.exe))
        return dk_fail(DK_ERR_RUNTIME, "fleet: cannot find the kernelgym executable (set DK_BUILD or PATH)");
    int n = c.n_gpus > 0 ? c.n_gpus : c.n_cpu_workers;
    if (n < 1 || n > KG_FLEET_MAX) return dk_fail(DK_ERR_USAGE, "fleet: %d workers requested (1 to %d)", n, KG_FLEET_MAX);
    if (strcmp(c.redis, "auto") == 0) {
        DK_TRY(kg_redis_auto_start(&f->redis, 10.0));
        f->own_redis = 1;
        snprintf(f->url, sizeof f->url, "%s", f->redis.url);
    } else {
        snprintf(f->url, sizeof f->url, "%s", c.redis);
    }
    for (int i = 0; i < n; i++) {
        char label[32];
        if (c.n_gpus > 0) snprintf(label, sizeof label, "gpu%d", c.gpus[i]);
        else snprintf(label, sizeof label, "cpu%d", i);
        dk_status s = spawn_worker(f, &c, c.n_gpus > 0 ? c.gpus[i] : -1, label);
        if (s != DK_OK) {
            kg_fleet_stop(f, 5.0);
            return s;
        }
    }
    return DK_OK;
}

int kg_fleet_check(kg_fleet *f) {
    int alive = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->pid[i] <= 0) continue;
        int ws;
        pid_t r = waitpid(f->pid[i], &ws, WNOHANG);
        if (r == f->pid[i]) {
            char how[160];
            kg_describe_exit(ws, how, sizeof how);
            fprintf(stderr, "kernelgym fleet: worker %s (pid %d) exited: %s\n", f->label[i], (int)f->pid[i], how);
            f->pid[i] = 0;
        } else {
            alive++;
        }
    }
    return alive;
}

void kg_fleet_stop(kg_fleet *f, double grace_s) {
    for (int i = 0; i < f->n; i++)
        if (f->pid[i] > 0) kill(f->pid[i], SIGTERM);
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
