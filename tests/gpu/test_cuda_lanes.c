/* test_cuda_lanes.c: an upload on the copy lane into memory fresh from
 * ops_alloc survives the allocation's zeroing. ops_upload_lane copies at
 * once, beside the context's stream; ops_alloc queues its zeroing on that
 * stream, so when the stream still has work queued the zeroing runs late,
 * and unless the lane waits for it (kernels/event.cu) it wipes the upload.
 *
 * Each case first queues about 40 GiB of memsets on the stream (some
 * milliseconds of work, where the upload takes microseconds), then
 * allocates, uploads a known pattern on the lane at once, and reads the
 * buffer back once the stream is done: it must hold the pattern. Two cases:
 * the lane made by that first upload, and the lane already there (the
 * allocation makes it wait). A third checks that the download lane, from a
 * fresh buffer, sees the zeroing and not what the memory held before. */
#include "tests/gpu/test_cuda_common.h"

#define BACKLOG_BYTES ((size_t)1 << 30)
#define BACKLOG_ROUNDS 40
#define N_WORDS ((size_t)1 << 18) /* 1 MiB */

/* Some milliseconds of work queued on g's stream. */
static void queue_backlog(ops_ctx *g, void *big) {
    for (int i = 0; i < BACKLOG_ROUNDS; i++) ops_zero(g, big, BACKLOG_BYTES);
}

/* Allocates behind a backlog and uploads src there on the lane at once;
 * returns how many words read back differ from src. */
static size_t upload_fresh(ops_ctx *g, void *big, const uint32_t *src) {
    queue_backlog(g, big);
    void *d = ops_alloc(g, N_WORDS * sizeof(uint32_t));
    ops_upload_lane(g, d, src, N_WORDS * sizeof(uint32_t));
    ops_sync(g);
    uint32_t *back = dk_malloc(N_WORDS * sizeof(uint32_t));
    ops_download(g, back, d, N_WORDS * sizeof(uint32_t));
    size_t bad = 0;
    for (size_t i = 0; i < N_WORDS; i++) bad += back[i] != src[i];
    free(back);
    ops_free(g, d);
    return bad;
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    ops_ctx *g = &p.gpu;
    void *big = ops_alloc(g, BACKLOG_BYTES);
    uint32_t *src = ops_host_alloc(g, N_WORDS * sizeof(uint32_t));
    for (size_t i = 0; i < N_WORDS; i++) src[i] = 0x9e3779b9u * (uint32_t)(i + 1) | 1u; /* never 0 */

    size_t bad = upload_fresh(g, big, src);
    printf("lane made by the first upload: %zu of %zu words lost\n", bad, N_WORDS);
    CHECK(bad == 0, "upload into a fresh buffer on a new lane: %zu words lost to the zeroing", bad);
    bad = upload_fresh(g, big, src);
    printf("lane already there: %zu of %zu words lost\n", bad, N_WORDS);
    CHECK(bad == 0, "upload into a fresh buffer on an existing lane: %zu words lost to the zeroing", bad);

    /* Download lane: a fresh buffer reads back as zeros. */
    queue_backlog(g, big);
    void *d = ops_alloc(g, N_WORDS * sizeof(uint32_t));
    uint32_t *down = ops_host_alloc(g, N_WORDS * sizeof(uint32_t));
    memcpy(down, src, N_WORDS * sizeof(uint32_t));
    ops_event *ev = ops_event_new(g);
    ops_download_lane(g, down, d, N_WORDS * sizeof(uint32_t), ev);
    ops_event_sync(g, ev);
    size_t nonzero = 0;
    for (size_t i = 0; i < N_WORDS; i++) nonzero += down[i] != 0;
    printf("download lane from a fresh buffer: %zu nonzero words\n", nonzero);
    CHECK(nonzero == 0, "download from a fresh buffer: %zu words not zero", nonzero);

    ops_event_free(g, ev);
    ops_free(g, d);
    ops_host_free(g, down);
    ops_host_free(g, src);
    ops_free(g, big);
    pair_free(&p);
    return test_finish("test_cuda_lanes");
}
