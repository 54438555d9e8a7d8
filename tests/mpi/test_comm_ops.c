/* test_comm_ops.c: every collective of dist/comm.h on the CPU backend (mpi),
 * against results computed by hand from the rank and element index, at odd
 * sizes that do not divide by the world size. Run alone (world 1, MPI's
 * singleton) or under mpirun (tests/mpi/test_comm.sh runs 2 and 3 ranks).
 * `test_comm_ops timeout` instead makes the last rank sleep past [dist]
 * timeout_s before a barrier, so the job must end naming that rank;
 * `test_comm_ops fail`: the last rank meets a fatal error (comm_abort_job)
 * while the others wait in a barrier with a long timeout, so the job must
 * end at once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "dist/comm.h"
#include "tests/check.h"

/* What rank r contributes at element j: small integers, so fp32 sums are exact. */
static float val(int r, size_t j) { return (float)((r + 1) * (int)(j % 13) - (int)(j % 5)); }

static void check_sizes(comm *c, size_t n) {
    const int W = c->world, R = c->rank;
    /* all-gather of n bytes per rank, out of place and in place */
    unsigned char *send = malloc(n), *recv = malloc(n * W);
    for (size_t i = 0; i < n; i++) send[i] = (unsigned char)(R * 31 + i);
    comm_all_gather(c, recv, send, n);
    int bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++) bad += recv[r * n + i] != (unsigned char)(r * 31 + i);
    CHECK(bad == 0, "all-gather of %zu bytes: %d wrong bytes", n, bad);
    memset(recv, 0, n * W);
    memcpy(recv + R * n, send, n);
    comm_all_gather(c, recv, recv + R * n, n);
    bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++) bad += recv[r * n + i] != (unsigned char)(r * 31 + i);
    CHECK(bad == 0, "in-place all-gather of %zu bytes: %d wrong bytes", n, bad);

    /* reduce-scatter: rank R gets the sum over ranks of slice R */
    float *fs = malloc(sizeof(float) * n * W), *fr = malloc(sizeof(float) * n);
    for (size_t j = 0; j < n * W; j++) fs[j] = val(R, j);
    comm_reduce_scatter(c, fr, fs, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < W; r++) want += val(r, R * n + i);
        bad += fr[i] != want;
    }
    CHECK(bad == 0, "reduce-scatter of %zu floats per rank: %d wrong", n, bad);

    /* all-reduce fp32 and fp64 */
    for (size_t j = 0; j < n; j++) fr[j] = val(R, j);
    comm_all_reduce(c, fr, n, COMM_F32);
    double *d = malloc(sizeof(double) * n);
    for (size_t j = 0; j < n; j++) d[j] = 0.5 * val(R, j) + 1e-9 * R;
    comm_all_reduce(c, d, n, COMM_F64);
    int bad32 = 0, bad64 = 0;
    for (size_t j = 0; j < n; j++) {
        float w32 = 0;
        double w64 = 0;
        for (int r = 0; r < W; r++) {
            w32 += val(r, j);
            w64 += 0.5 * val(r, j) + 1e-9 * r;
        }
        bad32 += fr[j] != w32;
        bad64 += fabs(d[j] - w64) > 1e-15 * (1 + fabs(w64));
    }
    CHECK(bad32 == 0, "all-reduce fp32 of %zu: %d wrong", n, bad32);
    CHECK(bad64 == 0, "all-reduce fp64 of %zu: %d wrong", n, bad64);

    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++) send[i] = (unsigned char)(R == W - 1 ? 200 - i : 0);
    comm_broadcast(c, send, n, W - 1);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += send[i] != (unsigned char)(200 - i);
    CHECK(bad == 0, "broadcast of %zu bytes from rank %d: %d wrong", n, W - 1, bad);

    /* async: two gathers and a reduce-scatter in flight, waited out of order */
    unsigned char *r1 = calloc(n * W, 1), *r2 = calloc(n * W, 1);
    unsigned char *s2 = malloc(n);
    for (size_t i = 0; i < n; i++) {
        send[i] = (unsigned char)(R + 3 * i);
        s2[i] = (unsigned char)(7 * R + i);
    }
    comm_req *a = comm_all_gather_async(c, r1, send, n);
    comm_req *b = comm_all_gather_async(c, r2, s2, n);
    comm_req *rs = comm_reduce_scatter_async(c, fr, fs, n);
    comm_wait(c, b);
    comm_wait(c, rs);
    comm_wait(c, a);
    bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++)
            bad += r1[r * n + i] != (unsigned char)(r + 3 * i) || r2[r * n + i] != (unsigned char)(7 * r + i);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < W; r++) want += val(r, R * n + i);
        bad += fr[i] != want;
    }
    CHECK(bad == 0, "async collectives of %zu: %d wrong", n, bad);

    double h[3] = {1.0, (double)R, 0.25 * n};
    comm_all_reduce_host(c, h, 3);
    CHECK(h[0] == W && h[1] == W * (W - 1) / 2.0 && h[2] == 0.25 * n * W, "host all-reduce: %g %g %g", h[0], h[1],
          h[2]);
    comm_barrier(c);
    free(send), free(recv), free(fs), free(fr), free(d), free(r1), free(r2), free(s2);
}

