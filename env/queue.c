/* queue.c: the Redis commands behind queue.h. */
#include "env/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/redis_conn.h"

static long long to_ms(double s) { return s < 0.001 ? 1 : (long long)(s * 1000.0 + 0.5); }

/* Reads n pipelined replies, keeping the first failure's message. */
static dk_status drain_replies(redisContext *c, int n, const char *what) {
    dk_status st = DK_OK;
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            return dk_fail(DK_ERR_RUNTIME, "redis %s: %s", what, c->errstr[0] ? c->errstr : "connection lost");
        }
        if (r->type == REDIS_REPLY_ERROR && st == DK_OK) st = dk_fail(DK_ERR_RUNTIME, "redis %s: %s", what, r->str);
        freeReplyObject(r);
    }
    return st;
}

static void copy_id(char id[KG_ID_LEN], const char *s, size_t len) {
    if (len >= KG_ID_LEN) len = KG_ID_LEN - 1;
    memcpy(id, s, len);
    id[len] = '\0';
}

dk_status kg_queue_push(redisContext *c, int n, const char *const *ids, const char *const *jsons, double job_ttl_s) {
    /* Chunks keep the pipeline's output buffer bounded for big sources. All
     * job keys of a chunk are written before its ids become visible. */
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ids[i]);
        /* Every reader copies an id into KG_ID_LEN bytes: a longer one would
         * be cut, and its job then never completed nor removed. */
        if (len == 0 || len >= KG_ID_LEN)
            return dk_fail(DK_ERR_USAGE, "queueing job %d: id '%.40s%s' is %zu characters long (1 to %d allowed)", i,
                           ids[i], len > 40 ? "..." : "", len, KG_ID_LEN - 1);
    }
    const int chunk = 64;
    for (int b = 0; b < n; b += chunk) {
        int m = n - b < chunk ? n - b : chunk;
        for (int i = b; i < b + m; i++)
            redisAppendCommand(c, "SET kg:job:%s %s PX %lld", ids[i], jsons[i], to_ms(job_ttl_s));
        for (int i = b; i < b + m; i++) redisAppendCommand(c, "LPUSH kg:queue %s", ids[i]);
        DK_TRY(drain_replies(c, 2 * m, "queueing jobs"));
    }
    return DK_OK;
}

dk_status kg_queue_next_done(redisContext *c, const char *client, double block_s, char id[KG_ID_LEN], int *got) {
    *got = 0;
    /* Redis rounds short BLPOP timeouts up to its clock tick (100 ms), so a
     * mere look is a plain LPOP. */
    redisReply *r = block_s <= 0 ? kg_redis_cmd(c, "LPOP kg:done:%s", client)
                                 : kg_redis_cmd(c, "BLPOP kg:done:%s %.3f", client, block_s < 0.001 ? 0.001 : block_s);
    if (!r) return DK_ERR_RUNTIME;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
        copy_id(id, r->element[1]->str, r->element[1]->len);
        *got = 1;
    } else if (r->type == REDIS_REPLY_STRING) {
        copy_id(id, r->str, r->len);
        *got = 1;
    }
    freeReplyObject(r);
    return DK_OK;
}

dk_status kg_queue_fetch_result(redisContext *c, const char *id, int forget, char **json) {
    *json = NULL;
    redisReply *r = kg_redis_cmd(c, "GET kg:result:%s", id);
    if (!r) return DK_ERR_RUNTIME;
    if (r->type == REDIS_REPLY_STRING) {
        *json = dk_malloc(r->len + 1);
        memcpy(*json, r->str, r->len);
        (*json)[r->len] = '\0';
    }
    freeReplyObject(r);
    if (forget && *json) {
        r = kg_redis_cmd(c, "DEL kg:result:%s", id);
        if (!r) {
            free(*json);
            *json = NULL;
            return DK_ERR_RUNTIME;
        }
        freeReplyObject(r);
    }
    return DK_OK;
}

dk_status kg_queue_drop_client(redisContext *c, const char *client) {
    redisReply *r = kg_redis_cmd(c, "DEL kg:done:%s kg:client:%s", client, client);
    if (!r) return DK_ERR_RUNTIME;
    freeReplyObject(r);
    return DK_OK;
}

dk_status kg_queue_heartbeat(redisContext *c, const char *worker, double ttl_s) {
    redisAppendCommand(c, "SET kg:hb:%s 1 PX %lld", worker, to_ms(ttl_s));
    redisAppendCommand(c, "SADD kg:workers %s", worker);
    return drain_replies(c, 2, "heartbeat");
}

