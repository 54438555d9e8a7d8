/* evaluator.c: see evaluator.h. */
#define _GNU_SOURCE
#include "env/evaluator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "env/proc_util.h"
#include "env/result.h"

struct kg_evaluator {
    kg_evaluator_config cfg;
    kg_server server;
    int gpu_broken;
    char gpu_why[512];
    char config_error[256]; /* a setting no job can fix, reported by start */
};

const char *const kg_device_names[KG_N_DEVICES] = {
    [KG_DEVICE_AUTO] = "auto", [KG_DEVICE_CPU] = "cpu", [KG_DEVICE_CUDA] = "cuda"};

void kg_evaluator_config_default(kg_evaluator_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->device, sizeof c->device, "auto");
    c->gpu = -1;
    char host[64];
    kg_hostname(host, sizeof host);
    snprintf(c->name, sizeof c->name, "%s:local", host);
    kg_reward_config_default(&c->reward, KG_REWARD_PROFILE);
    kg_feedback_config_default(&c->feedback);
    kg_server_config_default(&c->server);
    c->margin_s = 60;
    c->gpu_check_s = 120;
}

/* Maps the GPU index among the visible devices to a CUDA_VISIBLE_DEVICES
 * value for the server, so a candidate can reach no other GPU. */
static void pin_gpu(kg_evaluator *e) {
    if (e->cfg.gpu < 0) return;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis || !*vis) {
        snprintf(e->cfg.server.cuda_visible, sizeof e->cfg.server.cuda_visible, "%d", e->cfg.gpu);
        return;
    }
    const char *p = vis;
    for (int i = 0; *p; i++) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (i == e->cfg.gpu) {
            snprintf(e->cfg.server.cuda_visible, sizeof e->cfg.server.cuda_visible, "%.*s", (int)n, p);
            return;
        }
        if (!comma) break;
        p = comma + 1;
    }
    snprintf(e->config_error, sizeof e->config_error, "GPU %d is not among CUDA_VISIBLE_DEVICES=%s", e->cfg.gpu, vis);
}

kg_evaluator *kg_evaluator_new(const kg_evaluator_config *c) {
    kg_evaluator *e = dk_calloc(1, sizeof *e);
    e->cfg = *c;
    pin_gpu(e);
    kg_server_init(&e->server, &e->cfg.server);
    return e;
}

void kg_evaluator_free(kg_evaluator *e) {
    if (!e) return;
    kg_server_stop(&e->server, 10.0);
    free(e->server.buf);
    free(e);
}

/* How long the server may sit idle before it must answer a ping first. */
#define KG_IDLE_PING_S 60.0

dk_status kg_evaluator_start(kg_evaluator *e) {
    if (e->config_error[0]) return dk_fail(DK_ERR_USAGE, "%s", e->config_error);
    /* A server that died or hung while idle is replaced before a job is
     * charged with its failure. */
    char why[512];
    if (kg_server_running(&e->server)) {
        if (!kg_server_alive(&e->server, why, sizeof why)) {
            fprintf(stderr, "kernelgym %s: %s; restarting it\n", e->cfg.name, why);
        } else if (dk_now() - e->server.last_answer > KG_IDLE_PING_S &&
                   kg_server_ping(&e->server, 30.0, why, sizeof why) != KG_SERVER_OK) {
            fprintf(stderr, "kernelgym %s: %s; restarting it\n", e->cfg.name, why);
            kg_server_kill(&e->server);
        }
    }
    if (kg_server_running(&e->server)) return DK_OK;
    double t0 = dk_now();
    DK_TRY(kg_server_start(&e->server));
    if (e->cfg.verbose)
        fprintf(stderr, "kernelgym %s: evaluation server ready in %.1f s: %s\n", e->cfg.name, dk_now() - t0,
                e->server.ready_line);
    return DK_OK;
}

int kg_evaluator_gpu_broken(const kg_evaluator *e, const char **why) {
    if (why) *why = e->gpu_why;
    return e->gpu_broken;
}

