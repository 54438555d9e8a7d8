/* result.h: a KernelGym result parsed into C (docs/DESIGN.md §11), as
 * the trainer and the scorer read it. The raw JSON string is kept so nothing
 * the harness reports is lost (phases_ms and anything this struct does not
 * model). */
#ifndef KG_RESULT_H
#define KG_RESULT_H

#include <cjson/cJSON.h>

#include "common/error.h"
#include "env/job.h"

typedef enum {
    KG_STATUS_PENDING = 0, /* no result yet: the wait's deadline passed first */
    KG_STATUS_OK,
    KG_STATUS_COMPILE_ERROR,
    KG_STATUS_INCORRECT,
    KG_STATUS_HACK,
    KG_STATUS_TIMEOUT,
    KG_STATUS_CRASH,
    KG_STATUS_ERROR,
} kg_status;
#define KG_STATUS_COUNT (KG_STATUS_ERROR + 1)

/* Which rule accepted the outputs (`correct_rule`): the task's atol/rtol
 * against the reference in its own dtype, or the error budget against its
 * fp64 evaluation (env/harness/error_budget.py); NONE when neither did or the
 * harness did not say. */
typedef enum { KG_RULE_NONE = 0, KG_RULE_TOLERANCE, KG_RULE_FP64_BUDGET } kg_correct_rule;
#define KG_RULE_COUNT (KG_RULE_FP64_BUDGET + 1)

typedef struct {
    int valid; /* 0 when the harness reported null (no timing) */
    double mean, median, std, min, max;
    int trials;
} kg_timing;

typedef struct {
    char *name;
    double time_us;
    int calls;
    int candidate; /* launched by the candidate's own code (its Triton kernels) */
} kg_kernel;

typedef struct {
    char id[KG_ID_LEN];
    kg_status status;
    int compiled, correct;
    int hack;
    int n_hack_reasons;
    char **hack_reasons;
    double max_abs_diff; /* NAN when unknown */
    kg_correct_rule correct_rule;
    double error_ratio; /* largest error / fp64 budget; NAN without an fp64 reference */
    kg_timing runtime, ref_runtime;
    double speedup; /* NAN when timing is unavailable */
    int timing_available;
    int has_profile;
    double coverage; /* NAN without a profile */
    int side_streams;
    int n_kernels;
    kg_kernel *kernels; /* as reported (the harness sorts by time) */
    double reward;      /* NAN when no reward was attached */
    double wall_ms;     /* worker wall time for the job, NAN when absent */
    char *feedback;     /* "" when absent; never NULL */
    char *error;
    char *worker;
    char *json; /* the whole result object, compact */
} kg_result;

const char *kg_status_name(kg_status s);
const char *kg_correct_rule_name(kg_correct_rule c); /* "none", "tolerance", "fp64_budget" */
/* Parses "ok", "compile_error", ...; unknown names fail. */
dk_status kg_status_parse(const char *s, kg_status *out);

/* PENDING, NANs, empty strings; owns no memory, so a result that was only
 * initialised needs no kg_result_free. */
void kg_result_init(kg_result *r);
void kg_result_free(kg_result *r); /* frees the strings and arrays, back to init */

/* Fills r from a result object or string. Missing optional fields take their
 * "unknown" values; a missing or unknown status fails, naming the field. */
dk_status kg_result_from_json(const cJSON *obj, kg_result *r);
dk_status kg_result_parse(const char *json, kg_result *r);

/* A result object for a failure found outside the harness (a dead server, an
 * unreadable file): status, compiled/correct false, no hack, the error text. */
cJSON *kg_result_make_error(const char *id, kg_status status, const char *error);

/* True for the statuses that mean "compiled, correct and no hack". */
static inline int kg_result_passed(const kg_result *r) {
    return r->status == KG_STATUS_OK && r->compiled && r->correct && !r->hack;
}

#endif