dk_status kg_queue_take(redisContext *c, const char *worker, double block_s, char id[KG_ID_LEN], int *got) {
    *got = 0;
    redisReply *r = kg_redis_cmd(c, "BLMOVE kg:queue kg:processing:%s RIGHT LEFT %.3f", worker,
                                 block_s < 0.001 ? 0.001 : block_s);
    if (!r) return DK_ERR_RUNTIME;
    if (r->type == REDIS_REPLY_STRING && r->len >= KG_ID_LEN) {
        /* Queued by something that bypassed kg_queue_push's check: drop it
         * whole (by its full id), or it would move from worker to worker. */
        fprintf(stderr, "kernelgym queue: dropping job id '%.40s...' (%zu characters, at most %d)\n", r->str,
                (size_t)r->len, KG_ID_LEN - 1);
        const char *lrem[] = {"LREM", NULL, "1", r->str};
        const char *del[] = {"DEL", NULL};
        char plist[KG_NAME_LEN + 32], *jkey = dk_malloc(r->len + 8);
        snprintf(plist, sizeof plist, "kg:processing:%s", worker);
        memcpy(jkey, "kg:job:", 7);
        memcpy(jkey + 7, r->str, r->len);
        size_t lrem_len[] = {4, strlen(plist), 1, r->len}, del_len[] = {3, r->len + 7};
        lrem[1] = plist;
        del[1] = jkey;
        redisReply *x = kg_redis_argv(c, 4, lrem, lrem_len);
        redisReply *y = x ? kg_redis_argv(c, 2, del, del_len) : NULL;
        free(jkey);
        if (x) freeReplyObject(x);
        if (y) freeReplyObject(y);
        freeReplyObject(r);
        return x && y ? DK_OK : DK_ERR_RUNTIME;
    }
    if (r->type == REDIS_REPLY_STRING) {
        copy_id(id, r->str, r->len);
        *got = 1;
    }
    freeReplyObject(r);
    return DK_OK;
}

dk_status kg_queue_job(redisContext *c, const char *id, char **json) {
    *json = NULL;
    redisReply *r = kg_redis_cmd(c, "GET kg:job:%s", id);
    if (!r) return DK_ERR_RUNTIME;
    if (r->type == REDIS_REPLY_STRING) {
        *json = dk_malloc(r->len + 1);
        memcpy(*json, r->str, r->len);
        (*json)[r->len] = '\0';
    }
    freeReplyObject(r);
    return DK_OK;
}

dk_status kg_queue_complete(redisContext *c, const char *worker, const char *id, const char *client,
                            const char *result_json, double result_ttl_s) {
    long long ttl = to_ms(result_ttl_s);
    int n = 0;
    redisAppendCommand(c, "MULTI"), n++;
    redisAppendCommand(c, "SET kg:result:%s %s PX %lld", id, result_json, ttl), n++;
    if (client && *client) {
        redisAppendCommand(c, "RPUSH kg:done:%s %s", client, id), n++;
        redisAppendCommand(c, "PEXPIRE kg:done:%s %lld", client, ttl), n++;
    }
    redisAppendCommand(c, "LREM kg:processing:%s 1 %s", worker, id), n++;
    redisAppendCommand(c, "DEL kg:job:%s", id), n++;
    redisAppendCommand(c, "EXEC"), n++;
    dk_status st = DK_OK;
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
            return dk_fail(DK_ERR_RUNTIME, "redis completing job %s: %s", id, c->errstr[0] ? c->errstr : "connection lost");
        if (st == DK_OK && r->type == REDIS_REPLY_ERROR)
            st = dk_fail(DK_ERR_RUNTIME, "redis completing job %s: %s", id, r->str);
        if (st == DK_OK && i == n - 1 && r->type != REDIS_REPLY_ARRAY)
            st = dk_fail(DK_ERR_RUNTIME, "redis completing job %s: transaction aborted", id);
        freeReplyObject(r);
    }
    return st;
}

dk_status kg_queue_discard(redisContext *c, const char *worker, const char *id) {
    redisReply *r = kg_redis_cmd(c, "LREM kg:processing:%s 1 %s", worker, id);
    if (!r) return DK_ERR_RUNTIME;
    freeReplyObject(r);
    return DK_OK;
}

/* Moves every id of w's processing list to the head of the queue (the end
 * workers take from). */
static dk_status requeue_all(redisContext *c, const char *worker, int *n) {
    for (;;) {
        redisReply *r = kg_redis_cmd(c, "LMOVE kg:processing:%s kg:queue RIGHT RIGHT", worker);
        if (!r) return DK_ERR_RUNTIME;
        int moved = r->type == REDIS_REPLY_STRING;
        freeReplyObject(r);
        if (!moved) return DK_OK;
        if (n) (*n)++;
    }
}

dk_status kg_queue_leave(redisContext *c, const char *worker) {
    DK_TRY(requeue_all(c, worker, NULL));
    redisAppendCommand(c, "DEL kg:hb:%s", worker);
    redisAppendCommand(c, "SREM kg:workers %s", worker);
    return drain_replies(c, 2, "leaving");
}

