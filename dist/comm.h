/* comm.h: the communication layer between the ranks of one job (mpirun -np N
 * ./train, or a plain ./train, which is world 1). One interface, two backends:
 *   nccl: GPU buffers, one GPU per rank; the collectives run on a stream of
 *         their own and join the compute stream through events, so a layer's
 *         gather overlaps the previous layer's compute (dist/comm_nccl.c);
 *   mpi:  the CPU backend, and CUDA ranks that share a GPU: device buffers are
 *         staged through page-locked host memory, and a progress thread runs
 *         the collectives in the order they were issued while the caller
 *         computes (dist/comm_mpi.c).
 * Buffers live on the device of the ops_ctx the comm was opened with (the
 * host for the CPU backend). Every collective has a number (the same on every
 * rank, since every rank issues the same collectives in the same order); a
 * collective that has not completed after timeout_s ends the whole job with
 * MPI_Abort and a message naming the ranks that did not arrive at it.
 *
 * Launch: comm_launch() first thing in main (MPI_Init works as a singleton
 * when the program is not started by mpirun), comm_finish() last; a fatal
 * error on any rank calls comm_abort_job, which takes every rank down. */
#ifndef DK_DIST_COMM_H
#define DK_DIST_COMM_H

#include <stddef.h>

#include "common/error.h"
#include "kernels/ops.h"

typedef enum { COMM_AUTO = 0, COMM_NCCL = 1, COMM_MPI = 2 } comm_backend;
typedef enum { COMM_F32 = 0, COMM_F64 = 1 } comm_dtype;

/* Where this process sits in the job, from MPI. */
typedef struct {
    int rank, world;             /* in the job */
    int local_rank, local_world; /* among the ranks of this node (MPI_COMM_TYPE_SHARED) */
} comm_place;

typedef struct comm_req comm_req; /* an async collective in flight */
typedef struct comm_impl comm_impl;

typedef struct comm {
    comm_place at;
    int rank, world;       /* = at.rank, at.world */
    comm_backend backend;  /* COMM_NCCL or COMM_MPI once open */
    ops_ctx *ctx;
    double timeout_s;
    long seq;              /* collectives this rank has issued */
    long *seen;            /* [world] the newest collective each rank announced */
    comm_impl *impl;       /* the backend's state */
} comm;

/* MPI_Init asking for MPI_THREAD_MULTIPLE (the mpi backend's progress
 * thread) once per process; exits the process with a message when MPI cannot
 * start. DK_TEST_NODES=N, for tests only, makes rank r sit on pretend node
 * r % N instead of the node it runs on. */
void comm_launch(int *argc, char ***argv);
/* MPI_Finalize, after every comm is closed. */
void comm_finish(void);
/* Rank, world and node-local rank of this process (comm_launch first). */
comm_place comm_where(void);
/* This process's node: its number (the nodes numbered in the order of their
 * local rank 0s) and how many nodes the job spans (comm_launch first). */
void comm_node(int *node, int *n_nodes);
/* Ends every rank of the job with `code` after printing msg (prefixed with
 * this rank) to stderr. Works before and after comm_launch. */
void comm_abort_job(int code, const char *msg) __attribute__((noreturn));

/* The backend and GPU a rank uses: `want` as configured (AUTO picks nccl on
 * cuda when every local rank has a GPU of its own and NCCL is built, else
 * mpi); n_gpus GPUs visible on this node. Fails (DK_ERR_USAGE, naming
 * dist.backend) on nccl for the CPU backend, nccl without NCCL in the build,
 * or nccl with more local ranks than GPUs. */
dk_status comm_pick(comm_backend want, int cuda, int n_gpus, const comm_place *at, comm_backend *backend, int *gpu);
/* The GPU comm_pick gives a local rank (r % n_gpus), and how many of the
 * node's ranks share that GPU (1 when n_gpus <= 0). */
int comm_gpu_of(const comm_place *at, int n_gpus);
int comm_gpu_sharers(const comm_place *at, int n_gpus);

/* Opens the communicator of every rank of the job over ctx (collective:
 * every rank calls it). NCCL's communicator is made from an ncclUniqueId that
 * rank 0 broadcasts over MPI. */
dk_status comm_open(comm *c, ops_ctx *ctx, comm_backend backend, double timeout_s);
void comm_close(comm *c);

/* ---- collectives (every rank calls each one, in the same order) ------------ */

/* recv[world * bytes]: rank r's send[bytes] lands at recv + r * bytes. send
 * may alias its own slice of recv. */
void comm_all_gather(comm *c, void *recv, const void *send, size_t bytes);
/* fp32 sum: rank r receives recv[n] = sum over ranks of send[r*n .. r*n+n). */
void comm_reduce_scatter(comm *c, float *recv, const float *send, size_t n);
/* In-place sum over ranks of buf[n] (device buffer). */
void comm_all_reduce(comm *c, void *buf, size_t n, comm_dtype type);
/* In-place sum over ranks of a host array of doubles (losses, norms, counts),
 * whatever the backend. */
void comm_all_reduce_host(comm *c, double *x, size_t n);
/* Host bytes of any length per rank, over MPI whatever the backend: every
 * rank gets the ranks' send buffers back to back in rank order in *recv
 * (malloc'ed; the caller frees it) and each rank's length in sizes[world]
 * (may be NULL). A rank may send 0 bytes, so rank root alone sending makes a
 * broadcast. Rollouts, rewards and URLs travel this way. */
void comm_all_gather_host(comm *c, const void *send, size_t bytes, void **recv, size_t *sizes);
/* buf[bytes] of rank root to every rank (device buffer). */
void comm_broadcast(comm *c, void *buf, size_t bytes, int root);
void comm_barrier(comm *c);

/* Async variants: queued behind what the ctx has queued so far; the buffers
 * must stay untouched until comm_wait, after which ops queued on the ctx see
 * the result (on nccl the compute stream waits on an event: the host does
 * not block; on mpi the host waits for the progress thread's transfer, and
 * the copy up of a device result is queued on the stream). The host issues
 * and returns at once on both. Every request is waited for exactly once. */
comm_req *comm_all_gather_async(comm *c, void *recv, const void *send, size_t bytes);
comm_req *comm_reduce_scatter_async(comm *c, float *recv, const float *send, size_t n);
void comm_wait(comm *c, comm_req *r);

#endif
