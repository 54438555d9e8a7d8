/* client.c: the two client modes of client.h. Bookkeeping shared by both:
 * `outstanding` maps every submitted id whose result was not yet returned to
 * NULL (nothing arrived) or to the result JSON that arrived while nobody was
 * waiting for it. An id leaves the map when its result is returned, which is
 * what makes later duplicate notifications harmless. In Redis mode `sent`
 * keeps the job text of every id still without a result, so the jobs a
 * restarted Redis forgot can be queued again after a reconnect. */
#define _GNU_SOURCE
#include "env/client.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "env/proc_util.h"
#include "env/queue.h"
#include "env/result_auth.h"
#include "env/redis_conn.h"
#include "env/strmap.h"

#define KG_JOB_TTL_S (7.0 * 86400.0) /* a queued job no worker took in a week is dropped */
#define KG_CLIENT_REAP_S 5.0         /* how often a waiting client runs the reaper */
#define KG_CLIENT_BLOCK_S 1.0        /* BLPOP slice between reaper runs */
#define KG_CLIENT_BACKOFF_MAX_S 2.0  /* longest pause between two reconnect attempts */
#define KG_CLIENT_ALIVE_S 600.0      /* a client silent this long is gone: its results are swept */

typedef struct local_job {
    struct local_job *next;
    char id[KG_ID_LEN];
    cJSON *job;
} local_job;

struct kg_client {
    char name[64]; /* short enough that "<name>-<seq>" fits KG_ID_LEN */
    unsigned long long seq;
    kg_strmap outstanding;
    /* Redis mode */
    int is_redis;
    redisContext *rc; /* NULL while Redis is unreachable: the next call retries */
    kg_redis_url url;
    kg_result_key auth; /* results must carry its tag (result_auth.h) */
    double next_reap;
    kg_strmap sent;      /* id -> job JSON text, for ids still without a result */
    double reconnect_s;  /* how long an outage may last before calls fail */
    double down_since;   /* dk_now() when the current outage began; 0 while connected */
    double backoff;      /* the next pause between reconnect attempts */
    unsigned rng;        /* jitter, so many clients do not retry in step */
    kg_client_stats stats;
    /* local mode */
    kg_evaluator *ev;
    local_job *head, *tail;
};

