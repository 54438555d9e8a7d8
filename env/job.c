/* job.c: job defaults and the job JSON line (the harness contract's field
 * names, so the Python side reads it as is). */
#include "env/job.h"

#include <math.h>
#include <string.h>

void kg_job_options_default(kg_job_options *o) {
    memset(o, 0, sizeof *o);
    o->timeout_s = 120;
    o->correctness_trials = 5;
    o->perf_trials = 100;
    o->warmup = 3;
    o->atol = NAN;
    o->rtol = NAN;
    strcpy(o->reference_mode, "eager");
    o->profile = 1;
    o->strict = 0;
    o->max_source_bytes = 1000000;
    o->memory_limit_gb = 32;
    o->cpu_time_s = 600;
    o->budget_k = 8;
    o->sleep_s = 0;
}

const kg_job_option_range kg_job_option_ranges[] = {
    {"timeout_s", 1, 3600},         {"correctness_trials", 1, 100}, {"perf_trials", 1, 10000},
    {"warmup", 0, 1000},            {"max_source_bytes", 1, 1e8},   {"memory_limit_gb", 0.5, 4096},
    {"cpu_time_s", 1, 86400},       {"budget_k", 1, 1e6},
};
const int kg_job_n_option_ranges = sizeof kg_job_option_ranges / sizeof kg_job_option_ranges[0];

const kg_job_option_range *kg_job_option_range_of(const char *name) {
    for (int i = 0; i < kg_job_n_option_ranges; i++)
        if (strcmp(kg_job_option_ranges[i].name, name) == 0) return &kg_job_option_ranges[i];
    DK_ABORT("job option '%s' has no range in env/job.c", name);
}

void kg_job_init(kg_job *job) {
    memset(job, 0, sizeof *job);
    job->kind = KG_JOB_EVAL;
    kg_job_options_default(&job->opt);
}

const char *const kg_job_kind_names[KG_N_JOB_KINDS] = {
    [KG_JOB_EVAL] = "eval", [KG_JOB_ECHO] = "echo", [KG_JOB_SLEEP] = "sleep"};

const char *kg_job_kind_name(kg_job_kind k) {
    return ((unsigned)k < KG_N_JOB_KINDS) ? kg_job_kind_names[k] : "unknown";
}

dk_status kg_job_kind_parse(const char *s, kg_job_kind *out) {
    for (int k = 0; k < KG_N_JOB_KINDS; k++)
        if (s && strcmp(s, kg_job_kind_names[k]) == 0) {
            *out = (kg_job_kind)k;
            return DK_OK;
        }
    return dk_fail(DK_ERR_USAGE, "unknown job kind '%s' (expected eval, echo or sleep)", s ? s : "(null)");
}

static void add_number_or_null(cJSON *o, const char *key, double v) {
    if (isnan(v))
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, v);
}

static cJSON *options_to_json(const kg_job_options *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "timeout_s", o->timeout_s);
    cJSON_AddNumberToObject(j, "correctness_trials", o->correctness_trials);
    cJSON_AddNumberToObject(j, "perf_trials", o->perf_trials);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    add_number_or_null(j, "atol", o->atol);
    add_number_or_null(j, "rtol", o->rtol);
    cJSON_AddStringToObject(j, "reference_mode", o->reference_mode);
    cJSON_AddBoolToObject(j, "profile", o->profile);
    cJSON_AddBoolToObject(j, "strict", o->strict);
    cJSON_AddNumberToObject(j, "max_source_bytes", (double)o->max_source_bytes);
    cJSON_AddNumberToObject(j, "memory_limit_gb", o->memory_limit_gb);
    cJSON_AddNumberToObject(j, "cpu_time_s", o->cpu_time_s);
    cJSON_AddNumberToObject(j, "budget_k", o->budget_k);
    return j;
}

dk_status kg_job_to_json(const kg_job *job, const char *id, const char *client, cJSON **out) {
    *out = NULL;
    if (!id || !*id) return dk_fail(DK_ERR_USAGE, "job: empty id");
    if (strlen(id) >= KG_ID_LEN) return dk_fail(DK_ERR_USAGE, "job '%s': id longer than %d bytes", id, KG_ID_LEN - 1);
    if (job->kind == KG_JOB_EVAL && (!job->task_source || !job->candidate_source))
        return dk_fail(DK_ERR_USAGE, "job '%s': an eval job needs both task_source and candidate_source", id);
    if (job->opt.timeout_s <= 0 || !isfinite(job->opt.timeout_s))
        return dk_fail(DK_ERR_USAGE, "job '%s': timeout_s must be positive, got %g", id, job->opt.timeout_s);
    if (job->kind == KG_JOB_SLEEP && (job->opt.sleep_s < 0 || !isfinite(job->opt.sleep_s)))
        return dk_fail(DK_ERR_USAGE, "job '%s': sleep_s must be >= 0, got %g", id, job->opt.sleep_s);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "kind", kg_job_kind_name(job->kind));
    if (client) cJSON_AddStringToObject(j, "client", client);
    if (job->kind == KG_JOB_EVAL) {
        cJSON_AddStringToObject(j, "task_source", job->task_source);
        cJSON_AddStringToObject(j, "candidate_source", job->candidate_source);
        cJSON_AddStringToObject(j, "task_name", job->task_name ? job->task_name : "");
    }
    if (job->device) cJSON_AddStringToObject(j, "device", job->device);
    if (job->kind == KG_JOB_ECHO) cJSON_AddStringToObject(j, "payload", job->payload ? job->payload : "");
    cJSON *opt = options_to_json(&job->opt);
    if (job->kind == KG_JOB_SLEEP) cJSON_AddNumberToObject(opt, "sleep_s", job->opt.sleep_s);
    cJSON_AddItemToObject(j, "options", opt);
    *out = j;
    return DK_OK;
}
