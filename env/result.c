/* result.c: result JSON <-> kg_result. Lenient about optional fields (null or
 * absent mean "unknown"), strict about the status, which every consumer
 * branches on. */
#include "env/result.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char *status_names[KG_STATUS_COUNT] = {
    "pending", "ok", "compile_error", "incorrect", "hack", "timeout", "crash", "error",
};

const char *kg_status_name(kg_status s) {
    return (s >= 0 && s < KG_STATUS_COUNT) ? status_names[s] : "unknown";
}

static const char *rule_names[KG_RULE_COUNT] = {"none", "tolerance", "fp64_budget"};

const char *kg_correct_rule_name(kg_correct_rule c) {
    return (c >= 0 && c < KG_RULE_COUNT) ? rule_names[c] : "unknown";
}

/* An absent or unknown rule reads as none: the field is optional. */
static kg_correct_rule correct_rule_of(const cJSON *v) {
    for (int i = 0; i < KG_RULE_COUNT; i++)
        if (cJSON_IsString(v) && strcmp(v->valuestring, rule_names[i]) == 0) return (kg_correct_rule)i;
    return KG_RULE_NONE;
}

dk_status kg_status_parse(const char *s, kg_status *out) {
    for (int i = 0; i < KG_STATUS_COUNT; i++)
        if (s && strcmp(s, status_names[i]) == 0) {
            *out = (kg_status)i;
            return DK_OK;
        }
    return dk_fail(DK_ERR_RUNTIME, "unknown result status '%s'", s ? s : "(null)");
}

/* Unset strings point here, so an initialised or freed result owns no
 * memory and its strings are still safe to print. */
static char empty_str[1] = "";

static void free_str(char *s) {
    if (s != empty_str) free(s);
}

void kg_result_init(kg_result *r) {
    memset(r, 0, sizeof *r);
    r->status = KG_STATUS_PENDING;
    r->max_abs_diff = NAN;
    r->error_ratio = NAN;
    r->speedup = NAN;
    r->coverage = NAN;
    r->reward = NAN;
    r->wall_ms = NAN;
    r->feedback = r->error = r->worker = empty_str;
}

void kg_result_free(kg_result *r) {
    for (int i = 0; i < r->n_hack_reasons; i++) free(r->hack_reasons[i]);
    free(r->hack_reasons);
    for (int i = 0; i < r->n_kernels; i++) free(r->kernels[i].name);
    free(r->kernels);
    free_str(r->feedback);
    free_str(r->error);
    free_str(r->worker);
    free(r->json);
    kg_result_init(r);
}

static double num_or_nan(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int flag(const cJSON *o, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key)); }

static char *str_or_empty(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return dk_strdup(cJSON_IsString(v) ? v->valuestring : "");
}

static void parse_timing(const cJSON *o, kg_timing *t) {
    memset(t, 0, sizeof *t);
    if (!cJSON_IsObject(o)) return;
    t->mean = num_or_nan(o, "mean");
    if (isnan(t->mean)) return;
    t->valid = 1;
    t->median = num_or_nan(o, "median");
    t->std = num_or_nan(o, "std");
    t->min = num_or_nan(o, "min");
    t->max = num_or_nan(o, "max");
    double n = num_or_nan(o, "trials");
    t->trials = isnan(n) ? 0 : (int)n;
}

static void parse_profile(const cJSON *p, kg_result *r) {
    if (!cJSON_IsObject(p)) return;
    r->has_profile = 1;
    r->coverage = num_or_nan(p, "coverage");
    r->side_streams = flag(p, "side_streams");
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(p, "kernels");
    int n = cJSON_IsArray(ks) ? cJSON_GetArraySize(ks) : 0;
    r->kernels = dk_calloc((size_t)(n ? n : 1), sizeof(kg_kernel));
    const cJSON *k;
    cJSON_ArrayForEach(k, ks) {
        if (!cJSON_IsObject(k)) continue;
        kg_kernel *kk = &r->kernels[r->n_kernels++];
        kk->name = str_or_empty(k, "name");
        kk->time_us = num_or_nan(k, "time_us");
        double calls = num_or_nan(k, "calls");
        kk->calls = isnan(calls) ? 0 : (int)calls;
        kk->candidate = flag(k, "candidate");
    }
}

