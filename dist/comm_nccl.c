/* comm_nccl.c: the nccl backend (CUDA ranks with a GPU each). The
 * communicator comes from an ncclUniqueId that rank 0 broadcasts over MPI.
 * Collectives run on a stream of their own: each waits for an event recorded
 * on the compute stream when it is issued, and comm_wait makes the compute
 * stream wait for the collective's own event, so the host never blocks and
 * compute queued in between overlaps the transfer. A watchdog thread checks
 * the collectives in flight: one that has not finished after timeout_s, or
 * an asynchronous NCCL error (ncclCommGetAsyncError), ends the job. Without
 * NCCL in the build the backend only says so. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "dist/comm_internal.h"

#ifdef DK_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/util.h"

typedef struct {
    ncclComm_t nc;
    cudaStream_t stream;
    pthread_t watchdog;
    pthread_mutex_t mu;   /* guards pending[] and stop */
    int stop, have_thread;
    int pending[COMM_POOL]; /* the slot's collective is still running on the GPU */
} nccl_state;

#define CUDA_OK(call)                                                                                     \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) DK_ABORT("comm (nccl): %s: %s", #call, cudaGetErrorString(e_));           \
    } while (0)
#define NCCL_OK(call)                                                                                     \
    do {                                                                                                  \
        ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess) DK_ABORT("comm (nccl): %s: %s", #call, ncclGetErrorString(r_));           \
    } while (0)

int comm_nccl_built(void) { return 1; }

static void *watchdog_main(void *arg) {
    comm *c = arg;
    nccl_state *ns = c->impl->backend;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&ns->mu);
        if (ns->stop) {
            pthread_mutex_unlock(&ns->mu);
            return NULL;
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(ns->nc, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            char msg[256];
            snprintf(msg, sizeof msg, "NCCL reported an asynchronous error: %s", ncclGetErrorString(async));
            ncclCommAbort(ns->nc);
            comm_abort_job(DK_ERR_RUNTIME, msg);
        }
        for (int i = 0; i < COMM_POOL; i++) {
            comm_req *r = &c->impl->pool[i];
            if (!ns->pending[i]) continue;
            if (cudaEventQuery((cudaEvent_t)r->ev_done) == cudaSuccess) {
                ns->pending[i] = 0;
                continue;
            }
            double waited = dk_now() - r->t0;
            if (waited > c->timeout_s) {
                ncclCommAbort(ns->nc);
                comm_timeout_abort(c, r->seq, r->op, waited);
            }
        }
        pthread_mutex_unlock(&ns->mu);
    }
}

static dk_status nccl_open(comm *c) {
    if (c->ctx->device != DK_DEVICE_CUDA)
        return dk_fail(DK_ERR_USAGE, "[dist] backend = nccl needs run.device = cuda");
    nccl_state *ns = dk_calloc(1, sizeof *ns);
    c->impl->backend = ns;
    ncclUniqueId id;
    if (c->rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->impl->data);
    CUDA_OK(cudaSetDevice(c->ctx->gpu));
    CUDA_OK(cudaStreamCreateWithFlags(&ns->stream, cudaStreamNonBlocking));
    ncclResult_t rc = ncclCommInitRank(&ns->nc, c->world, id, c->rank);
    if (rc != ncclSuccess)
        return dk_fail(DK_ERR_RUNTIME, "rank %d: ncclCommInitRank (world %d, GPU %d) failed: %s", c->rank, c->world,
                       c->ctx->gpu, ncclGetErrorString(rc));
    for (int i = 0; i < COMM_POOL; i++) {
        cudaEvent_t a, b;
        CUDA_OK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
        CUDA_OK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
        c->impl->pool[i].ev_ready = a;
        c->impl->pool[i].ev_done = b;
    }
    pthread_mutex_init(&ns->mu, NULL);
    if (pthread_create(&ns->watchdog, NULL, watchdog_main, c) != 0)
        return dk_fail(DK_ERR_RUNTIME, "comm (nccl): cannot start the watchdog thread");
    ns->have_thread = 1;
    return DK_OK;
}

static void nccl_close(comm *c) {
    nccl_state *ns = c->impl->backend;
    if (!ns) return;
    if (ns->have_thread) {
        pthread_mutex_lock(&ns->mu);
        ns->stop = 1;
        pthread_mutex_unlock(&ns->mu);
        pthread_join(ns->watchdog, NULL);
        pthread_mutex_destroy(&ns->mu);
    }
    if (ns->stream) cudaStreamSynchronize(ns->stream);
    for (int i = 0; i < COMM_POOL; i++) {
        if (c->impl->pool[i].ev_ready) cudaEventDestroy((cudaEvent_t)c->impl->pool[i].ev_ready);
        if (c->impl->pool[i].ev_done) cudaEventDestroy((cudaEvent_t)c->impl->pool[i].ev_done);
    }
    if (ns->nc) ncclCommDestroy(ns->nc);
    if (ns->stream) cudaStreamDestroy(ns->stream);
    free(ns);
    c->impl->backend = NULL;
}

static void nccl_start(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    nccl_state *ns = c->impl->backend;
    cudaStream_t compute = (cudaStream_t)c->ctx->stream;
    if (r->op == OP_BARRIER) { /* a host barrier after the device work queued so far */
        ops_sync(c->ctx);
        MPI_Ibarrier(c->impl->data, &r->mreq);
        return;
    }
    const int slot = (int)(r - c->impl->pool);
    CUDA_OK(cudaEventRecord((cudaEvent_t)r->ev_ready, compute));
    CUDA_OK(cudaStreamWaitEvent(ns->stream, (cudaEvent_t)r->ev_ready, 0));
    ncclDataType_t nt = type == COMM_F64 ? ncclFloat64 : ncclFloat32;
    switch (r->op) {
    case OP_ALL_GATHER: NCCL_OK(ncclAllGather(send, recv, count, ncclUint8, ns->nc, ns->stream)); break;
    case OP_REDUCE_SCATTER:
        NCCL_OK(ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, ns->nc, ns->stream));
        break;
    case OP_ALL_REDUCE: NCCL_OK(ncclAllReduce(send, recv, count, nt, ncclSum, ns->nc, ns->stream)); break;
    case OP_BROADCAST: NCCL_OK(ncclBroadcast(send, recv, count, ncclUint8, root, ns->nc, ns->stream)); break;
    case OP_BARRIER: break;
    }
    CUDA_OK(cudaEventRecord((cudaEvent_t)r->ev_done, ns->stream));
    pthread_mutex_lock(&ns->mu);
    ns->pending[slot] = 1;
    pthread_mutex_unlock(&ns->mu);
}

static void nccl_wait(comm *c, comm_req *r) {
    if (r->op == OP_BARRIER) {
        comm_mpi_poll(c, &r->mreq, r->seq, r->op, r->t0);
        return;
    }
    CUDA_OK(cudaStreamWaitEvent((cudaStream_t)c->ctx->stream, (cudaEvent_t)r->ev_done, 0));
}

#else /* no NCCL in this build */

int comm_nccl_built(void) { return 0; }

static dk_status nccl_open(comm *c) {
    return dk_fail(DK_ERR_USAGE, "[dist] backend = nccl, but this build has no NCCL (use mpi or auto)");
}
static void nccl_close(comm *c) {}
static void nccl_start(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    DK_ABORT("comm: the nccl backend is not built");
}
static void nccl_wait(comm *c, comm_req *r) { DK_ABORT("comm: the nccl backend is not built"); }

#endif

const comm_backend_ops comm_nccl_ops = {nccl_open, nccl_close, nccl_start, nccl_wait};
