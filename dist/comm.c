/* comm.c: launch (MPI ranks, node-local rank), backend choice, the blocking
 * and async collectives on top of a backend's start / wait, and the arrival
 * announcements: before issuing collective #k a rank tells every other rank
 * "I reached k" on a separate communicator, so a rank that times out can say
 * which ranks never reached the collective it is stuck in. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, setenv */
#include "dist/comm_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

static int launched, thread_level;
static comm_place place;
static int node_id, n_nodes;

/* DK_TEST_NODES=N (tests only: it lets one machine stand for several) puts
 * rank r on pretend node r % N, so the code that runs once per node (the
 * KernelGym workers of redis = auto) can be tested on one machine. 0 where
 * it is not set; a value that is no count ends the process (exit 2). */
static int test_nodes(void) {
    const char *e = getenv("DK_TEST_NODES");
    if (!e || !*e) return 0;
    char *end = NULL;
    long n = strtol(e, &end, 10);
    if (*end || n < 1 || n > 4096) {
        fprintf(stderr, "fatal: DK_TEST_NODES = '%s': a node count from 1 to 4096 (tests only)\n", e);
        exit(DK_ERR_USAGE);
    }
    return (int)n;
}

/* The ranks of this node: MPI_COMM_TYPE_SHARED, or the pretend node. */
static MPI_Comm node_comm(int rank, int pretend) {
    MPI_Comm local;
    if (pretend) MPI_Comm_split(MPI_COMM_WORLD, rank % pretend, rank, &local);
    else MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    return local;
}

/* Node numbers: the local rank 0s, in the order of their ranks, are nodes
 * 0, 1, ...; each tells its node which one it is. */
static void number_nodes(MPI_Comm local) {
    MPI_Comm leaders;
    MPI_Comm_split(MPI_COMM_WORLD, place.local_rank == 0 ? 0 : MPI_UNDEFINED, place.rank, &leaders);
    int id[2] = {0, 0};
    if (leaders != MPI_COMM_NULL) {
        MPI_Comm_rank(leaders, &id[0]);
        MPI_Comm_size(leaders, &id[1]);
        MPI_Comm_free(&leaders);
    }
    MPI_Bcast(id, 2, MPI_INT, 0, local);
    node_id = id[0];
    n_nodes = id[1];
}

/* The session directory of a singleton (started without a launcher).
 * Open MPI 4's isolated singletons all take job id 1, so every one on a
 * machine keeps its session files in the same <tmp>/ompi.<host>.<uid>/jf.0/1:
 * when one finishes it removes that directory while another is creating it,
 * and the other's MPI_Init fails ("mkdir ... No such file or directory"),
 * which is how tests running side by side under ctest -j failed. Each
 * singleton gets a base of its own, <tmp>/drkernel-mpi.<uid>/<pid>, removed
 * when it finishes; the bases of processes that died without finishing (kill
 * -9) are swept by the next singleton to start. */
static char singleton_dir[512];

static int launcher_present(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static void sweep_dead_singletons(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char sub[sizeof singleton_dir];
        if (snprintf(sub, sizeof sub, "%s/%s", root, e->d_name) < (int)sizeof sub) dk_remove_tree(sub);
    }
    closedir(d);
}

static void singleton_session_dir(void) {
#ifdef OMPI_MAJOR_VERSION
    if (launcher_present() || getenv("OMPI_MCA_orte_tmpdir_base")) return; /* the user's choice is kept */
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char root[sizeof singleton_dir - 16];
    if (snprintf(root, sizeof root, "%s/drkernel-mpi.%u", tmp, (unsigned)getuid()) >= (int)sizeof root) return;
    if (mkdir(root, 0700) != 0 && errno != EEXIST) return; /* Open MPI's default then, as before */
    sweep_dead_singletons(root);
    snprintf(singleton_dir, sizeof singleton_dir, "%s/%ld", root, (long)getpid());
    dk_remove_tree(singleton_dir); /* a dead process's, whose pid this one reuses */
    if (mkdir(singleton_dir, 0700) != 0) {
        singleton_dir[0] = '\0';
        return;
    }
    setenv("OMPI_MCA_orte_tmpdir_base", singleton_dir, 1);
#endif
}