static void sleep_for(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct {
    kg_client *c;
    const char **ids, **texts;
    int n;
    dk_status st;
} recover_ctx;

/* One id still without a result, after a reconnect: its result may be stored
 * with the notification lost (notify again), its job may be queued or
 * running (nothing to do), or Redis may have forgotten both (queue again). */
static void recover_one(const char *id, void *text, void *user) {
    recover_ctx *r = user;
    if (r->st != DK_OK) return;
    redisReply *x = kg_redis_cmd(r->c->rc, "EXISTS kg:result:%s", id);
    if (!x) {
        r->st = DK_ERR_RUNTIME;
        return;
    }
    int has_result = x->type == REDIS_REPLY_INTEGER && x->integer > 0;
    freeReplyObject(x);
    if (has_result) {
        /* A second notification, if the first survived, is ignored. */
        x = kg_redis_cmd(r->c->rc, "RPUSH kg:done:%s %s", r->c->name, id);
        if (x) freeReplyObject(x);
        else r->st = DK_ERR_RUNTIME;
        return;
    }
    x = kg_redis_cmd(r->c->rc, "EXISTS kg:job:%s", id);
    if (!x) {
        r->st = DK_ERR_RUNTIME;
        return;
    }
    int has_job = x->type == REDIS_REPLY_INTEGER && x->integer > 0;
    freeReplyObject(x);
    if (!has_job) {
        r->ids[r->n] = id;
        r->texts[r->n] = text;
        r->n++;
    }
}

static dk_status recover(kg_client *c) {
    if (c->sent.count == 0) return DK_OK;
    recover_ctx r = {c, dk_malloc(c->sent.count * sizeof(char *)), dk_malloc(c->sent.count * sizeof(char *)), 0, DK_OK};
    kg_strmap_each(&c->sent, recover_one, &r);
    if (r.st == DK_OK && r.n > 0) {
        r.st = kg_queue_push(c->rc, r.n, r.ids, r.texts, KG_JOB_TTL_S);
        if (r.st == DK_OK) {
            c->stats.resubmitted += r.n;
            fprintf(stderr, "kernelgym client %s: Redis had lost %d job(s); queued them again\n", c->name, r.n);
        }
    }
    free(r.ids);
    free(r.texts);
    return r.st;
}

/* The connection failed (or was never made): reconnect, pausing between
 * attempts with jittered exponential backoff, and recover the jobs Redis may
 * have lost. Gives up (an error) once the outage has lasted reconnect_s;
 * when `until` comes first it returns DK_OK with c->rc still NULL, and the
 * next call goes on trying. */
static dk_status reconnect(kg_client *c, double until) {
    if (c->rc) {
        redisFree(c->rc);
        c->rc = NULL;
    }
    if (c->down_since == 0) {
        c->down_since = dk_now();
        c->backoff = 0.05;
        c->stats.outages++;
        fprintf(stderr, "kernelgym client %s: %s; reconnecting for up to %.0f s\n", c->name,
                dk_error()[0] ? dk_error() : "no connection", c->reconnect_s);
    }
    const double give_up = c->down_since + c->reconnect_s;
    for (;;) {
        redisContext *rc = NULL;
        dk_status st = kg_redis_connect(&c->url, 5.0, &rc);
        if (st == DK_OK) {
            kg_redis_set_timeout(rc, KG_CLIENT_BLOCK_S + 30.0);
            c->rc = rc;
            /* Alive first: a restarted Redis lacks the mark, and a sweep by
             * another client would take this one's results for orphans. */
            st = kg_queue_client_alive(c->rc, c->name, KG_CLIENT_ALIVE_S);
            if (st == DK_OK) st = recover(c);
            if (st == DK_OK) {
                c->stats.reconnects++;
                c->stats.down_s += dk_now() - c->down_since;
                c->down_since = 0;
                dk_error_clear();
                return DK_OK;
            }
            redisFree(c->rc);
            c->rc = NULL;
        }
        double now = dk_now();
        if (now >= give_up)
            return dk_wrap(st, "client %s: Redis unreachable for %.0f s (the limit is %.0f s): ", c->name,
                           now - c->down_since, c->reconnect_s);
        if (now >= until) return DK_OK;
        double pause = c->backoff * (0.5 + (double)(rand_r(&c->rng) % 1000) / 1000.0);
        if (pause > give_up - now) pause = give_up - now;
        if (pause > until - now) pause = until - now;
        sleep_for(pause);
        c->backoff = c->backoff * 2 < KG_CLIENT_BACKOFF_MAX_S ? c->backoff * 2 : KG_CLIENT_BACKOFF_MAX_S;
    }
}

static kg_client *client_new(void) {
    kg_client *c = dk_calloc(1, sizeof *c);
    char host[64], rnd[9];
    kg_hostname(host, sizeof host);
    kg_random_hex(rnd, 4);
    snprintf(c->name, sizeof c->name, "%.32s-%d-%s", host, (int)getpid(), rnd);
    kg_strmap_init(&c->outstanding);
    kg_strmap_init(&c->sent);
    c->reconnect_s = KG_CLIENT_RECONNECT_S;
    c->rng = (unsigned)getpid() ^ (unsigned)strtoul(rnd, NULL, 16);
    return c;
}

kg_client *kg_client_connect(const char *url, dk_status *st) {
    kg_ignore_sigpipe();
    kg_client *c = client_new();
    c->is_redis = 1;
    *st = kg_redis_url_parse(url, &c->url);
    if (*st == DK_OK) *st = kg_result_key_load(&c->auth, c->url.password);
    if (*st == DK_OK) *st = kg_redis_connect(&c->url, 10.0, &c->rc);
    if (*st != DK_OK) {
        kg_client_close(c);
        return NULL;
    }
    kg_redis_set_timeout(c->rc, KG_CLIENT_BLOCK_S + 30.0);
    return c;
}

kg_client *kg_client_local(const kg_evaluator_config *cfg, dk_status *st) {
    kg_ignore_sigpipe();
    kg_client *c = client_new();
    kg_evaluator_config def;
    if (!cfg) {
        kg_evaluator_config_default(&def);
        cfg = &def;
    }
    c->ev = kg_evaluator_new(cfg);
    *st = DK_OK;
    return c;
}

void kg_client_close(kg_client *c) {
    if (!c) return;
    if (c->rc) {
        if (!c->rc->err && kg_queue_drop_client(c->rc, c->name) != DK_OK) dk_error_clear();
        redisFree(c->rc);
    }
    while (c->head) {
        local_job *j = c->head;
        c->head = j->next;
        cJSON_Delete(j->job);
        free(j);
    }
    if (c->ev) kg_evaluator_free(c->ev);
    kg_strmap_free(&c->outstanding, free);
    kg_strmap_free(&c->sent, free);
    free(c);
}

const char *kg_client_name(const kg_client *c) { return c->name; }

void kg_client_set_reconnect(kg_client *c, double seconds) { c->reconnect_s = seconds > 0 ? seconds : 0; }

void kg_client_get_stats(const kg_client *c, kg_client_stats *out) {
    *out = c->stats;
    if (c->down_since > 0) out->down_s += dk_now() - c->down_since;
}

int kg_client_is_down(const kg_client *c) { return c->is_redis && c->down_since > 0; }

dk_status kg_client_submit_batch(kg_client *c, const kg_job *jobs, int n, kg_result *out) {
    if (n < 0) return dk_fail(DK_ERR_USAGE, "kg_client_submit_batch: negative job count %d", n);
    char **texts = dk_calloc((size_t)(n ? n : 1), sizeof(char *));
    cJSON **objs = dk_calloc((size_t)(n ? n : 1), sizeof(cJSON *));
    dk_status st = DK_OK;
    for (int i = 0; i < n && st == DK_OK; i++) {
        kg_result_init(&out[i]);
        snprintf(out[i].id, sizeof out[i].id, "%s-%llu", c->name, ++c->seq);
        st = kg_job_to_json(&jobs[i], out[i].id, c->is_redis ? c->name : NULL, &objs[i]);
        if (st != DK_OK) dk_wrap(st, "job %d: ", i);
        else if (c->is_redis && !(texts[i] = cJSON_PrintUnformatted(objs[i]))) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    }
    if (st == DK_OK && c->is_redis) {
        /* Pushing twice is harmless (a second copy of a finished job is
         * dropped), so a push cut by a lost connection is simply redone. */
        const char **ids = dk_malloc(sizeof(char *) * (size_t)(n ? n : 1));
        for (int i = 0; i < n; i++) ids[i] = out[i].id;
        for (;;) {
            if (!c->rc) st = reconnect(c, INFINITY);
            if (st != DK_OK) break;
            st = kg_queue_client_alive(c->rc, c->name, KG_CLIENT_ALIVE_S);
            if (st == DK_OK) st = kg_queue_push(c->rc, n, ids, (const char *const *)texts, KG_JOB_TTL_S);
            if (st == DK_OK) break;
            st = reconnect(c, INFINITY);
            if (st != DK_OK) break;
        }
        free(ids);
    }
    if (st == DK_OK) {
        for (int i = 0; i < n; i++) {
            kg_strmap_put(&c->outstanding, out[i].id, NULL);
            if (c->is_redis) {
                free(kg_strmap_put(&c->sent, out[i].id, texts[i]));
                texts[i] = NULL;
            }
            if (c->ev) { /* local: queue it in memory, in order */
                local_job *j = dk_calloc(1, sizeof *j);
                snprintf(j->id, sizeof j->id, "%s", out[i].id);
                j->job = objs[i];
                objs[i] = NULL;
                if (c->tail) c->tail->next = j;
                else c->head = j;
                c->tail = j;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        cJSON_Delete(objs[i]);
        free(texts[i]);
    }
    free(objs);
    free(texts);
    return st;
}

dk_status kg_client_submit(kg_client *c, const kg_job *job, char id_out[KG_ID_LEN]) {
    kg_result r;
    dk_status st = kg_client_submit_batch(c, job, 1, &r);
    if (st == DK_OK) snprintf(id_out, KG_ID_LEN, "%s", r.id);
    kg_result_free(&r);
    return st;
}

/* Fills slot r from a result JSON (an unreadable one becomes status error). */
static void fill(kg_result *r, const char *id, const char *json) {
    char keep[KG_ID_LEN];
    snprintf(keep, sizeof keep, "%s", id);
    if (kg_result_parse(json, r) != DK_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "unreadable result: %s", dk_error());
        dk_error_clear();
        cJSON *e = kg_result_make_error(id, KG_STATUS_ERROR, msg);
        kg_result_from_json(e, r);
        cJSON_Delete(e);
    }
    snprintf(r->id, sizeof r->id, "%s", keep);
}

/* A result for id arrived: give it to its slot or keep it for later. */
static void deliver(kg_client *c, kg_strmap *slots, kg_result *out, const char *id, char *json) {
    int found = 0;
    void *slot = kg_strmap_get(slots, id, &found);
    free(kg_strmap_remove(&c->sent, id, NULL)); /* it has its result: never queued again */
    if (found) {
        fill(&out[(intptr_t)slot - 1], id, json);
        kg_strmap_remove(slots, id, NULL);
        kg_strmap_remove(&c->outstanding, id, NULL);
        free(json);
    } else {
        free(kg_strmap_put(&c->outstanding, id, json));
    }
}

static int count_done(const kg_result *out, int n) {
    int d = 0;
    for (int i = 0; i < n; i++) d += out[i].status != KG_STATUS_PENDING;
    return d;
}

/* One notification from the done list (Redis mode); *idle when none came. */
static dk_status redis_step(kg_client *c, kg_strmap *slots, kg_result *out, double block_s, int *idle) {
    *idle = 1;
    if (dk_now() >= c->next_reap) {
        DK_TRY(kg_queue_reap(c->rc, c->name, KG_CLIENT_REAP_S * 0.9, NULL));
        /* Results of clients that died before collecting them go now, not
         * when their TTL (a day) runs out. */
        DK_TRY(kg_queue_client_alive(c->rc, c->name, KG_CLIENT_ALIVE_S));
        DK_TRY(kg_queue_sweep_orphans(c->rc, NULL));
        c->next_reap = dk_now() + KG_CLIENT_REAP_S;
    }
    char id[KG_ID_LEN];
    int got = 0;
    DK_TRY(kg_queue_next_done(c->rc, c->name, block_s, id, &got));
    if (!got) return DK_OK;
    *idle = 0;
    int found = 0;
    void *stashed = kg_strmap_get(&c->outstanding, id, &found);
    char *json = NULL;
    if (!found || stashed) {
        /* Already returned or already here: a duplicate completion. Its
         * second result copy is not needed by anyone. */
        redisReply *r = kg_redis_cmd(c->rc, "DEL kg:result:%s", id);
        if (r) freeReplyObject(r);
        return r ? DK_OK : DK_ERR_RUNTIME;
    }
    DK_TRY(kg_queue_fetch_result(c->rc, id, 1, &json));
    if (json) {
        deliver(c, slots, out, id, kg_result_auth_accept(&c->auth, id, json));
    } else {
        /* Notified, but the result is gone (swept while this client was cut
         * off from a restarted Redis): run the job again. */
        const char *text = kg_strmap_get(&c->sent, id, NULL);
        if (text) {
            const char *ids[1] = {id}, *texts[1] = {text};
            DK_TRY(kg_queue_push(c->rc, 1, ids, texts, KG_JOB_TTL_S));
            c->stats.resubmitted++;
        }
    }
    return DK_OK;
}

/* Runs the next in-memory job (local mode); *idle when there is none. */
static dk_status local_step(kg_client *c, kg_strmap *slots, kg_result *out, int *idle) {
    local_job *j = c->head;
    *idle = j == NULL;
    if (!j) return DK_OK;
    cJSON *result = NULL;
    DK_TRY(kg_evaluator_run(c->ev, j->job, NULL, &result));
    c->head = j->next;
    if (!c->head) c->tail = NULL;
    char *json = cJSON_PrintUnformatted(result);
    cJSON_Delete(result);
    if (!json) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    deliver(c, slots, out, j->id, json);
    cJSON_Delete(j->job);
    free(j);
    return DK_OK;
}

dk_status kg_client_wait(kg_client *c, kg_result *out, int n, double timeout_s, int *n_done) {
    if (n_done) *n_done = count_done(out, n);
    if (!(timeout_s >= 0)) return dk_fail(DK_ERR_USAGE, "kg_client_wait: timeout must be >= 0, got %g", timeout_s);
    kg_strmap slots;
    kg_strmap_init(&slots);
    dk_status st = DK_OK;
    for (int i = 0; i < n && st == DK_OK; i++) {
        if (out[i].status != KG_STATUS_PENDING) continue;
        int found = 0;
        char *stashed = kg_strmap_get(&c->outstanding, out[i].id, &found);
        if (!found) {
            st = dk_fail(DK_ERR_USAGE,
                         "kg_client_wait: job '%s' (slot %d) was not submitted by this client or its result was already returned",
                         out[i].id, i);
        } else if (stashed) {
            fill(&out[i], out[i].id, stashed);
            kg_strmap_remove(&c->outstanding, out[i].id, NULL);
            free(stashed);
        } else {
            kg_strmap_put(&slots, out[i].id, (void *)(intptr_t)(i + 1));
        }
    }
    double deadline = dk_now() + timeout_s;
    while (st == DK_OK && slots.count > 0) {
        double left = deadline - dk_now();
        int idle = 1;
        if (c->is_redis) {
            if (!c->rc) {
                st = reconnect(c, deadline);
                if (st != DK_OK || !c->rc) break; /* gave up, or still down at the deadline */
            }
            if (left <= 0) {
                /* One last look at what is already there. */
                st = redis_step(c, &slots, out, 0, &idle);
                if (st != DK_OK) {
                    st = reconnect(c, deadline);
                    continue;
                }
                if (idle) break;
                continue;
            }
            st = redis_step(c, &slots, out, left < KG_CLIENT_BLOCK_S ? left : KG_CLIENT_BLOCK_S, &idle);
            /* Any failure (a dropped socket, a Redis still loading its data)
             * goes through reconnect, which gives up after reconnect_s. */
            if (st != DK_OK) st = reconnect(c, deadline);
        } else {
            if (left <= 0) break;
            st = local_step(c, &slots, out, &idle);
            if (idle) break; /* nothing left to run: the rest cannot finish */
        }
    }
    kg_strmap_free(&slots, NULL);
    if (n_done) *n_done = count_done(out, n);
    return st;
}

dk_status kg_client_run(kg_client *c, const kg_job *jobs, int n, double timeout_s, kg_result *out, int *n_done) {
    DK_TRY(kg_client_submit_batch(c, jobs, n, out));
    return kg_client_wait(c, out, n, timeout_s, n_done);
}