dk_status kg_result_from_json(const cJSON *o, kg_result *r) {
    kg_result_free(r);
    if (!cJSON_IsObject(o)) return dk_fail(DK_ERR_RUNTIME, "result: not a JSON object");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
    if (!cJSON_IsString(st)) return dk_fail(DK_ERR_RUNTIME, "result: missing string field 'status'");
    kg_status status;
    if (kg_status_parse(st->valuestring, &status) != DK_OK || status == KG_STATUS_PENDING)
        return dk_fail(DK_ERR_RUNTIME, "result: field 'status' has unknown value '%s'", st->valuestring);
    r->status = status;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (cJSON_IsString(id)) snprintf(r->id, sizeof r->id, "%s", id->valuestring);
    r->compiled = flag(o, "compiled");
    r->correct = flag(o, "correct");
    const cJSON *hack = cJSON_GetObjectItemCaseSensitive(o, "hack");
    if (cJSON_IsObject(hack)) {
        r->hack = flag(hack, "detected");
        const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(hack, "reasons");
        int n = cJSON_IsArray(reasons) ? cJSON_GetArraySize(reasons) : 0;
        r->hack_reasons = dk_calloc((size_t)(n ? n : 1), sizeof(char *));
        const cJSON *s;
        cJSON_ArrayForEach(s, reasons) {
            if (cJSON_IsString(s)) r->hack_reasons[r->n_hack_reasons++] = dk_strdup(s->valuestring);
        }
    }
    if (status == KG_STATUS_HACK) r->hack = 1;
    r->max_abs_diff = num_or_nan(o, "max_abs_diff");
    r->correct_rule = correct_rule_of(cJSON_GetObjectItemCaseSensitive(o, "correct_rule"));
    r->error_ratio = num_or_nan(o, "error_ratio");
    parse_timing(cJSON_GetObjectItemCaseSensitive(o, "runtime_ms"), &r->runtime);
    parse_timing(cJSON_GetObjectItemCaseSensitive(o, "ref_runtime_ms"), &r->ref_runtime);
    r->speedup = num_or_nan(o, "speedup");
    const cJSON *ta = cJSON_GetObjectItemCaseSensitive(o, "timing_available");
    r->timing_available = cJSON_IsBool(ta) ? cJSON_IsTrue(ta) : (r->runtime.valid && !isnan(r->speedup));
    if (!r->timing_available) r->speedup = NAN;
    parse_profile(cJSON_GetObjectItemCaseSensitive(o, "profile"), r);
    r->reward = num_or_nan(o, "reward");
    r->wall_ms = num_or_nan(o, "wall_ms");
    r->feedback = str_or_empty(o, "feedback");
    r->error = str_or_empty(o, "error");
    r->worker = str_or_empty(o, "worker");
    r->json = cJSON_PrintUnformatted(o);
    if (!r->json) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    return DK_OK;
}

dk_status kg_result_parse(const char *json, kg_result *r) {
    cJSON *o = cJSON_Parse(json);
    if (!o) {
        kg_result_free(r);
        return dk_fail(DK_ERR_RUNTIME, "result: invalid JSON near '%.40s'", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : json);
    }
    dk_status s = kg_result_from_json(o, r);
    cJSON_Delete(o);
    return s;
}

cJSON *kg_result_make_error(const char *id, kg_status status, const char *error) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id ? id : "");
    cJSON_AddStringToObject(o, "status", kg_status_name(status));
    cJSON_AddBoolToObject(o, "compiled", 0);
    cJSON_AddBoolToObject(o, "correct", 0);
    cJSON *hack = cJSON_AddObjectToObject(o, "hack");
    cJSON_AddBoolToObject(hack, "detected", 0);
    cJSON_AddArrayToObject(hack, "reasons");
    cJSON_AddNullToObject(o, "max_abs_diff");
    cJSON_AddNullToObject(o, "runtime_ms");
    cJSON_AddNullToObject(o, "ref_runtime_ms");
    cJSON_AddNullToObject(o, "speedup");
    cJSON_AddNullToObject(o, "profile");
    cJSON_AddStringToObject(o, "error", error ? error : "");
    cJSON_AddBoolToObject(o, "timing_available", 0);
    return o;
}
