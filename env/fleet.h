/* fleet.h: a KernelGym fleet on one machine, as `kernelgym serve` and
 * `kernelgym score --redis auto` run it (and a trainer can): Redis (a private
 * one for "auto", see redis_auto.h) plus one `kernelgym worker` process per
 * GPU. Workers are separate programs (fork + exec of the kernelgym
 * executable), so the caller's state (CUDA, MPI, threads, sockets) never
 * leaks into them; each gets the Redis URL through the KERNELGYM_REDIS
 * environment variable, never on a command line where `ps` would show the
 * password. They run in their own process groups and get SIGTERM if the
 * caller dies; kg_fleet_stop asks them to leave (a worker gives an
 * unfinished job back) before stopping a private Redis. */
#ifndef KG_FLEET_H
#define KG_FLEET_H

#include <sys/types.h>

#include "common/error.h"
#include "env/redis_auto.h"

#define KG_FLEET_MAX 64

typedef struct {
    char redis[2048];            /* a URL, or "auto" */
    char device[8];              /* "auto" | "cuda" | "cpu", given to every worker */
    int gpus[KG_FLEET_MAX];      /* one worker per GPU index */
    int n_gpus;
    int n_cpu_workers;           /* when n_gpus is 0: how many workers (1) */
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
} kg_fleet;

void kg_fleet_config_default(kg_fleet_config *c);
/* The kernelgym executable: this program when it is kernelgym, else
 * "kernelgym" next to it or one folder up, in $DK_BUILD, or in PATH. */
int kg_fleet_find_exe(char *out, size_t n);

dk_status kg_fleet_start(kg_fleet *f, const kg_fleet_config *c);
/* Reaps workers that exited (logging how on stderr); returns how many run. */
int kg_fleet_check(kg_fleet *f);
/* SIGTERM to every worker, up to grace_s for them to leave, then SIGKILL;
 * then the private Redis, if any, is stopped. */
void kg_fleet_stop(kg_fleet *f, double grace_s);

#endif