int main(int argc, char **argv) {
    comm_launch(&argc, &argv);
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) DK_ABORT("%s", dk_error());
    comm c;
    const int timeout_case = argc > 1 && !strcmp(argv[1], "timeout");
    const int fail_case = argc > 1 && !strcmp(argv[1], "fail");
    if (comm_open(&c, &ctx, COMM_MPI, timeout_case ? 2.0 : 60.0) != DK_OK) DK_ABORT("%s", dk_error());
    if (fail_case) {
        if (c.rank == c.world - 1) comm_abort_job(DK_ERR_RUNTIME, "test: a fatal error on the last rank");
        comm_barrier(&c);
        fprintf(stderr, "rank %d: the barrier completed although the last rank ended\n", c.rank);
        return 3;
    }
    if (timeout_case) {
        comm_barrier(&c); /* everyone arrives at #1 */
        if (c.rank == c.world - 1) sleep(30);
        comm_barrier(&c); /* the last rank is late for #2 */
        fprintf(stderr, "rank %d: the barrier completed although rank %d slept past the timeout\n", c.rank,
                c.world - 1);
        return 3;
    }
    size_t sizes[] = {1, 7, 1001, 65537};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_sizes(&c, sizes[i]);
    comm_backend be;
    int gpu;
    comm_place at = comm_where();
    CHECK(comm_pick(COMM_AUTO, 0, 0, &at, &be, &gpu) == DK_OK && be == COMM_MPI, "auto on the CPU picks mpi");
    CHECK(comm_pick(COMM_NCCL, 0, 0, &at, &be, &gpu) == DK_ERR_USAGE && strstr(dk_error(), "dist] backend"),
          "nccl on the CPU is refused naming [dist] backend: %s", dk_error());
    comm_place four = {0, 4, 3, 4};
    CHECK(comm_pick(COMM_MPI, 1, 2, &four, &be, &gpu) == DK_OK && be == COMM_MPI && gpu == 1,
          "4 local ranks on 2 GPUs share them: rank 3 -> GPU 1 (got %d)", gpu);
    CHECK(comm_pick(COMM_NCCL, 1, 2, &four, &be, &gpu) == DK_ERR_USAGE, "nccl with ranks sharing GPUs is refused");
    comm_place two = {1, 2, 1, 2};
    CHECK(comm_pick(COMM_AUTO, 1, 2, &two, &be, &gpu) == DK_OK && gpu == 1, "own GPU: local rank 1 -> GPU 1");
    comm_close(&c);
    ops_ctx_free(&ctx);
    printf("rank %d of %d: ", at.rank, at.world);
    int rc = check_report();
    comm_finish();
    return rc;
}
