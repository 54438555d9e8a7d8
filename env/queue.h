/* queue.h: the Redis layout of the KernelGym queue (docs/DESIGN.md §10) and its
 * operations. Every name starts with "kg:".
 *
 *   kg:job:<id>           the job JSON (string; deleted when completed)
 *   kg:queue              ids waiting (list; clients LPUSH, workers take from the right)
 *   kg:processing:<w>     the id worker w is running (list; BLMOVE from kg:queue)
 *   kg:result:<id>        the result JSON (string, with a TTL)
 *   kg:done:<client>      ids of the client's finished jobs (list; the client BLPOPs)
 *   kg:hb:<w>             worker w's heartbeat (string with a TTL, SET PX)
 *   kg:workers            names of workers that may hold jobs (set)
 *   kg:reaper             lock so one reaper runs at a time (SET NX PX)
 *   kg:client:<client>    the client is alive (string with a TTL, refreshed while it waits)
 *
 * A job moves queue -> processing atomically, so at every moment it is in
 * exactly one list (or completed). A worker completes a job in one MULTI/EXEC:
 * store the result, push the id to the client's done list, drop it from
 * processing, delete the job. The reaper (every worker and waiting client runs
 * it now and then) moves the processing lists of workers whose heartbeat
 * expired back to the head of the queue, one LMOVE per id, so a dying reaper
 * loses nothing. A worker that was only slow may then finish a job that
 * another worker also runs: the client keeps the first result and ignores the
 * duplicate notification. */
#ifndef KG_QUEUE_H
#define KG_QUEUE_H

#include <hiredis/hiredis.h>

#include "common/error.h"
#include "env/job.h"

#define KG_NAME_LEN 128 /* worker and client names, NUL included */

/* ---- clients -------------------------------------------------------------- */
/* Stores n jobs and queues their ids in one pipeline; a job key expires after
 * job_ttl_s so the jobs of a vanished client do not stay forever. */
dk_status kg_queue_push(redisContext *c, int n, const char *const *ids, const char *const *jsons, double job_ttl_s);
/* Blocks up to block_s on the client's done list (block_s <= 0: only looks);
 * *got = 0 on timeout. */
dk_status kg_queue_next_done(redisContext *c, const char *client, double block_s, char id[KG_ID_LEN], int *got);
/* The stored result (malloc'd) or NULL when it is gone; deletes it when
 * forget != 0 (the client keeps its own copy). */
dk_status kg_queue_fetch_result(redisContext *c, const char *id, int forget, char **json);
dk_status kg_queue_drop_client(redisContext *c, const char *client); /* deletes the done list and alive mark */
/* Marks the client alive for ttl_s (kg:client:<client>). */
dk_status kg_queue_client_alive(redisContext *c, const char *client, double ttl_s);
/* Deletes the done lists of clients no longer marked alive, and the results
 * those lists name: nobody is left to collect them. *n_results (may be NULL)
 * counts the results deleted. */
dk_status kg_queue_sweep_orphans(redisContext *c, int *n_results);

/* ---- workers -------------------------------------------------------------- */
dk_status kg_queue_heartbeat(redisContext *c, const char *worker, double ttl_s);
/* Moves the next id to the worker's processing list, blocking up to block_s;
 * *got = 0 on timeout. */
dk_status kg_queue_take(redisContext *c, const char *worker, double block_s, char id[KG_ID_LEN], int *got);
/* The job JSON (malloc'd), or NULL when the job was completed meanwhile (by
 * a worker it had been given to before a reap). */
dk_status kg_queue_job(redisContext *c, const char *id, char **json);
dk_status kg_queue_complete(redisContext *c, const char *worker, const char *id, const char *client,
                            const char *result_json, double result_ttl_s);
/* Drops an id from the worker's processing list without a result (its job is gone). */
dk_status kg_queue_discard(redisContext *c, const char *worker, const char *id);
/* A leaving worker: its unfinished jobs back to the head of the queue, its
 * heartbeat and membership removed. */
dk_status kg_queue_leave(redisContext *c, const char *worker);

/* ---- everyone ------------------------------------------------------------- */
/* Returns the jobs of workers whose heartbeat expired to the queue when the
 * lock is free (held lock_s). *n_returned counts the ids moved (may be NULL). */
dk_status kg_queue_reap(redisContext *c, const char *who, double lock_s, int *n_returned);

typedef struct {
    long long queued;     /* ids in kg:queue */
    long long workers;    /* members of kg:workers */
    long long alive;      /* of those, with a live heartbeat */
    long long processing; /* ids in all processing lists */
} kg_queue_stats;
dk_status kg_queue_get_stats(redisContext *c, kg_queue_stats *st);

#endif
