/* comm_mpi.c: the mpi backend. A progress thread per comm runs the
 * collectives in the order they were issued, each one MPI's non-blocking
 * collective polled to completion (comm_mpi_poll, so a stalled one hits the
 * timeout), while the caller's thread computes: Open MPI moves a
 * non-blocking collective forward only inside MPI calls, so without the
 * thread nothing would move between the issue and comm_wait.
 *
 * On the CPU backend the buffers are the user's host arrays. On CUDA (ranks
 * sharing one GPU) each request stages its input through page-locked host
 * memory on the ctx's copy-down lane, behind the ops queued so far, and
 * records an event there; the thread waits for that event (the caller's
 * thread does not), runs MPI on the host copy, and comm_wait queues the
 * result's copy up on the ctx's stream, so ops queued after comm_wait see it.
 *
 * The thread needs MPI_THREAD_MULTIPLE (comm_launch asks for it): the
 * caller's thread still runs the host collectives (comm_all_reduce_host, on
 * their own communicator) and the arrival announcements. Where MPI grants
 * less, the backend says so once and runs each collective on the caller's
 * thread, issued at once and polled in comm_wait; DK_COMM_SYNC=1 asks for
 * that path too (to measure what the thread gains). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm_internal.h"
#include "dist/copy.h"

typedef struct {
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;  /* guards the queue, stop and every request's done */
    pthread_cond_t work; /* a request was queued, or stop */
    pthread_cond_t done; /* a request completed */
    comm_req *queue[COMM_POOL];
    int head, count, stop;
} mpi_state;

/* Issues r's collective as start() laid it out. */
static void issue(comm *c, comm_req *r) {
    MPI_Comm dc = c->impl->data;
    const void *s = r->m_send;
    void *b = r->m_recv;
    const int n = r->m_count;
    int rc = MPI_SUCCESS;
    switch (r->op) {
    case OP_ALL_GATHER: rc = MPI_Iallgather(s, n, r->type, b, n, r->type, dc, &r->mreq); break;
    case OP_REDUCE_SCATTER: rc = MPI_Ireduce_scatter_block(s, b, n, MPI_FLOAT, MPI_SUM, dc, &r->mreq); break;
    case OP_ALL_REDUCE: rc = MPI_Iallreduce(MPI_IN_PLACE, b, n, r->type, MPI_SUM, dc, &r->mreq); break;
    case OP_BROADCAST: rc = MPI_Ibcast(b, n, r->type, r->m_root, dc, &r->mreq); break;
    case OP_BARRIER: rc = MPI_Ibarrier(dc, &r->mreq); break;
    }
    if (rc != MPI_SUCCESS) {
        char err[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 128];
        int len = 0;
        MPI_Error_string(rc, err, &len);
        snprintf(msg, sizeof msg, "comm (mpi): starting collective #%ld (%s) failed: %s", r->seq,
                 comm_op_name(r->op), err);
        comm_abort_job(DK_ERR_RUNTIME, msg);
    }
}

/* The progress thread: the queued requests one at a time, oldest first
 * (every rank issues the same collectives in the same order, so the FIFO
 * keeps the order MPI needs on the data communicator). */
static void *progress_main(void *arg) {
    comm *c = arg;
    mpi_state *ms = c->impl->backend;
    dist_use_device(c->ctx);
    for (;;) {
        pthread_mutex_lock(&ms->mu);
        while (!ms->count && !ms->stop) pthread_cond_wait(&ms->work, &ms->mu);
        if (!ms->count) { /* stop, and nothing left */
            pthread_mutex_unlock(&ms->mu);
            return NULL;
        }
        comm_req *r = ms->queue[ms->head];
        pthread_mutex_unlock(&ms->mu);
        if (r->staged) ops_event_sync(c->ctx, r->staged); /* the input is on the host */
        r->t0 = dk_now(); /* the timeout counts from the start, not from the queue */
        issue(c, r);
        comm_mpi_poll(c, &r->mreq, r->seq, r->op, r->t0);
        pthread_mutex_lock(&ms->mu);
        ms->head = (ms->head + 1) % COMM_POOL;
        ms->count--;
        r->done = 1;
        pthread_cond_broadcast(&ms->done);
        pthread_mutex_unlock(&ms->mu);
    }
}

