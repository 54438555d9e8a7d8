/* worker.c: the worker loop and its heartbeat thread. */
#define _GNU_SOURCE
#include "env/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "env/proc_util.h"
#include "env/redis_conn.h"
#include "env/result_auth.h"

void kg_worker_config_default(kg_worker_config *c) {
    memset(c, 0, sizeof *c);
    kg_evaluator_config_default(&c->eval);
    c->heartbeat_ttl_s = 15;
    c->block_s = 1;
    c->result_ttl_s = 86400;
    c->reconnect_s = 60;
}

typedef struct {
    const kg_redis_url *url;
    const char *name;
    double ttl_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
} heartbeat;

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void *heartbeat_main(void *arg) {
    heartbeat *hb = arg;
    redisContext *c = NULL;
    double period = hb->ttl_s / 3.0;
    pthread_mutex_lock(&hb->mu);
    while (!hb->quit) {
        pthread_mutex_unlock(&hb->mu);
        if (!c && kg_redis_connect(hb->url, 5.0, &c) != DK_OK) c = NULL;
        if (c && kg_queue_heartbeat(c, hb->name, hb->ttl_s) != DK_OK) {
            fprintf(stderr, "kernelgym worker %s: heartbeat: %s\n", hb->name, dk_error());
            redisFree(c);
            c = NULL;
        }
        pthread_mutex_lock(&hb->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + period;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        while (!hb->quit && pthread_cond_timedwait(&hb->cv, &hb->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&hb->mu);
    if (c) redisFree(c);
    return NULL;
}

typedef struct {
    const kg_worker_config *cfg;
    kg_redis_url url;
    kg_result_key auth; /* every result it completes carries its tag */
    char name[KG_NAME_LEN];
    redisContext *c;
    volatile sig_atomic_t *stop;
} worker;

/* (Re)connects, retrying for reconnect_s; then gives back what an earlier
 * connection of this name left in processing (a reply lost with the old
 * connection, or a previous run under the same name). */
static dk_status reconnect(worker *w) {
    if (w->c) redisFree(w->c);
    w->c = NULL;
    double deadline = dk_now() + w->cfg->reconnect_s;
    for (int attempt = 0;; attempt++) {
        if (kg_redis_connect(&w->url, 5.0, &w->c) == DK_OK) break;
        if (dk_now() > deadline || *w->stop) return DK_ERR_RUNTIME;
        if (attempt == 0) fprintf(stderr, "kernelgym worker %s: %s; retrying\n", w->name, dk_error());
        sleep_s(1.0);
    }
    /* The per-command limit must exceed BLMOVE's block. */
    kg_redis_set_timeout(w->c, w->cfg->block_s + 30.0);
    DK_TRY(kg_queue_leave(w->c, w->name));
    return kg_queue_heartbeat(w->c, w->name, w->cfg->heartbeat_ttl_s);
}

/* One job: fetch, evaluate, complete. A failure is a Redis failure unless
 * *fatal is set (the harness cannot run at all: no job can succeed). */
static dk_status handle(worker *w, kg_evaluator *ev, const char *id, int *interrupted, int *fatal) {
    *interrupted = 0;
    *fatal = 0;
    char *text = NULL;
    DK_TRY(kg_queue_job(w->c, id, &text));
    if (!text) return kg_queue_discard(w->c, w->name, id); /* completed elsewhere meanwhile */
    cJSON *job = cJSON_Parse(text);
    free(text);
    cJSON *result = NULL;
    const char *client = NULL;
    if (!cJSON_IsObject(job)) {
        result = kg_result_make_error(id, KG_STATUS_ERROR, "the stored job is not a JSON object");
        kg_evaluator_decorate(&w->cfg->eval, result, 0);
    } else {
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(job, "client");
        client = cJSON_IsString(cl) ? cl->valuestring : NULL;
        /* The queue's id is the truth, whatever the stored JSON says. */
        cJSON_DeleteItemFromObjectCaseSensitive(job, "id");
        cJSON_AddStringToObject(job, "id", id);
        dk_status s = kg_evaluator_run(ev, job, w->stop, &result);
        if (s != DK_OK) {
            *fatal = 1;
            cJSON_Delete(job);
            return s;
        }
        if (!result) {
            *interrupted = 1;
            cJSON_Delete(job);
            return DK_OK;
        }
    }
    char *out = cJSON_PrintUnformatted(result);
    cJSON_Delete(result);
    if (!out) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    out = kg_result_auth_sign(&w->auth, out);
    dk_status s = kg_queue_complete(w->c, w->name, id, client, out, w->cfg->result_ttl_s);
    if (s != DK_OK) {
        fprintf(stderr, "kernelgym worker %s: %s; reconnecting\n", w->name, dk_error());
        s = reconnect(w);
        /* The reconnect gave the job back to the queue; completing it now
         * still delivers this result, and the client ignores a second one. */
        if (s == DK_OK) s = kg_queue_complete(w->c, w->name, id, client, out, w->cfg->result_ttl_s);
    }
    free(out);
    cJSON_Delete(job);
    return s;
}

dk_status kg_worker_run(const kg_worker_config *cfg, volatile sig_atomic_t *stop) {
    kg_ignore_sigpipe();
    worker w = {.cfg = cfg, .stop = stop};
    DK_TRY(kg_redis_url_parse(cfg->redis_url, &w.url));
    DK_TRY(kg_result_key_load(&w.auth, w.url.password));
    if (!(cfg->heartbeat_ttl_s >= 0.5)) return dk_fail(DK_ERR_USAGE, "worker: heartbeat TTL must be >= 0.5 s");
    char host[64];
    kg_hostname(host, sizeof host);
    char where[32];
    if (cfg->eval.gpu >= 0) snprintf(where, sizeof where, "gpu%d", cfg->eval.gpu);
    else snprintf(where, sizeof where, "%s", strcmp(cfg->eval.device, "cpu") == 0 ? "cpu" : "local");
    if (cfg->name[0]) snprintf(w.name, sizeof w.name, "%s", cfg->name);
    else snprintf(w.name, sizeof w.name, "%s:%s:%d", host, where, (int)getpid());
    /* Results name a GPU worker "host:gpuN" (one per GPU); others by their
     * unique name, since several may share a host. */
    kg_evaluator_config ecfg = cfg->eval;
    if (!cfg->name[0] && cfg->eval.gpu >= 0) snprintf(ecfg.name, sizeof ecfg.name, "%s:%s", host, where);
    else snprintf(ecfg.name, sizeof ecfg.name, "%s", w.name);
    kg_evaluator *ev = kg_evaluator_new(&ecfg);
    char shown[2048];
    kg_redis_url_redact(cfg->redis_url, shown, sizeof shown);

    dk_status st = DK_OK;
    if (!cfg->lazy_server) st = kg_evaluator_start(ev);
    if (st == DK_OK) st = reconnect(&w);
    if (st != DK_OK) {
        kg_evaluator_free(ev);
        if (w.c) redisFree(w.c);
        return dk_wrap(st, "worker %s: ", w.name);
    }
    heartbeat hb = {.url = &w.url, .name = w.name, .ttl_s = cfg->heartbeat_ttl_s};
    pthread_mutex_init(&hb.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t hb_thread;
    if (pthread_create(&hb_thread, NULL, heartbeat_main, &hb) != 0) DK_ABORT("worker: cannot start the heartbeat thread");
    fprintf(stderr, "kernelgym worker %s: joined %s\n", w.name, shown);

    double reap_every = cfg->heartbeat_ttl_s / 2.0, next_reap = 0;
    long done = 0;
    int fatal = 0;
    while (!*stop) {
        if (dk_now() >= next_reap) {
            int n = 0;
            st = kg_queue_reap(w.c, w.name, reap_every * 0.9, &n);
            if (st == DK_OK && n > 0) fprintf(stderr, "kernelgym worker %s: gave %d job(s) of dead workers back to the queue\n", w.name, n);
            next_reap = dk_now() + reap_every;
        }
        char id[KG_ID_LEN];
        int got = 0;
        if (st == DK_OK) st = kg_queue_take(w.c, w.name, cfg->block_s, id, &got);
        int interrupted = 0;
        if (st == DK_OK && got) {
            st = handle(&w, ev, id, &interrupted, &fatal);
            if (interrupted || fatal) break;
            if (st == DK_OK) done++;
        }
        if (st == DK_OK && kg_evaluator_gpu_broken(ev, NULL)) break;
        if (st != DK_OK) {
            fprintf(stderr, "kernelgym worker %s: %s; reconnecting\n", w.name, dk_error());
            st = reconnect(&w);
            if (st != DK_OK) break;
        }
    }
    /* A Redis failure while a stop was requested is just the stop. */
    if (st != DK_OK && !fatal && *stop) st = DK_OK;
    const char *why = NULL;
    if (st == DK_OK && kg_evaluator_gpu_broken(ev, &why))
        st = dk_fail(DK_ERR_RUNTIME, "worker %s: stopping: %s (the GPU needs attention before it takes jobs again)", w.name, why);
    else if (st != DK_OK)
        dk_wrap(st, "worker %s: ", w.name);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", dk_error());
    /* Heartbeat off first, so nothing re-registers the worker after it left. */
    pthread_mutex_lock(&hb.mu);
    hb.quit = 1;
    pthread_cond_signal(&hb.cv);
    pthread_mutex_unlock(&hb.mu);
    pthread_join(hb_thread, NULL);
    pthread_cond_destroy(&hb.cv);
    pthread_mutex_destroy(&hb.mu);
    if (w.c && !w.c->err && kg_queue_leave(w.c, w.name) != DK_OK)
        fprintf(stderr, "kernelgym worker %s: leaving: %s\n", w.name, dk_error());
    if (w.c) redisFree(w.c);
    kg_evaluator_free(ev);
    fprintf(stderr, "kernelgym worker %s: left after %ld job(s)\n", w.name, done);
    if (st != DK_OK) dk_fail(st, "%s", msg);
    return st;
}
