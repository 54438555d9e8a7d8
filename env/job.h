/* job.h: a KernelGym job as a client builds it (docs/DESIGN.md §10): the task and
 * candidate sources plus evaluation options, serialised to the JSON line the
 * harness server reads. Besides "eval" two job kinds are completed by the C
 * worker itself without Python: "echo" (returns its payload) and "sleep"
 * (waits sleep_s, then returns). They exist to test the queue and to
 * health-check a fleet end to end without touching a GPU. */
#ifndef KG_JOB_H
#define KG_JOB_H

#include <cjson/cJSON.h>

#include "common/error.h"

#define KG_ID_LEN 96 /* job ids: "<client id>-<sequence>", NUL included */

typedef enum { KG_JOB_EVAL = 0, KG_JOB_ECHO, KG_JOB_SLEEP } kg_job_kind;
enum { KG_N_JOB_KINDS = KG_JOB_SLEEP + 1 };
/* The kinds' names ("eval", "echo", "sleep"), indexed by kg_job_kind: the
 * job JSON's "kind" and the values of `kernelgym submit --kind`. */
extern const char *const kg_job_kind_names[KG_N_JOB_KINDS];

typedef struct {
    double timeout_s;        /* wall clock for the whole evaluation in the child */
    int correctness_trials;  /* seeds with fresh inputs */
    int perf_trials;         /* timed trials */
    int warmup;              /* untimed warm-up calls */
    double atol, rtol;       /* NAN: the harness default for the output dtype */
    char reference_mode[16]; /* "eager" | "compile" */
    int profile;             /* CUPTI per-kernel table and coverage */
    int strict;              /* stricter anti-hack re-run from the start */
    long max_source_bytes;
    double memory_limit_gb;
    double cpu_time_s;
    double budget_k; /* K of the fp64 error budget (env/harness/error_budget.py) */
    double sleep_s; /* KG_JOB_SLEEP only */
} kg_job_options;

/* Strings are borrowed: they must outlive kg_job_to_json / kg_client_submit,
 * nothing longer, so a caller can point into its own buffers. */
typedef struct {
    kg_job_kind kind;
    const char *task_source;
    const char *candidate_source;
    const char *task_name; /* optional, e.g. "19_Gemm_ReLU" */
    const char *device;    /* optional "cuda" | "cpu"; the worker's own device wins */
    const char *payload;   /* KG_JOB_ECHO: returned unchanged as "echo" */
    kg_job_options opt;
} kg_job;

void kg_job_options_default(kg_job_options *o);

/* The range an option's value must lie in, [lo, hi], by its JSON name; the
 * flags of the kernelgym program check against it, and the harness
 * (env/harness/protocol.py, OPTION_BOUNDS) checks the same ranges, which
 * tests/unit/test_kg_protocol.py compares. */
typedef struct {
    const char *name; /* "timeout_s" */
    double lo, hi;
} kg_job_option_range;
extern const kg_job_option_range kg_job_option_ranges[];
extern const int kg_job_n_option_ranges;
/* The range of option `name`; aborts on a name the table lacks (a bug). */
const kg_job_option_range *kg_job_option_range_of(const char *name);
void kg_job_init(kg_job *job); /* kind eval, default options, no sources */

const char *kg_job_kind_name(kg_job_kind k);
dk_status kg_job_kind_parse(const char *s, kg_job_kind *out);

/* The job object sent to a worker: {"id", "kind", "client", "task_source", ...,
 * "options": {...}}. client may be NULL (local evaluation). Fails when an eval
 * job lacks a source. */
dk_status kg_job_to_json(const kg_job *job, const char *id, const char *client, cJSON **out);

#endif
