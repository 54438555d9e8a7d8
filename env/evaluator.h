/* evaluator.h: one job in, one finished result out. Owns the warm harness
 * server (started on first need, restarted after it hangs or dies), completes
 * echo/sleep jobs itself, and decorates every result with the fields the C
 * side adds (docs/DESIGN.md §11): "reward", "feedback", "worker" and "wall_ms".
 * Used by the Redis worker and by the in-process client.
 *
 * Fault handling: the server gets timeout_s + margin_s for a job. When it
 * does not answer, its process group is killed and the job's result is
 * status "timeout". When it dies mid-job (a fault outside the candidate: the
 * server runs no candidate code), the job runs again on a fresh server, at
 * most twice more; only a death that repeats makes it "crash" (the result's
 * "infra_retries" counts the re-runs). After any crash result on a GPU
 * device the server is asked for a gpu_check; if the GPU no longer works,
 * kg_evaluator_gpu_broken() says so and the caller (the worker) stops. */
#ifndef KG_EVALUATOR_H
#define KG_EVALUATOR_H

#include <signal.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "env/feedback.h"
#include "env/reward.h"
#include "env/server_proc.h"

/* Where jobs are evaluated: auto (cuda when the server sees a GPU), cpu
 * (through the Triton interpreter, no timing) or cuda. The names are the
 * values of the --device flag and of the run config's kernelgym.device key;
 * configs hold the enum, the evaluator and the fleet the name. */
typedef enum { KG_DEVICE_AUTO = 0, KG_DEVICE_CPU = 1, KG_DEVICE_CUDA = 2 } kg_device;
enum { KG_N_DEVICES = KG_DEVICE_CUDA + 1 };
extern const char *const kg_device_names[KG_N_DEVICES];

typedef struct {
    char device[8]; /* a kg_device_names entry */
    int gpu;        /* GPU index among the visible ones; -1: leave CUDA_VISIBLE_DEVICES alone */
    char name[128]; /* reported as "worker", e.g. "host:gpu0" */
    kg_reward_config reward;
    kg_feedback_config feedback;
    kg_server_config server;
    double margin_s;     /* slack over the job's timeout_s before the server is killed (60) */
    double gpu_check_s;  /* limit for a gpu_check request (120) */
    int verbose;         /* logs each job on stderr */
} kg_evaluator_config;

/* Defaults: device auto, gpu -1, name "<host>:local", reward profile. */
void kg_evaluator_config_default(kg_evaluator_config *c);

typedef struct kg_evaluator kg_evaluator;

kg_evaluator *kg_evaluator_new(const kg_evaluator_config *c);
void kg_evaluator_free(kg_evaluator *e); /* stops the server */

/* Starts the server now (a worker warms up before taking jobs); fails when it
 * cannot start, which no job can fix. */
dk_status kg_evaluator_start(kg_evaluator *e);

/* Evaluates a job object (the job JSON of job.h). *result is the finished
 * result object (caller deletes it). A bad job is a result (status error),
 * not a failure; the call fails only when the server cannot be started at
 * all. When *stop becomes nonzero mid-job the server is killed and *result is
 * NULL: the job was not evaluated and should be given back. */
dk_status kg_evaluator_run(kg_evaluator *e, const cJSON *job, const volatile sig_atomic_t *stop, cJSON **result);

/* Nonzero after a gpu_check failed; *why (may be NULL) gets the reason. */
int kg_evaluator_gpu_broken(const kg_evaluator *e, const char **why);

/* Adds reward, feedback, worker and wall_ms to a result object. */
void kg_evaluator_decorate(const kg_evaluator_config *c, cJSON *result, double wall_ms);

/* The source's first byte offset that breaks UTF-8, or -1 when it is valid. */
long kg_utf8_invalid_at(const char *s);

#endif