void comm_launch(int *argc, char ***argv) {
    if (launched) return;
    const int pretend = test_nodes(); /* before MPI starts, so a bad value just exits */
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* Started without a launcher (`./train CONFIG`, the tests), Open MPI
         * forks a supporting daemon and talks PMIx to it for the whole run;
         * a message handled as that daemon goes away has crashed a world-1
         * run in PMIx's own thread. A world of one needs no daemon: isolated
         * singletons start none (and start ~0.15 s sooner). The variable is
         * read only by the singleton component, so under mpirun or srun it
         * changes nothing; a value the user set is kept. */
        setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
        singleton_session_dir();
        /* MULTIPLE: the mpi backend's progress thread runs collectives while
         * the caller's thread runs others on another communicator. */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level) != MPI_SUCCESS) {
            fprintf(stderr, "fatal: MPI_Init_thread failed: cannot start the ranks of this job\n");
            exit(DK_ERR_RUNTIME);
        }
        atexit(comm_finish); /* for programs that never call it (tests) */
    } else {
        MPI_Query_thread(&thread_level);
    }
    /* Errors come back as codes, so a failing call is reported with the
     * collective it belongs to instead of MPI's generic handler message. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &place.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &place.world);
    MPI_Comm local = node_comm(place.rank, pretend);
    MPI_Comm_rank(local, &place.local_rank);
    MPI_Comm_size(local, &place.local_world);
    number_nodes(local);
    MPI_Comm_free(&local);
    launched = 1;
}

int comm_thread_level(void) { return thread_level; }

void comm_node(int *node, int *n) {
    if (!launched) DK_ABORT("comm_node before comm_launch");
    *node = node_id;
    *n = n_nodes;
}

void comm_finish(void) {
    int fin = 0;
    if (!launched) return;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    if (singleton_dir[0]) dk_remove_tree(singleton_dir);
    singleton_dir[0] = '\0';
    launched = 0;
}

comm_place comm_where(void) {
    if (!launched) DK_ABORT("comm_where before comm_launch");
    return place;
}

void comm_abort_job(int code, const char *msg) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Finalized(&fin);
    if (inited && !fin && place.world > 1) {
        fprintf(stderr, "rank %d: %s\n", place.rank, msg);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    }
    fprintf(stderr, "%s\n", msg);
    exit(code);
}

int comm_gpu_of(const comm_place *at, int n_gpus) { return n_gpus > 0 ? at->local_rank % n_gpus : 0; }

int comm_gpu_sharers(const comm_place *at, int n_gpus) {
    if (n_gpus <= 0) return 1;
    int n = 0;
    for (int i = 0; i < at->local_world; i++) n += i % n_gpus == comm_gpu_of(at, n_gpus);
    return n > 0 ? n : 1;
}

dk_status comm_pick(comm_backend want, int cuda, int n_gpus, const comm_place *at, comm_backend *backend, int *gpu) {
    *gpu = 0;
    if (!cuda) {
        if (want == COMM_NCCL)
            return dk_fail(DK_ERR_USAGE, "[dist] backend = nccl needs run.device = cuda (the CPU backend uses mpi)");
        *backend = COMM_MPI;
        return DK_OK;
    }
    if (n_gpus <= 0) return dk_fail(DK_ERR_USAGE, "run.device = cuda but no GPU is visible on this node");
    const int own = at->local_world <= n_gpus; /* every local rank has a GPU of its own */
    *gpu = comm_gpu_of(at, n_gpus);
    if (want == COMM_NCCL) {
        if (!comm_nccl_built())
            return dk_fail(DK_ERR_USAGE, "[dist] backend = nccl, but this build has no NCCL (use mpi or auto)");
        if (!own)
            return dk_fail(DK_ERR_USAGE,
                           "[dist] backend = nccl needs one GPU per rank, but %d ranks share %d GPUs on this node "
                           "(use mpi or auto)",
                           at->local_world, n_gpus);
        *backend = COMM_NCCL;
    } else if (want == COMM_MPI) {
        *backend = COMM_MPI;
    } else {
        *backend = own && comm_nccl_built() ? COMM_NCCL : COMM_MPI;
    }
    return DK_OK;
}

