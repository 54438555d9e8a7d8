/* client.h: how the trainer (and the CLI) submit KernelGym jobs and collect
 * their results. Two modes behind one API:
 *
 *   kg_client_connect(url)   jobs go through Redis to whatever workers are
 *                            connected (queue.h); many at once, in parallel;
 *   kg_client_local(cfg)     no Redis: the client owns one harness server and
 *                            runs its jobs one at a time inside kg_client_wait.
 *
 * Typical use, N jobs keyed by index:
 *
 *   kg_result res[N];
 *   kg_client_submit_batch(c, jobs, N, res);      // res[i]: pending, with job i's id
 *   kg_client_wait(c, res, N, 600.0, &n_done);    // fills res[i] as results arrive
 *   ... res[i].status, .reward, .feedback ...; kg_result_free(&res[i]);
 *
 * When the deadline passes first, kg_client_wait still returns DK_OK and the
 * unfinished slots keep status KG_STATUS_PENDING; calling it again on the same
 * array continues the wait (a result that arrives for a job nobody is waiting
 * for is kept for later). Each job completes at most once from the client's
 * point of view: a second notification for a job already delivered (a job a
 * reaper re-queued from a worker that was only slow) is ignored. Waiting
 * clients also run the reaper, so the jobs of dead workers return to the
 * queue even when no other worker is alive to do it. In local mode a job that
 * has started runs to its end (bounded by its own timeout_s); the deadline
 * only keeps the next ones from starting.
 *
 * Redis mode rides out Redis restarts: a failed command makes the client
 * reconnect, pausing between attempts with jittered exponential backoff
 * (50 ms doubling to 2 s), for up to reconnect_s from the start of the
 * outage (KG_CLIENT_RECONNECT_S unless kg_client_set_reconnect says
 * otherwise). After each reconnect it looks up every job still without a
 * result: one whose result is stored is notified again, one Redis has
 * forgotten (a restart without persistence) is queued again. Calls fail
 * only once an outage outlasts reconnect_s; kg_client_wait returns at its
 * own deadline during an outage, and the next call goes on reconnecting.
 *
 * A client is not thread-safe: use one per thread. Connecting ignores SIGPIPE
 * process-wide (when it still has its default action), so a dropped socket is
 * an error, not a dead process. */
#ifndef KG_CLIENT_H
#define KG_CLIENT_H

#include "common/error.h"
#include "env/evaluator.h"
#include "env/job.h"
#include "env/result.h"

typedef struct kg_client kg_client;

#define KG_CLIENT_RECONNECT_S 300.0 /* default: how long an outage may last */

typedef struct {
    long outages;     /* times the connection was lost */
    long reconnects;  /* times it came back */
    long resubmitted; /* jobs queued again because Redis had lost them */
    double down_s;    /* seconds spent without a connection, in all */
} kg_client_stats;

/* Redis mode. NULL and *st set (naming the redacted URL) when Redis cannot be
 * reached or refuses the password. */
kg_client *kg_client_connect(const char *url, dk_status *st);
/* In-process mode; cfg NULL takes kg_evaluator_config_default. The harness
 * server starts with the first eval job. */
kg_client *kg_client_local(const kg_evaluator_config *cfg, dk_status *st);
void kg_client_close(kg_client *c);

/* How long an outage may last before calls fail (>= 0; 0: one attempt). */
void kg_client_set_reconnect(kg_client *c, double seconds);
void kg_client_get_stats(const kg_client *c, kg_client_stats *out);
/* 1 while a Redis-mode client is without its connection. */
int kg_client_is_down(const kg_client *c);

/* "<host>-<pid>-<random>": the done list is kg:done:<name>. */
const char *kg_client_name(const kg_client *c);

/* Queues one job; its id goes to id_out. */
dk_status kg_client_submit(kg_client *c, const kg_job *job, char id_out[KG_ID_LEN]);
/* Queues n jobs in one round trip; out[i] is overwritten (not freed) with a
 * pending result holding job i's id. */
dk_status kg_client_submit_batch(kg_client *c, const kg_job *jobs, int n, kg_result *out);
/* Waits up to timeout_s (>= 0; INFINITY waits for ever) until every pending
 * out[i] holds the result of the job out[i].id. *n_done (may be NULL) counts
 * the slots that are not pending on return. Fails for a pending id this
 * client never submitted or already returned, or when Redis is lost. */
dk_status kg_client_wait(kg_client *c, kg_result *out, int n, double timeout_s, int *n_done);
/* submit_batch + wait. */
dk_status kg_client_run(kg_client *c, const kg_job *jobs, int n, double timeout_s, kg_result *out, int *n_done);

#endif
