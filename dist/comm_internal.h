/* comm_internal.h: what dist/comm.c shares with its two backends
 * (dist/comm_mpi.c, dist/comm_nccl.c): the request record, the backend's
 * table of functions, and the arrival bookkeeping that names the ranks a
 * timed-out collective is waiting for. Not for use outside dist/. */
#ifndef DK_DIST_COMM_INTERNAL_H
#define DK_DIST_COMM_INTERNAL_H

#include <mpi.h>
#include <pthread.h>

#include "dist/comm.h"

typedef enum { OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_BROADCAST, OP_BARRIER } comm_op;

/* One collective in flight. Requests come from a small per-comm pool (the
 * ZeRO schedule keeps at most a few in flight), so their staging buffers are
 * reused from step to step. */
struct comm_req {
    int in_use;
    comm_op op;
    long seq;                 /* the collective's number */
    double t0;                /* when it was issued (dk_now) */
    /* mpi: the collective as it is issued (by the progress thread, or by the
     * caller where MPI gave no MPI_THREAD_MULTIPLE), with its host buffers */
    MPI_Request mreq;
    MPI_Datatype type;        /* the element type; a made one for more than INT_MAX bytes (made_type) */
    int made_type;
    const void *m_send;       /* MPI_IN_PLACE or a host buffer */
    void *m_recv;
    int m_count, m_root;
    void *staged;             /* ops_event *: recorded behind the copy down (device buffers) */
    int done;                 /* the collective completed (the progress thread's mutex guards it) */
    void *dev_recv;           /* device destination to fill from host_recv on completion (NULL: none) */
    void *host_send, *host_recv; /* staging (page-locked), or the user's host buffers */
    size_t send_cap, recv_cap;   /* bytes of staging owned by this slot */
    size_t recv_bytes;
    /* nccl */
    void *ev_ready, *ev_done; /* cudaEvent_t */
};

#define COMM_POOL 16

typedef struct {
    dk_status (*open)(comm *c);
    void (*close)(comm *c);
    /* Issues op (the request already holds op and seq); count is elements
     * of type for reductions, bytes otherwise (all-gather: bytes per rank). */
    void (*start)(comm *c, comm_req *r, void *recv, const void *send, size_t count, comm_dtype type, int root);
    void (*wait)(comm *c, comm_req *r);
} comm_backend_ops;

extern const comm_backend_ops comm_mpi_ops;
extern const comm_backend_ops comm_nccl_ops;
int comm_nccl_built(void);

struct comm_impl {
    const comm_backend_ops *ops;
    MPI_Comm data;            /* the device-buffer collectives (mpi backend: only its progress thread, when it has one) */
    MPI_Comm host;            /* comm_all_reduce_host, comm_all_gather_host: the caller's thread */
    MPI_Comm ctl;             /* arrival announcements */
    comm_req pool[COMM_POOL];
    long *ann_buf;            /* ring of announced numbers, one per in-flight announcement */
    MPI_Request *ann_req;     /* [COMM_ANN_RING * (world - 1)] */
    void *backend;            /* backend-private state */
    pthread_mutex_t arrive_mu; /* c->seen and the draining of announcements: two threads may drain */
};

#define COMM_ANN_RING 64

/* Reads the announcements that have arrived into c->seen (any thread). */
void comm_drain_arrivals(comm *c);
/* Ends the job: collective #seq (op) did not complete within the timeout;
 * names the ranks whose newest announcement is older than seq. */
void comm_timeout_abort(comm *c, long seq, comm_op op, double waited) __attribute__((noreturn));
/* Polls an MPI request to completion, draining announcements and ending the
 * job when it has waited longer than c->timeout_s. */
void comm_mpi_poll(comm *c, MPI_Request *req, long seq, comm_op op, double t0);
const char *comm_op_name(comm_op op);
/* 1 once the mpi backend's progress thread has completed r (tests: the
 * collective ran while the caller computed, before comm_wait). */
int comm_mpi_done(comm *c, comm_req *r);
/* The thread support MPI granted at comm_launch (MPI_THREAD_*). */
int comm_thread_level(void);
MPI_Datatype comm_mpi_type(comm_dtype t);
size_t comm_dtype_size(comm_dtype t);

#endif