dk_status comm_open(comm *c, ops_ctx *ctx, comm_backend backend, double timeout_s) {
    memset(c, 0, sizeof *c);
    if (!launched) DK_ABORT("comm_open before comm_launch");
    if (backend == COMM_AUTO) DK_ABORT("comm_open: pick the backend first (comm_pick)");
    c->at = place;
    c->rank = place.rank;
    c->world = place.world;
    c->backend = backend;
    c->ctx = ctx;
    c->timeout_s = timeout_s;
    c->seen = dk_calloc((size_t)c->world, sizeof(long));
    comm_impl *im = dk_calloc(1, sizeof *im);
    c->impl = im;
    im->ops = backend == COMM_NCCL ? &comm_nccl_ops : &comm_mpi_ops;
    MPI_Comm_dup(MPI_COMM_WORLD, &im->data);
    MPI_Comm_dup(MPI_COMM_WORLD, &im->ctl);
    MPI_Comm_dup(MPI_COMM_WORLD, &im->host);
    MPI_Comm_set_errhandler(im->data, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(im->host, MPI_ERRORS_RETURN);
    pthread_mutex_init(&im->arrive_mu, NULL);
    im->ann_buf = dk_calloc(COMM_ANN_RING, sizeof(long));
    size_t n_req = (size_t)COMM_ANN_RING * (size_t)(c->world > 1 ? c->world - 1 : 1);
    im->ann_req = dk_malloc(n_req * sizeof(MPI_Request));
    for (size_t i = 0; i < n_req; i++) im->ann_req[i] = MPI_REQUEST_NULL;
    dk_status st = im->ops->open(c);
    if (st != DK_OK) {
        comm_close(c);
        return st;
    }
    return DK_OK;
}

void comm_close(comm *c) {
    comm_impl *im = c->impl;
    if (!im) return;
    for (int i = 0; i < COMM_POOL; i++)
        if (im->pool[i].in_use) comm_wait(c, &im->pool[i]);
    im->ops->close(c);
    size_t n_req = (size_t)COMM_ANN_RING * (size_t)(c->world > 1 ? c->world - 1 : 1);
    MPI_Waitall((int)n_req, im->ann_req, MPI_STATUSES_IGNORE);
    comm_drain_arrivals(c);
    MPI_Comm_free(&im->data);
    MPI_Comm_free(&im->ctl);
    MPI_Comm_free(&im->host);
    pthread_mutex_destroy(&im->arrive_mu);
    free(im->ann_buf);
    free(im->ann_req);
    free(im);
    free(c->seen);
    memset(c, 0, sizeof *c);
}

/* ---- arrivals and the timeout --------------------------------------------------- */

#define TAG_ARRIVAL 7

void comm_drain_arrivals(comm *c) {
    if (c->world == 1) return;
    comm_impl *im = c->impl;
    pthread_mutex_lock(&im->arrive_mu);
    for (;;) {
        /* A matched probe, so a watchdog or progress thread may drain too. */
        int flag = 0;
        MPI_Status s;
        MPI_Message msg;
        MPI_Improbe(MPI_ANY_SOURCE, TAG_ARRIVAL, im->ctl, &flag, &msg, &s);
        if (!flag) break;
        long k;
        MPI_Mrecv(&k, 1, MPI_LONG, &msg, MPI_STATUS_IGNORE);
        if (k > c->seen[s.MPI_SOURCE]) c->seen[s.MPI_SOURCE] = k;
    }
    pthread_mutex_unlock(&im->arrive_mu);
}

/* Collective number c->seq + 1 begins: tell the other ranks. */
static long announce(comm *c) {
    comm_impl *im = c->impl;
    long k = ++c->seq;
    pthread_mutex_lock(&im->arrive_mu);
    c->seen[c->rank] = k;
    pthread_mutex_unlock(&im->arrive_mu);
    if (c->world == 1) return k;
    int slot = (int)(k % COMM_ANN_RING), peers = c->world - 1;
    MPI_Request *req = im->ann_req + (size_t)slot * peers;
    MPI_Waitall(peers, req, MPI_STATUSES_IGNORE); /* the slot's previous sends (long done: tiny, eager) */
    im->ann_buf[slot] = k;
    for (int p = 0, i = 0; p < c->world; p++)
        if (p != c->rank) MPI_Isend(&im->ann_buf[slot], 1, MPI_LONG, p, TAG_ARRIVAL, im->ctl, &req[i++]);
    comm_drain_arrivals(c);
    return k;
}

const char *comm_op_name(comm_op op) {
    static const char *names[] = {"all-gather", "reduce-scatter", "all-reduce", "broadcast", "barrier"};
    return names[op];
}

void comm_timeout_abort(comm *c, long seq, comm_op op, double waited) {
    comm_drain_arrivals(c);
    char msg[1024], *p = msg;
    size_t left = sizeof msg;
    int n = snprintf(p, left, "collective #%ld (%s) waited %.1f s, longer than [dist] timeout_s = %g; ranks that did "
                              "not arrive:",
                     seq, comm_op_name(op), waited, c->timeout_s);
    p += n;
    left -= (size_t)n;
    int missing = 0;
    for (int r = 0; r < c->world && left > 16; r++)
        if (c->seen[r] < seq) {
            n = snprintf(p, left, " %d", r);
            p += n;
            left -= (size_t)n;
            missing++;
        }
    if (!missing) snprintf(p, left, " none (every rank arrived; the transfer itself stalled)");
    comm_abort_job(DK_ERR_RUNTIME, msg);
}

void comm_mpi_poll(comm *c, MPI_Request *req, long seq, comm_op op, double t0) {
    for (long spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char err[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 128];
            int len = 0;
            MPI_Error_string(rc, err, &len);
            snprintf(msg, sizeof msg, "collective #%ld (%s) failed: %s", seq, comm_op_name(op), err);
            comm_abort_job(DK_ERR_RUNTIME, msg);
        }
        if (done) return;
        if ((spin & 255) == 0) {
            comm_drain_arrivals(c);
            double waited = dk_now() - t0;
            if (waited > c->timeout_s) comm_timeout_abort(c, seq, op, waited);
        }
        /* Spin briefly, then sleep a little: ranks often share a few cores. */
        if (spin > 1000) {
            struct timespec ts = {0, spin > 100000 ? 1000000 : 20000};
            nanosleep(&ts, NULL);
        }
    }
}