static dk_status mpi_open(comm *c) {
    mpi_state *ms = dk_calloc(1, sizeof *ms);
    c->impl->backend = ms;
    pthread_mutex_init(&ms->mu, NULL);
    pthread_cond_init(&ms->work, NULL);
    pthread_cond_init(&ms->done, NULL);
    static int noted;
    const char *sync = getenv("DK_COMM_SYNC");
    const int want_sync = sync && !strcmp(sync, "1");
    if (want_sync || comm_thread_level() < MPI_THREAD_MULTIPLE) {
        if (!noted++ && c->rank == 0)
            fprintf(stderr, "comm (mpi): %s; collectives run on the caller's thread and do not overlap compute\n",
                    want_sync ? "DK_COMM_SYNC=1" : "MPI grants no MPI_THREAD_MULTIPLE here");
        return DK_OK;
    }
    if (pthread_create(&ms->thread, NULL, progress_main, c) != 0)
        return dk_fail(DK_ERR_RUNTIME, "comm (mpi): cannot start the progress thread");
    ms->have_thread = 1;
    return DK_OK;
}

static void mpi_close(comm *c) {
    mpi_state *ms = c->impl->backend;
    if (ms) {
        if (ms->have_thread) {
            pthread_mutex_lock(&ms->mu);
            ms->stop = 1;
            pthread_cond_signal(&ms->work);
            pthread_mutex_unlock(&ms->mu);
            pthread_join(ms->thread, NULL);
        }
        pthread_mutex_destroy(&ms->mu);
        pthread_cond_destroy(&ms->work);
        pthread_cond_destroy(&ms->done);
        free(ms);
        c->impl->backend = NULL;
    }
    for (int i = 0; i < COMM_POOL; i++) {
        comm_req *r = &c->impl->pool[i];
        if (r->send_cap) ops_host_free(c->ctx, r->host_send);
        if (r->recv_cap) ops_host_free(c->ctx, r->host_recv);
        if (r->staged) ops_event_free(c->ctx, r->staged);
        r->send_cap = r->recv_cap = 0;
        r->staged = NULL;
    }
}

static void *grow(ops_ctx *ctx, void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        if (*cap) ops_host_free(ctx, *buf);
        *buf = ops_host_alloc(ctx, bytes);
        *cap = bytes;
    }
    return *buf;
}

/* The most bytes one collective passes as a plain count: INT_MAX, or less
 * where DK_COMM_MAX_COUNT says so (the tests take the blocked path below
 * without moving gigabytes). */
static size_t max_count(void) {
    const char *e = getenv("DK_COMM_MAX_COUNT");
    long v = e ? atol(e) : 0;
    return v > 0 && v < INT_MAX ? (size_t)v : (size_t)INT_MAX;
}

/* A count of bytes as MPI takes it: plain bytes up to max_count(), beyond
 * that one element of a type of exactly `bytes` bytes (blocks of up to
 * 1 GiB and the rest), which *made is set to free after the collective. */
static int bytes_type(size_t bytes, MPI_Datatype *t, int *made) {
    *made = 0;
    const size_t most = max_count();
    if (bytes <= most) {
        *t = MPI_BYTE;
        return (int)bytes;
    }
    const size_t block = most < ((size_t)1 << 30) ? most : (size_t)1 << 30, q = bytes / block, rem = bytes % block;
    MPI_Datatype gib;
    MPI_Type_contiguous((int)block, MPI_BYTE, &gib);
    int lens[2] = {(int)q, (int)rem};
    MPI_Aint offs[2] = {0, (MPI_Aint)(q * block)};
    MPI_Datatype types[2] = {gib, MPI_BYTE};
    MPI_Type_create_struct(rem ? 2 : 1, lens, offs, types, t);
    MPI_Type_commit(t);
    MPI_Type_free(&gib);
    *made = 1;
    return 1;
}

static int count_int(size_t n, comm_op op) {
    if (n > (size_t)INT_MAX) DK_ABORT("comm (mpi): %s of %zu elements exceeds MPI's int count", comm_op_name(op), n);
    return (int)n;
}

/* Device buffers: src[bytes] goes down to host on the copy lane, behind the
 * ops queued so far; r->staged is recorded behind it. */
static void stage_down(comm *c, comm_req *r, void *host, const void *src, size_t bytes) {
    if (!r->staged) r->staged = ops_event_new(c->ctx);
    ops_download_lane(c->ctx, host, src, bytes, r->staged);
}

