/* rl_gather.c: serialises a rank's rollouts into one byte buffer, gathers
 * every rank's over comm_all_gather_host and rebuilds them. The record of one
 * rollout: task, sample, n_tokens, n_turns, seed; per turn its bounds, stop,
 * outcome, correct, reward, speedup, coverage and feedback text; then the
 * tokens, logprobs and sampled marks. Every rank runs the same build, so the
 * byte layout needs no versioning. */
#include "trainer/rl_gather.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef struct {
    char *p;
    size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = dk_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static void put_i32(wbuf *b, int32_t v) { put(b, &v, sizeof v); }
static void put_f64(wbuf *b, double v) { put(b, &v, sizeof v); }

typedef struct {
    const char *p, *end;
    int bad;
} rbuf;

static void get(rbuf *b, void *x, size_t n) {
    if (b->bad || (size_t)(b->end - b->p) < n) {
        b->bad = 1;
        memset(x, 0, n);
        return;
    }
    memcpy(x, b->p, n);
    b->p += n;
}

static int32_t get_i32(rbuf *b) {
    int32_t v;
    get(b, &v, sizeof v);
    return v;
}

static double get_f64(rbuf *b) {
    double v;
    get(b, &v, sizeof v);
    return v;
}

void rl_gather_task_range(int n_tasks, int rank, int world, int *t0, int *t1) {
    *t0 = (int)((long)n_tasks * rank / world);
    *t1 = (int)((long)n_tasks * (rank + 1) / world);
}

static void pack(wbuf *b, const rl_rollout *r, int task0) {
    const gen_seq *s = r->seq;
    put_i32(b, r->task + task0);
    put_i32(b, r->sample);
    put_i32(b, s->n_tokens);
    put_i32(b, r->n_turns);
    put(b, &s->seed, sizeof s->seed);
    for (int t = 0; t < r->n_turns; t++) {
        const rl_turn_result *x = &r->res[t];
        put_i32(b, r->turn_start[t]);
        put_i32(b, r->turn_end[t]);
        put_i32(b, (int32_t)r->stop[t]);
        put_i32(b, (int32_t)x->outcome);
        put_i32(b, x->correct);
        put_f64(b, x->reward);
        put_f64(b, x->speedup);
        put_f64(b, x->coverage);
        int32_t len = x->feedback ? (int32_t)strlen(x->feedback) : -1;
        put_i32(b, len);
        if (len > 0) put(b, x->feedback, (size_t)len);
    }
    put(b, s->tokens, (size_t)s->n_tokens * sizeof(int32_t));
    put(b, s->logprobs, (size_t)s->n_tokens * sizeof(float));
    put(b, s->sampled, (size_t)s->n_tokens);
}

static void unpack(rbuf *b, rl_rollout *r) {
    memset(r, 0, sizeof *r);
    gen_seq *s = dk_calloc(1, sizeof *s);
    r->seq = s;
    r->task = get_i32(b);
    r->sample = get_i32(b);
    int n = get_i32(b);
    r->n_turns = get_i32(b);
    get(b, &s->seed, sizeof s->seed);
    if (n < 0 || r->n_turns < 0 || r->n_turns > RL_MAX_TURNS) b->bad = 1;
    if (b->bad) return;
    for (int t = 0; t < r->n_turns; t++) {
        rl_turn_result *x = &r->res[t];
        r->turn_start[t] = get_i32(b);
        r->turn_end[t] = get_i32(b);
        r->stop[t] = (gen_stop)get_i32(b);
        x->outcome = (rl_outcome)get_i32(b);
        x->correct = get_i32(b);
        x->reward = get_f64(b);
        x->speedup = get_f64(b);
        x->coverage = get_f64(b);
        int32_t len = get_i32(b);
        if (len >= 0 && !b->bad) {
            x->feedback = dk_malloc((size_t)len + 1);
            get(b, x->feedback, (size_t)len);
            x->feedback[len] = 0;
        }
    }
    if (b->bad || (size_t)(b->end - b->p) < (size_t)n * 9) {
        b->bad = 1;
        return;
    }
    s->n_tokens = s->cap = n;
    s->turn_start = r->n_turns ? r->turn_start[r->n_turns - 1] : n;
    s->stop = r->n_turns ? r->stop[r->n_turns - 1] : GEN_RUNNING;
    s->tokens = dk_malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    s->logprobs = dk_malloc((size_t)(n ? n : 1) * sizeof(float));
    s->sampled = dk_malloc((size_t)(n ? n : 1));
    get(b, s->tokens, (size_t)n * sizeof(int32_t));
    get(b, s->logprobs, (size_t)n * sizeof(float));
    get(b, s->sampled, (size_t)n);
}

dk_status rl_gather_rollouts(comm *c, const rl_rollout *local, int n_local, int task0, rl_rollout *out,
                             int n_total) {
    wbuf w = {0};
    put_i32(&w, n_local);
    for (int i = 0; i < n_local; i++) pack(&w, &local[i], task0);
    void *all = NULL;
    size_t *sizes = dk_calloc((size_t)c->world, sizeof *sizes);
    comm_all_gather_host(c, w.p, w.n, &all, sizes);
    free(w.p);
    memset(out, 0, (size_t)n_total * sizeof *out);
    int k = 0, bad_rank = -1;
    size_t off = 0;
    for (int r = 0; r < c->world && bad_rank < 0; r++) {
        rbuf b = {(const char *)all + off, (const char *)all + off + sizes[r], 0};
        off += sizes[r];
        int n = get_i32(&b);
        if (n < 0 || k + n > n_total) b.bad = 1;
        for (int i = 0; i < n && !b.bad; i++) unpack(&b, &out[k++]);
        if (b.bad || b.p != b.end) bad_rank = r;
    }
    free(all);
    free(sizes);
    if (bad_rank >= 0 || k != n_total) {
        rl_gather_free(out, n_total);
        if (bad_rank >= 0) return dk_fail(DK_ERR_RUNTIME, "gathering rollouts: rank %d sent a malformed record", bad_rank);
        return dk_fail(DK_ERR_RUNTIME, "gathering rollouts: the ranks sent %d rollouts, the batch has %d", k, n_total);
    }
    return DK_OK;
}

void rl_gather_free(rl_rollout *r, int n) {
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < RL_MAX_TURNS; t++) free(r[i].res[t].feedback);
        if (r[i].seq) {
            free(r[i].seq->tokens);
            free(r[i].seq->logprobs);
            free(r[i].seq->sampled);
            free(r[i].seq);
        }
    }
    memset(r, 0, (size_t)n * sizeof *r);
}