MPI_Datatype comm_mpi_type(comm_dtype t) { return t == COMM_F64 ? MPI_DOUBLE : MPI_FLOAT; }
size_t comm_dtype_size(comm_dtype t) { return t == COMM_F64 ? 8 : 4; }

/* ---- collectives ---------------------------------------------------------------- */

static comm_req *start(comm *c, comm_op op, void *recv, const void *send, size_t count, comm_dtype type, int root) {
    comm_impl *im = c->impl;
    comm_req *r = NULL;
    for (int i = 0; i < COMM_POOL && !r; i++)
        if (!im->pool[i].in_use) r = &im->pool[i];
    if (!r) DK_ABORT("comm: more than %d collectives in flight (wait for some)", COMM_POOL);
    r->in_use = 1;
    r->op = op;
    r->seq = announce(c);
    r->t0 = dk_now();
    im->ops->start(c, r, recv, send, count, type, root);
    return r;
}

void comm_wait(comm *c, comm_req *r) {
    if (!r || !r->in_use) DK_ABORT("comm_wait: not a request in flight");
    c->impl->ops->wait(c, r);
    r->in_use = 0;
}

comm_req *comm_all_gather_async(comm *c, void *recv, const void *send, size_t bytes) {
    return start(c, OP_ALL_GATHER, recv, send, bytes, COMM_F32, 0);
}

comm_req *comm_reduce_scatter_async(comm *c, float *recv, const float *send, size_t n) {
    return start(c, OP_REDUCE_SCATTER, recv, send, n, COMM_F32, 0);
}

void comm_all_gather(comm *c, void *recv, const void *send, size_t bytes) {
    comm_wait(c, comm_all_gather_async(c, recv, send, bytes));
}

void comm_reduce_scatter(comm *c, float *recv, const float *send, size_t n) {
    comm_wait(c, comm_reduce_scatter_async(c, recv, send, n));
}

void comm_all_reduce(comm *c, void *buf, size_t n, comm_dtype type) {
    comm_wait(c, start(c, OP_ALL_REDUCE, buf, buf, n, type, 0));
}

void comm_broadcast(comm *c, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->world) DK_ABORT("comm_broadcast: root %d outside the world of %d", root, c->world);
    comm_wait(c, start(c, OP_BROADCAST, buf, buf, bytes, COMM_F32, root));
}

void comm_barrier(comm *c) { comm_wait(c, start(c, OP_BARRIER, NULL, NULL, 0, COMM_F32, 0)); }

void comm_all_reduce_host(comm *c, double *x, size_t n) {
    /* Host values always travel over MPI, whatever moves the device buffers. */
    long seq = announce(c);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, c->impl->host, &req);
    comm_mpi_poll(c, &req, seq, OP_ALL_REDUCE, dk_now());
}

void comm_all_gather_host(comm *c, const void *send, size_t bytes, void **recv, size_t *sizes) {
    /* The lengths first (one all-gather), then the bytes (MPI counts are int:
     * more than 2 GB from one rank is a bug of the caller, not a message). */
    const int w = c->world;
    long long mine = (long long)bytes, *len = dk_malloc((size_t)w * sizeof *len);
    long seq = announce(c);
    MPI_Request req;
    MPI_Iallgather(&mine, 1, MPI_LONG_LONG, len, 1, MPI_LONG_LONG, c->impl->host, &req);
    comm_mpi_poll(c, &req, seq, OP_ALL_GATHER, dk_now());
    int *count = dk_malloc((size_t)w * sizeof *count), *displ = dk_malloc((size_t)w * sizeof *displ);
    long long total = 0;
    for (int r = 0; r < w; r++) {
        if (len[r] > INT_MAX || total + len[r] > INT_MAX)
            DK_ABORT("comm_all_gather_host: %lld bytes from rank %d (%lld in all): more than 2 GB", len[r], r,
                     total + len[r]);
        count[r] = (int)len[r];
        displ[r] = (int)total;
        total += len[r];
        if (sizes) sizes[r] = (size_t)len[r];
    }
    char *out = dk_malloc(total > 0 ? (size_t)total : 1);
    seq = announce(c);
    MPI_Iallgatherv(send, (int)bytes, MPI_BYTE, out, count, displ, MPI_BYTE, c->impl->host, &req);
    comm_mpi_poll(c, &req, seq, OP_ALL_GATHER, dk_now());
    *recv = out;
    free(len);
    free(count);
    free(displ);
}
