/* comm_mpi.c: the mpi backend. Collectives are MPI's non-blocking ones,
 * polled to completion (comm_mpi_poll) so a stalled one hits the timeout.
 * On the CPU backend the buffers are the user's host arrays; on CUDA (ranks
 * sharing one GPU) each request stages its data through page-locked host
 * memory: the compute stream is drained, the input copied down, MPI runs on
 * the host copy, and the result goes back up on the stream at comm_wait. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm_internal.h"

static dk_status mpi_open(comm *c) { return DK_OK; }

static void mpi_close(comm *c) {
    for (int i = 0; i < COMM_POOL; i++) {
        comm_req *r = &c->impl->pool[i];
        if (r->send_cap) ops_host_free(c->ctx, r->host_send);
        if (r->recv_cap) ops_host_free(c->ctx, r->host_recv);
        r->send_cap = r->recv_cap = 0;
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

static void mpi_start(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    ops_ctx *ctx = c->ctx;
    MPI_Comm dc = c->impl->data;
    const int host = ctx->device == DK_DEVICE_CPU, W = c->world;
    const size_t es = comm_dtype_size(type);
    MPI_Datatype mt = comm_mpi_type(type);
    r->dev_recv = NULL;
    r->recv_bytes = 0;
    r->made_type = 0;
    if (!host) ops_sync(ctx); /* the inputs are complete on the device */
    int rc = MPI_SUCCESS;
    switch (r->op) {
    case OP_ALL_GATHER: {
        MPI_Datatype bt;
        const int n = bytes_type(count, &bt, &r->made_type);
        r->type = bt;
        const int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count;
        if (host) {
            rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, bt, recv, n, bt, dc, &r->mreq);
        } else {
            char *h = grow(ctx, &r->host_recv, &r->recv_cap, count * W);
            ops_download(ctx, h + (size_t)c->rank * count, send, count);
            ops_sync(ctx);
            r->dev_recv = recv;
            r->recv_bytes = count * W;
            rc = MPI_Iallgather(MPI_IN_PLACE, n, bt, h, n, bt, dc, &r->mreq);
        }
        break;
    }
    case OP_REDUCE_SCATTER: {
        const int n = count_int(count, r->op);
        if (host) {
            rc = MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, dc, &r->mreq);
        } else {
            float *hs = grow(ctx, &r->host_send, &r->send_cap, count * 4 * W);
            float *hr = grow(ctx, &r->host_recv, &r->recv_cap, count * 4);
            ops_download(ctx, hs, send, count * 4 * W);
            ops_sync(ctx);
            r->dev_recv = recv;
            r->recv_bytes = count * 4;
            rc = MPI_Ireduce_scatter_block(hs, hr, n, MPI_FLOAT, MPI_SUM, dc, &r->mreq);
        }
        break;
    }
    case OP_ALL_REDUCE:
    case OP_BROADCAST: {
        const int bcast = r->op == OP_BROADCAST;
        const size_t bytes = bcast ? count : count * es;
        MPI_Datatype bt = MPI_BYTE;
        const int n = bcast ? bytes_type(count, &bt, &r->made_type) : count_int(count, r->op);
        r->type = bt;
        void *buf = recv;
        if (!host) {
            buf = grow(ctx, &r->host_recv, &r->recv_cap, bytes);
            ops_download(ctx, buf, recv, bytes);
            ops_sync(ctx);
            r->dev_recv = recv;
            r->recv_bytes = bytes;
        }
        if (bcast) rc = MPI_Ibcast(buf, n, bt, root, dc, &r->mreq);
        else rc = MPI_Iallreduce(MPI_IN_PLACE, buf, n, mt, MPI_SUM, dc, &r->mreq);
        break;
    }
    case OP_BARRIER: rc = MPI_Ibarrier(dc, &r->mreq); break;
    }
    if (rc != MPI_SUCCESS) {
        char err[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, err, &len);
        DK_ABORT("comm (mpi): starting collective #%ld (%s) failed: %s", r->seq, comm_op_name(r->op), err);
    }
}

static void mpi_wait(comm *c, comm_req *r) {
    comm_mpi_poll(c, &r->mreq, r->seq, r->op, r->t0);
    if (r->made_type) MPI_Type_free(&r->type);
    r->made_type = 0;
    if (r->dev_recv) ops_upload(c->ctx, r->dev_recv, r->host_recv, r->recv_bytes);
    r->dev_recv = NULL;
}

const comm_backend_ops comm_mpi_ops = {mpi_open, mpi_close, mpi_start, mpi_wait};
