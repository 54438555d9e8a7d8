/* test_comm_async.c: the mpi backend's async collectives run while the
 * caller computes. On the CPU backend, for several sizes: an async
 * all-gather (and a reduce-scatter) is issued, the caller computes without
 * calling MPI until the progress thread reports the collective done (at most
 * 20 s), then comm_wait; the result must equal the same collective run
 * synchronously and the hand-computed values, and the collective must have
 * completed before comm_wait was called (where MPI granted
 * MPI_THREAD_MULTIPLE; else the test says so and checks the results only).
 * A host all-reduce on the caller's thread while an async gather is in
 * flight checks that the two threads' collectives do not mix. Prints the
 * time of gather + compute run one after the other and overlapped. Run
 * alone (world 1) or under mpirun (tests/mpi/test_comm_overlap.sh runs 2 and 3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm_internal.h"
#include "tests/check.h"

/* Stands for a layer's compute: touches no MPI, takes a while. */
static double compute(float *x, size_t n, int rounds) {
    double s = 0;
    for (int k = 0; k < rounds; k++)
        for (size_t i = 0; i < n; i++) {
            x[i] = x[i] * 0.999f + 0.001f * (float)(i % 7);
            s += x[i];
        }
    return s;
}

static unsigned char byte_of(int r, size_t i) { return (unsigned char)(r * 37 + i * 11 + (i >> 9)); }

static void check_size(comm *c, size_t n, int threaded) {
    const int W = c->world, R = c->rank;
    unsigned char *send = malloc(n), *a = calloc(n * W, 1), *s = calloc(n * W, 1);
    for (size_t i = 0; i < n; i++) send[i] = byte_of(R, i);
    const size_t m = 1 << 16;
    float *x = malloc(m * sizeof(float)), *y = malloc(m * sizeof(float));
    for (size_t i = 0; i < m; i++) x[i] = y[i] = (float)(i % 101);

    /* async gather, compute until the thread reports it done, wait */
    comm_req *q = comm_all_gather_async(c, a, send, n);
    int rounds = 0, early = 0;
    double t0 = dk_now(), got = 0;
    do {
        got += compute(x, m, 1);
        rounds++;
        early = comm_mpi_done(c, q);
    } while (threaded && !early && dk_now() - t0 < 20.0);
    comm_wait(c, q);
    if (threaded) CHECK(early, "all-gather of %zu bytes: not done after %.1f s of compute before comm_wait", n, dk_now() - t0);
    double want = 0;
    for (int k = 0; k < rounds; k++) want += compute(y, m, 1);
    CHECK(got == want, "compute beside the gather: %.17g, alone %.17g", got, want);

    comm_all_gather(c, s, send, n);
    int bad_sync = 0, bad_hand = 0;
    for (int r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++) {
            bad_sync += a[r * n + i] != s[r * n + i];
            bad_hand += a[r * n + i] != byte_of(r, i);
        }
    CHECK(bad_sync == 0, "async all-gather of %zu bytes differs from the synchronous one in %d bytes", n, bad_sync);
    CHECK(bad_hand == 0, "async all-gather of %zu bytes: %d bytes differ from the hand-computed ones", n, bad_hand);

    /* async reduce-scatter with a host all-reduce on this thread meanwhile */
    const size_t k = n / 4 + 1;
    float *fs = malloc(sizeof(float) * k * W), *fa = malloc(sizeof(float) * k), *fb = malloc(sizeof(float) * k);
    for (size_t j = 0; j < k * W; j++) fs[j] = (float)((R + 1) * (int)(j % 17) - (int)(j % 3));
    comm_req *rs = comm_reduce_scatter_async(c, fa, fs, k);
    double h[2] = {1.0, (double)R};
    comm_all_reduce_host(c, h, 2);
    CHECK(h[0] == W && h[1] == W * (W - 1) / 2.0, "host all-reduce beside an async reduce-scatter: %g %g", h[0], h[1]);
    comm_wait(c, rs);
    comm_reduce_scatter(c, fb, fs, k);
    int bad = 0;
    for (size_t i = 0; i < k; i++) {
        float w = 0;
        for (int r = 0; r < W; r++) w += (float)((r + 1) * (int)((R * k + i) % 17) - (int)((R * k + i) % 3));
        bad += fa[i] != fb[i] || fa[i] != w;
    }
    CHECK(bad == 0, "async reduce-scatter of %zu floats: %d differ from the synchronous / hand-computed ones", k, bad);

    /* the time it takes one after the other, and overlapped */
    comm_barrier(c);
    double t1 = dk_now();
    comm_all_gather(c, s, send, n);
    compute(x, m, rounds);
    double serial = dk_now() - t1;
    comm_barrier(c);
    t1 = dk_now();
    q = comm_all_gather_async(c, a, send, n);
    compute(x, m, rounds);
    comm_wait(c, q);
    double overlapped = dk_now() - t1;
    if (R == 0)
        printf("all-gather of %zu bytes a rank at world %d with %d compute rounds: serial %.2f ms, overlapped %.2f ms\n",
               n, W, rounds, serial * 1e3, overlapped * 1e3);
    free(send), free(a), free(s), free(x), free(y), free(fs), free(fa), free(fb);
}

int main(int argc, char **argv) {
    comm_launch(&argc, &argv);
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) DK_ABORT("%s", dk_error());
    comm c;
    if (comm_open(&c, &ctx, COMM_MPI, 60.0) != DK_OK) DK_ABORT("%s", dk_error());
    const int threaded = comm_thread_level() >= MPI_THREAD_MULTIPLE;
    if (!threaded && c.rank == 0) printf("MPI grants no MPI_THREAD_MULTIPLE: results checked, overlap not\n");
    size_t sizes[] = {1, 4099, 1 << 20, 8 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_size(&c, sizes[i], threaded);
    const int rank = c.rank, world = c.world;
    comm_close(&c);
    ops_ctx_free(&ctx);
    printf("rank %d of %d: ", rank, world);
    int rc = check_report();
    comm_finish();
    return rc;
}
