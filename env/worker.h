/* worker.h: one KernelGym worker: takes jobs from the Redis queue one at a
 * time, evaluates them (evaluator.h) and completes them (queue.h), while a
 * heartbeat thread with its own connection keeps kg:hb:<name> alive even
 * through a long job. Every reap interval (half the heartbeat TTL) it also
 * runs the reaper, so the jobs of dead workers come back as long as any
 * worker or client is around.
 *
 * kg_worker_run returns:
 *   DK_OK          after *stop was set (a signal); an unfinished job goes back
 *                  to the queue;
 *   DK_ERR_RUNTIME when the harness server cannot start, Redis stays
 *                  unreachable for reconnect_s, or a gpu_check after a crash
 *                  found the GPU broken: the worker leaves the fleet and its
 *                  process should exit non-zero so the operator (or the fleet
 *                  supervisor) sees a GPU that needs attention;
 *   DK_ERR_USAGE   for a bad URL or setting. */
#ifndef KG_WORKER_H
#define KG_WORKER_H

#include <signal.h>

#include "common/error.h"
#include "env/evaluator.h"
#include "env/queue.h"

typedef struct {
    char redis_url[2048];
    char name[KG_NAME_LEN]; /* unique worker name; "" makes "<host>:gpuN:<pid>" */
    kg_evaluator_config eval;
    double heartbeat_ttl_s; /* kg:hb TTL; refreshed every third of it (15) */
    double block_s;         /* BLMOVE block, so *stop is noticed (1) */
    double result_ttl_s;    /* lifetime of a stored result (86400) */
    double reconnect_s;     /* how long Redis may be unreachable (60) */
    int lazy_server;        /* start the harness on the first eval job, not at start-up */
} kg_worker_config;

void kg_worker_config_default(kg_worker_config *c);
dk_status kg_worker_run(const kg_worker_config *c, volatile sig_atomic_t *stop);

#endif