/* Lays r's collective out over host buffers (staging device ones) for issue(). */
static void prepare(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    ops_ctx *ctx = c->ctx;
    const int host = ctx->device == DK_DEVICE_CPU, W = c->world;
    r->dev_recv = NULL;
    r->recv_bytes = 0;
    r->made_type = 0;
    r->m_root = root;
    r->type = MPI_BYTE;
    r->m_send = r->m_recv = NULL;
    r->m_count = 0;
    int stage = 0;
    switch (r->op) {
    case OP_ALL_GATHER: {
        r->m_count = bytes_type(count, &r->type, &r->made_type);
        const int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count;
        if (host) {
            r->m_send = in_place ? MPI_IN_PLACE : send;
            r->m_recv = recv;
        } else {
            char *h = grow(ctx, &r->host_recv, &r->recv_cap, count * W);
            stage_down(c, r, h + (size_t)c->rank * count, send, count);
            stage = 1;
            r->m_send = MPI_IN_PLACE;
            r->m_recv = h;
            r->dev_recv = recv;
            r->recv_bytes = count * W;
        }
        break;
    }
    case OP_REDUCE_SCATTER:
        r->m_count = count_int(count, r->op);
        r->type = MPI_FLOAT;
        if (host) {
            r->m_send = send;
            r->m_recv = recv;
        } else {
            float *hs = grow(ctx, &r->host_send, &r->send_cap, count * 4 * W);
            r->m_recv = grow(ctx, &r->host_recv, &r->recv_cap, count * 4);
            stage_down(c, r, hs, send, count * 4 * W);
            stage = 1;
            r->m_send = hs;
            r->dev_recv = recv;
            r->recv_bytes = count * 4;
        }
        break;
    case OP_ALL_REDUCE:
    case OP_BROADCAST: {
        const int bcast = r->op == OP_BROADCAST;
        const size_t bytes = bcast ? count : count * comm_dtype_size(type);
        if (bcast) r->m_count = bytes_type(count, &r->type, &r->made_type);
        else {
            r->m_count = count_int(count, r->op);
            r->type = comm_mpi_type(type);
        }
        r->m_recv = recv;
        if (!host) {
            r->m_recv = grow(ctx, &r->host_recv, &r->recv_cap, bytes);
            stage_down(c, r, r->m_recv, recv, bytes);
            stage = 1;
            r->dev_recv = recv;
            r->recv_bytes = bytes;
        }
        break;
    }
    case OP_BARRIER: break;
    }
    /* A device barrier orders after the device work queued so far, like the
     * nccl backend's: an empty copy down carries that event. */
    if (!host && r->op == OP_BARRIER) {
        stage_down(c, r, NULL, NULL, 0);
        stage = 1;
    }
    if (!stage && r->staged) {
        ops_event_free(ctx, r->staged); /* the slot staged before; this request does not */
        r->staged = NULL;
    }
}

static void mpi_start(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    mpi_state *ms = c->impl->backend;
    prepare(c, r, recv, send, count, type, root);
    r->done = 0;
    if (!ms->have_thread) { /* no progress thread: issue now, poll in comm_wait */
        if (r->staged) ops_event_sync(c->ctx, r->staged);
        issue(c, r);
        return;
    }
    pthread_mutex_lock(&ms->mu);
    ms->queue[(ms->head + ms->count) % COMM_POOL] = r;
    ms->count++;
    pthread_cond_signal(&ms->work);
    pthread_mutex_unlock(&ms->mu);
}

static void mpi_wait(comm *c, comm_req *r) {
    mpi_state *ms = c->impl->backend;
    if (ms->have_thread) {
        /* The thread ends the job itself when the collective times out. */
        pthread_mutex_lock(&ms->mu);
        while (!r->done) pthread_cond_wait(&ms->done, &ms->mu);
        pthread_mutex_unlock(&ms->mu);
    } else {
        comm_mpi_poll(c, &r->mreq, r->seq, r->op, r->t0);
    }
    if (r->made_type) MPI_Type_free(&r->type);
    r->made_type = 0;
    /* In stream order, so ops queued after comm_wait see the result. */
    if (r->dev_recv) ops_upload(c->ctx, r->dev_recv, r->host_recv, r->recv_bytes);
    r->dev_recv = NULL;
}

/* 1 when r's collective has completed (tests: it completes while the caller
 * computes, before comm_wait). Without the thread it is never done early. */
int comm_mpi_done(comm *c, comm_req *r) {
    mpi_state *ms = c->impl->backend;
    pthread_mutex_lock(&ms->mu);
    int d = r->done;
    pthread_mutex_unlock(&ms->mu);
    return d;
}

const comm_backend_ops comm_mpi_ops = {mpi_open, mpi_close, mpi_start, mpi_wait};