dk_status kg_queue_reap(redisContext *c, const char *who, double lock_s, int *n_returned) {
    if (n_returned) *n_returned = 0;
    redisReply *r = kg_redis_cmd(c, "SET kg:reaper %s NX PX %lld", who, to_ms(lock_s));
    if (!r) return DK_ERR_RUNTIME;
    int locked = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!locked) return DK_OK;
    redisReply *members = kg_redis_cmd(c, "SMEMBERS kg:workers");
    if (!members) return DK_ERR_RUNTIME;
    dk_status st = DK_OK;
    for (size_t i = 0; i < members->elements && st == DK_OK; i++) {
        const char *w = members->element[i]->str;
        redisReply *e = kg_redis_cmd(c, "EXISTS kg:hb:%s", w);
        if (!e) {
            st = DK_ERR_RUNTIME;
            break;
        }
        int alive = e->type == REDIS_REPLY_INTEGER && e->integer > 0;
        freeReplyObject(e);
        if (alive) continue;
        st = requeue_all(c, w, n_returned);
        if (st != DK_OK) break;
        e = kg_redis_cmd(c, "SREM kg:workers %s", w);
        if (!e) st = DK_ERR_RUNTIME;
        else freeReplyObject(e);
    }
    freeReplyObject(members);
    return st;
}

static long long integer_reply(redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0; }

dk_status kg_queue_get_stats(redisContext *c, kg_queue_stats *s) {
    memset(s, 0, sizeof *s);
    redisReply *r = kg_redis_cmd(c, "LLEN kg:queue");
    if (!r) return DK_ERR_RUNTIME;
    s->queued = integer_reply(r);
    freeReplyObject(r);
    redisReply *members = kg_redis_cmd(c, "SMEMBERS kg:workers");
    if (!members) return DK_ERR_RUNTIME;
    s->workers = (long long)members->elements;
    for (size_t i = 0; i < members->elements; i++) {
        redisAppendCommand(c, "EXISTS kg:hb:%s", members->element[i]->str);
        redisAppendCommand(c, "LLEN kg:processing:%s", members->element[i]->str);
    }
    dk_status st = DK_OK;
    for (size_t i = 0; i < 2 * members->elements; i++) {
        redisReply *x = NULL;
        if (redisGetReply(c, (void **)&x) != REDIS_OK || !x) {
            st = dk_fail(DK_ERR_RUNTIME, "redis stats: %s", c->errstr);
            break;
        }
        if (i % 2 == 0) s->alive += integer_reply(x) > 0;
        else s->processing += integer_reply(x);
        freeReplyObject(x);
    }
    freeReplyObject(members);
    return st;
}

dk_status kg_queue_client_alive(redisContext *c, const char *client, double ttl_s) {
    redisReply *r = kg_redis_cmd(c, "SET kg:client:%s 1 PX %lld", client, to_ms(ttl_s));
    if (!r) return DK_ERR_RUNTIME;
    freeReplyObject(r);
    return DK_OK;
}

/* One done list found by the sweep: kept while its client is alive. */
static dk_status sweep_one(redisContext *c, const char *key, int *n_results) {
    const char *client = key + strlen("kg:done:");
    redisReply *r = kg_redis_cmd(c, "EXISTS kg:client:%s", client);
    if (!r) return DK_ERR_RUNTIME;
    int alive = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    freeReplyObject(r);
    if (alive) return DK_OK;
    r = kg_redis_cmd(c, "LRANGE %s 0 -1", key);
    if (!r) return DK_ERR_RUNTIME;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *d = kg_redis_cmd(c, "DEL kg:result:%b", r->element[i]->str, (size_t)r->element[i]->len);
        if (!d) {
            freeReplyObject(r);
            return DK_ERR_RUNTIME;
        }
        if (n_results) *n_results += (int)d->integer;
        freeReplyObject(d);
    }
    freeReplyObject(r);
    r = kg_redis_cmd(c, "DEL %s", key);
    if (!r) return DK_ERR_RUNTIME;
    freeReplyObject(r);
    return DK_OK;
}

dk_status kg_queue_sweep_orphans(redisContext *c, int *n_results) {
    if (n_results) *n_results = 0;
    char cursor[32] = "0";
    do {
        redisReply *r = kg_redis_cmd(c, "SCAN %s MATCH kg:done:* COUNT 500", cursor);
        if (!r) return DK_ERR_RUNTIME;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            return dk_fail(DK_ERR_RUNTIME, "redis SCAN: unexpected reply");
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        dk_status st = DK_OK;
        for (size_t i = 0; i < r->element[1]->elements && st == DK_OK; i++)
            st = sweep_one(c, r->element[1]->element[i]->str, n_results);
        freeReplyObject(r);
        if (st != DK_OK) return st;
    } while (strcmp(cursor, "0") != 0);
    return DK_OK;
}
