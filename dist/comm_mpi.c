/* comm_mpi.c: the mpi backend. Collectives are MPI's non-blocking ones,
 * polled to completion (comm_mpi_poll) so a stalled one hits the timeout.
 * On the CPU backend the buffers are the user's host arrays; on CUDA (ranks
 * sharing one GPU) each request stages its data through page-locked host
 * memory: the compute stream is drained, the input copied down, MPI runs on
 * the host copy, and the result goes back up on the stream at comm_wait. */
#include <limits.h>
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
    if (!host) ops_sync(ctx); /* the inputs are complete on the device */
    int rc = MPI_SUCCESS;
    switch (r->op) {
    case OP_ALL_GATHER: {
        const int n = count_int(count, r->op);
        const int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * count;
        if (host) {
            rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, MPI_BYTE, recv, n, MPI_BYTE, dc, &r->mreq);
        } else {
            char *h = grow(ctx, &r->host_recv, &r->recv_cap, count * W);
            ops_download(ctx, h + (size_t)c->rank * count, send, count);
            ops_sync(ctx);
            r->dev_recv = recv;
            r->recv_bytes = count * W;
            rc = MPI_Iallgather(MPI_IN_PLACE, n, MPI_BYTE, h, n, MPI_BYTE, dc, &r->mreq);
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
        const int n = count_int(bcast ? count : count, r->op);
        void *buf = recv;
        if (!host) {
            buf = grow(ctx, &r->host_recv, &r->recv_cap, bytes);
            ops_download(ctx, buf, recv, bytes);
            ops_sync(ctx);
            r->dev_recv = recv;
            r->recv_bytes = bytes;
        }
        if (bcast) rc = MPI_Ibcast(buf, n, MPI_BYTE, root, dc, &r->mreq);
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
    if (r->dev_recv) ops_upload(c->ctx, r->dev_recv, r->host_recv, r->recv_bytes);
    r->dev_recv = NULL;
}

const comm_backend_ops comm_mpi_ops = {mpi_open, mpi_close, mpi_start, mpi_wait};