long kg_utf8_invalid_at(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    long i = 0;
    while (p[i]) {
        unsigned c = p[i];
        int n;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return i;
        }
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return i;
            c = (c << 6) | (p[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return i;
        i += n + 1;
    }
    return -1;
}

static void set_item(cJSON *o, const char *key, cJSON *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddItemToObject(o, key, v);
}

void kg_evaluator_decorate(const kg_evaluator_config *c, cJSON *result, double wall_ms) {
    kg_result r;
    kg_result_init(&r);
    double reward = 0;
    char *feedback;
    if (kg_result_from_json(result, &r) == DK_OK) {
        reward = kg_reward_compute(&c->reward, &r);
        feedback = kg_feedback_build(&c->feedback, &r);
    } else {
        feedback = dk_strdup("Evaluation error: the evaluator returned an unreadable result.");
        dk_error_clear();
    }
    set_item(result, "reward", cJSON_CreateNumber(reward));
    set_item(result, "feedback", cJSON_CreateString(feedback));
    set_item(result, "worker", cJSON_CreateString(c->name));
    set_item(result, "wall_ms", cJSON_CreateNumber(round(wall_ms * 10) / 10));
    free(feedback);
    kg_result_free(&r);
}

static const char *job_str(const cJSON *job, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(job, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double job_option(const cJSON *job, const char *key, double fallback) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(job, "options");
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

static cJSON *ok_result(const char *id) {
    cJSON *r = kg_result_make_error(id, KG_STATUS_OK, "");
    cJSON_ReplaceItemInObjectCaseSensitive(r, "compiled", cJSON_CreateTrue());
    cJSON_ReplaceItemInObjectCaseSensitive(r, "correct", cJSON_CreateTrue());
    return r;
}

/* A "sleep" job: sleep_s in short slices so a stop request is noticed. */
static int sleep_interruptibly(double s, const volatile sig_atomic_t *stop) {
    double end = dk_now() + s;
    for (;;) {
        if (stop && *stop) return 0;
        double left = end - dk_now();
        if (left <= 0) return 1;
        if (left > 0.05) left = 0.05;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* After a crash on GPU gpu (as the server numbers them): does a tiny CUDA op
 * still work there in a fresh child? */
static void check_gpu(kg_evaluator *e, int gpu) {
    if (!kg_server_running(&e->server) && kg_server_start(&e->server) != DK_OK) {
        e->gpu_broken = 1;
        snprintf(e->gpu_why, sizeof e->gpu_why, "the evaluation server does not restart: %s", dk_error());
        return;
    }
    char line[64], why[256], *reply = NULL;
    snprintf(line, sizeof line, "{\"kind\":\"gpu_check\",\"gpu\":%d}", gpu);
    kg_server_outcome o = kg_server_request(&e->server, line, e->cfg.gpu_check_s, NULL, &reply, why, sizeof why);
    if (o != KG_SERVER_OK) {
        kg_server_kill(&e->server);
        e->gpu_broken = 1;
        snprintf(e->gpu_why, sizeof e->gpu_why, "gpu_check failed: %s", why);
        return;
    }
    cJSON *j = cJSON_Parse(reply);
    const cJSON *ok = j ? cJSON_GetObjectItemCaseSensitive(j, "gpu_ok") : NULL;
    if (!cJSON_IsTrue(ok)) {
        const char *err = j ? job_str(j, "error") : NULL;
        e->gpu_broken = 1;
        snprintf(e->gpu_why, sizeof e->gpu_why, "gpu_check reports a broken GPU: %s",
                 err ? err : (j ? reply : "unreadable answer"));
    } else if (e->cfg.verbose) {
        fprintf(stderr, "kernelgym %s: gpu_check after a crash: GPU ok\n", e->cfg.name);
    }
    cJSON_Delete(j);
    free(reply);
}

static const char *resolve_device(kg_evaluator *e, const cJSON *job) {
    if (strcmp(e->cfg.device, "auto") != 0) return e->cfg.device;
    const char *d = job_str(job, "device");
    if (d && (strcmp(d, "cuda") == 0 || strcmp(d, "cpu") == 0)) return d;
    return e->server.cuda ? "cuda" : "cpu";
}

/* How many times a job whose server died mid-job runs again on a fresh one. */
#define KG_INFRA_RETRIES 2

/* Sends an eval job to the (started) server. *result NULL = interrupted. */
static dk_status run_eval(kg_evaluator *e, const cJSON *job, const char *id, const volatile sig_atomic_t *stop,
                          cJSON **result) {
    *result = NULL;
    const char *fields[] = {"task_source", "candidate_source"};
    for (int i = 0; i < 2; i++) {
        const char *src = job_str(job, fields[i]);
        char msg[256];
        if (!src) {
            snprintf(msg, sizeof msg, "job has no string field '%s'", fields[i]);
            *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
            return DK_OK;
        }
        long bad = kg_utf8_invalid_at(src);
        if (bad >= 0) {
            snprintf(msg, sizeof msg, "%s is not valid UTF-8 (first bad byte at offset %ld)", fields[i], bad);
            *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
            return DK_OK;
        }
    }
    const char *device = resolve_device(e, job);
    cJSON *line = cJSON_Duplicate(job, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(line, "client");
    cJSON_DeleteItemFromObjectCaseSensitive(line, "kind");
    set_item(line, "device", cJSON_CreateString(device));
    /* A pinned server sees its one GPU as device 0. */
    const cJSON *jg = cJSON_GetObjectItemCaseSensitive(job, "gpu");
    int gpu = e->cfg.gpu >= 0 ? 0 : (cJSON_IsNumber(jg) && jg->valueint >= 0 ? jg->valueint : 0);
    set_item(line, "gpu", cJSON_CreateNumber(gpu));
    char *text = cJSON_PrintUnformatted(line);
    cJSON_Delete(line);
    if (!text) DK_ABORT("cJSON_PrintUnformatted: out of memory");

    double limit = job_option(job, "timeout_s", 120) + e->cfg.margin_s;
    char why[512], *reply = NULL;
    /* A server that dies mid-job is an infrastructure fault until it repeats:
     * the job runs again on a fresh server, up to KG_INFRA_RETRIES times,
     * before the crash is the candidate's. (The server never runs candidate
     * code itself; its sandboxed children cannot see or signal it.) */
    int retries = 0;
    kg_server_outcome o = kg_server_request(&e->server, text, limit, stop, &reply, why, sizeof why);
    while (o == KG_SERVER_DIED && retries < KG_INFRA_RETRIES) {
        retries++;
        kg_server_kill(&e->server);
        fprintf(stderr, "kernelgym %s: job %s: %s; retrying on a fresh server (%d of %d)\n", e->cfg.name, id, why,
                retries, KG_INFRA_RETRIES);
        if (kg_evaluator_start(e) != DK_OK) {
            snprintf(why, sizeof why, "the evaluation server died and could not be restarted: %s", dk_error());
            dk_error_clear();
            break;
        }
        free(reply);
        reply = NULL;
        o = kg_server_request(&e->server, text, limit, stop, &reply, why, sizeof why);
    }
    free(text);
    if (o == KG_SERVER_INTERRUPTED) {
        kg_server_kill(&e->server);
        return DK_OK;
    }
    if (o == KG_SERVER_TIMEOUT) {
        kg_server_kill(&e->server);
        char msg[640];
        snprintf(msg, sizeof msg, "%s; the server was killed and restarted", why);
        *result = kg_result_make_error(id, KG_STATUS_TIMEOUT, msg);
    } else if (o == KG_SERVER_DIED) {
        kg_server_kill(&e->server);
        *result = kg_result_make_error(id, KG_STATUS_CRASH, why);
    } else {
        cJSON *r = cJSON_Parse(reply);
        kg_result check;
        kg_result_init(&check);
        const char *rid = r ? job_str(r, "id") : NULL;
        char msg[512];
        if (!r || !cJSON_IsObject(r)) {
            snprintf(msg, sizeof msg, "the evaluation server sent a line that is not a JSON object: %.200s", reply);
            kg_server_kill(&e->server); /* out of step with us: start afresh */
            cJSON_Delete(r);
            *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
        } else if (!rid || strcmp(rid, id) != 0) {
            snprintf(msg, sizeof msg, "the evaluation server answered job '%s' with a result for '%s'", id,
                     rid ? rid : "(no id)");
            kg_server_kill(&e->server);
            cJSON_Delete(r);
            *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
        } else if (kg_result_from_json(r, &check) != DK_OK) {
            snprintf(msg, sizeof msg, "the evaluation server sent an unusable result: %s", dk_error());
            dk_error_clear();
            cJSON_Delete(r);
            *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
        } else {
            *result = r;
        }
        kg_result_free(&check);
    }
    free(reply);
    if (retries) set_item(*result, "infra_retries", cJSON_CreateNumber(retries));
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(*result, "status");
    if (strcmp(device, "cuda") == 0 && cJSON_IsString(st) && strcmp(st->valuestring, "crash") == 0) check_gpu(e, gpu);
    return DK_OK;
}

dk_status kg_evaluator_run(kg_evaluator *e, const cJSON *job, const volatile sig_atomic_t *stop, cJSON **result) {
    *result = NULL;
    const char *id = job_str(job, "id");
    if (!id) id = "";
    const char *kind = job_str(job, "kind");
    kg_job_kind k = KG_JOB_EVAL;
    /* The server's warm-up is not the job's time. */
    if ((!kind || strcmp(kind, "eval") == 0)) DK_TRY(kg_evaluator_start(e));
    double t0 = dk_now();
    if (kind && kg_job_kind_parse(kind, &k) != DK_OK) {
        char msg[200];
        snprintf(msg, sizeof msg, "unknown job kind '%.64s' (expected eval, echo or sleep)", kind);
        dk_error_clear();
        *result = kg_result_make_error(id, KG_STATUS_ERROR, msg);
    } else if (k == KG_JOB_ECHO) {
        *result = ok_result(id);
        const char *payload = job_str(job, "payload");
        cJSON_AddStringToObject(*result, "echo", payload ? payload : "");
    } else if (k == KG_JOB_SLEEP) {
        if (!sleep_interruptibly(job_option(job, "sleep_s", 0), stop)) return DK_OK;
        *result = ok_result(id);
    } else {
        DK_TRY(run_eval(e, job, id, stop, result));
        if (!*result) return DK_OK;
    }
    double wall_ms = (dk_now() - t0) * 1000.0;
    kg_evaluator_decorate(&e->cfg, *result, wall_ms);
    if (e->cfg.verbose) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(*result, "status");
        const cJSON *rw = cJSON_GetObjectItemCaseSensitive(*result, "reward");
        fprintf(stderr, "kernelgym %s: job %s: %s, reward %.3f, %.0f ms\n", e->cfg.name, id,
                cJSON_IsString(st) ? st->valuestring : "?", cJSON_IsNumber(rw) ? rw->valuedouble : 0.0, wall_ms);
    }
    return DK_OK;
}
