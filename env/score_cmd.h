/* score_cmd.h: `kernelgym score` end to end, after its flags are read: list
 * the tasks and match their solutions (score.h), queue one eval job per
 * solution, evaluate them in this process, on a private fleet or through a
 * running one, and report Fast@p. kernelgym_main.c parses the flags into a
 * kg_score_config and calls kg_score_run. */
#ifndef KG_SCORE_CMD_H
#define KG_SCORE_CMD_H

#include <signal.h>

#include "common/error.h"
#include "env/evaluator.h"
#include "env/fleet.h"
#include "env/job.h"

/* Where jobs run: redis NULL evaluates them here with `eval`; "auto" starts
 * `fleet` (Redis and its workers) for the run; anything else is the URL of a
 * running fleet's Redis. */
typedef struct {
    const char *redis;
    kg_evaluator_config eval;
    kg_fleet_config fleet;
} kg_jobs_where;

/* Evaluates n jobs where w says, printing "<label>: k/n evaluated" on stderr;
 * stops waiting after wait_s seconds or when *stop becomes nonzero (those
 * results stay KG_STATUS_PENDING). *n_done counts the finished ones. Fails
 * when the fleet or Redis cannot be reached or every worker exits. Shared by
 * `kernelgym score` and `kernelgym audit` (env/audit.h). */
dk_status kg_jobs_evaluate(const kg_jobs_where *w, kg_job *jobs, int n, kg_result *res, double wait_s,
                           const volatile sig_atomic_t *stop, const char *label, int *n_done);

typedef struct {
    const char *tasks_dir, *solutions_dir;
    kg_jobs_where where;
    kg_job_options opt; /* every job's options */
    double wait_s;      /* stop waiting after this many seconds (INFINITY: never) */
    const char *json_out; /* also write the JSON report here (NULL: no file) */
} kg_score_config;

/* Prints the per-task table and the Fast@p line on stdout, progress on
 * stderr; solutions not evaluated by the deadline, or before *stop becomes
 * nonzero, count as not fast. Fails when a folder cannot be read or holds no
 * task, the fleet or Redis cannot be reached, every worker exits, or the
 * JSON report cannot be written (the table is printed first). */
dk_status kg_score_run(const kg_score_config *c, const volatile sig_atomic_t *stop);

#endif
