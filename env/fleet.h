/* fleet.h: a KernelGym fleet on one machine, as `kernelgym serve` and
 * `kernelgym score --redis auto` run it (and a trainer can): Redis (a private
 * one for "auto", see redis_auto.h) plus one `kernelgym worker` process per
 * GPU. Workers are separate programs (fork + exec of the kernelgym
 * executable), so the caller's state (CUDA, MPI, threads, sockets) never
 * leaks into them; each gets the Redis URL through the KERNELGYM_REDIS
 * environment variable, never on a command line where `ps` would show the
 * password. They run in their own process groups and get SIGTERM if the
 * caller dies; kg_fleet_stop asks them to leave (a worker gives an
 * unfinished job back) before stopping a private Redis.
 *
 * kg_fleet_check supervises (call it every fraction of a second): a private
 * Redis that died is started again at once (it replays its AOF); a worker
 * killed by a signal, or one that exited while Redis could not be reached,
 * is started again after a pause that doubles from 1 s to 30 s with each
 * quick death (a run of 60 s resets it). A worker that exited 0, or with an
 * error while Redis answered, left for its own reason (a broken GPU, a
 * harness that cannot start) and is not restarted. Every death and restart
 * is logged on stderr with its cause: the exit status, and for Redis the end
 * of its log. */
#ifndef KG_FLEET_H
#define KG_FLEET_H

#include <pthread.h>
#include <sys/types.h>

#include "common/error.h"
#include "env/redis_auto.h"

#define KG_FLEET_MAX 64

typedef struct {
    char redis[2048];            /* a URL, or "auto" */
    int redis_tcp;               /* auto: listen on TCP for other nodes (kg_redis_auto_start_tcp), not a unix socket */
    char device[8];              /* "auto" | "cuda" | "cpu", given to every worker */
    int gpus[KG_FLEET_MAX];      /* one worker per GPU index */
    int n_gpus;
    int n_cpu_workers;           /* when n_gpus is 0: how many workers (1) */
    double gpu_memory_gb;        /* > 0: each worker's GPU memory cap, as DK_KG_GPU_MEMORY_GB in its environment */
    char exe[4096];              /* kernelgym; "" finds it (see kg_fleet_find_exe) */
    const char *const *extra;    /* more worker flags, passed as they are */
    int n_extra;
} kg_fleet_config;

typedef struct {
    kg_redis_auto redis;
    int own_redis;
    char url[2048];
    int n;
    pid_t pid[KG_FLEET_MAX];
    char label[KG_FLEET_MAX][32]; /* "gpu0", "cpu1" */
    /* supervision */
    kg_fleet_config cfg;             /* what each worker was started with */
    int gpu[KG_FLEET_MAX];           /* -1 for a CPU worker */
    double started[KG_FLEET_MAX];    /* dk_now() at the worker's last start */
    double restart_at[KG_FLEET_MAX]; /* > 0: a dead worker due to start again then */
    double backoff[KG_FLEET_MAX];    /* the next pause before a restart */
    int worker_restarts, redis_restarts;
    double redis_retry_at;           /* > 0: a failed Redis restart is tried again then */
    /* kg_fleet_watch's thread */
    pthread_t watcher;
    int watching;
    volatile int watch_quit;
} kg_fleet;

void kg_fleet_config_default(kg_fleet_config *c);
/* The kernelgym executable: this program when it is kernelgym, else
 * "kernelgym" next to it or one folder up, in $DK_BUILD, or in PATH. */
int kg_fleet_find_exe(char *out, size_t n);

dk_status kg_fleet_start(kg_fleet *f, const kg_fleet_config *c);
/* Supervises as above; returns how many workers run or are due to restart
 * (0: the fleet is over). */
int kg_fleet_check(kg_fleet *f);
/* Runs kg_fleet_check every 0.5 s on a thread of its own, for a caller (the
 * trainer) that has no loop of its own to do it; kg_fleet_stop ends it. */
dk_status kg_fleet_watch(kg_fleet *f);
/* SIGTERM to every worker, up to grace_s for them to leave, then SIGKILL;
 * then the private Redis, if any, is stopped. */
void kg_fleet_stop(kg_fleet *f, double grace_s);

#endif
