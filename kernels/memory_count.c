/* memory_count.c: live allocations of a context in an open-addressing table
 * keyed by pointer (linear probing, deletion by backward shift), and their
 * byte total and peak. The table only grows; an op never allocates, so it
 * is touched by the few hundred buffers a run makes, not per op. A mutex
 * guards it: the generation engine and the comm layer may allocate from
 * their own threads. */
#include "kernels/memory_count.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/util.h"

typedef struct {
    void *p;
    size_t bytes;
} mem_slot;

struct ops_mem_count {
    pthread_mutex_t lock;
    mem_slot *slot;
    size_t cap, used; /* cap is a power of two */
    size_t bytes, peak;
};

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const struct ops_mem_count *c, const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (c->cap - 1);
}

static void put(struct ops_mem_count *c, void *p, size_t bytes) {
    size_t i = slot_of(c, p);
    while (c->slot[i].p) i = (i + 1) & (c->cap - 1);
    c->slot[i].p = p;
    c->slot[i].bytes = bytes;
}

static void grow(struct ops_mem_count *c) {
    mem_slot *old = c->slot;
    size_t old_cap = c->cap;
    c->cap = old_cap ? 2 * old_cap : 256;
    c->slot = dk_calloc(c->cap, sizeof(mem_slot));
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].p) put(c, old[i].p, old[i].bytes);
    free(old);
}

/* Made with the context (mem_count_init); lazily for a context that was
 * only zeroed. */
static struct ops_mem_count *count_of(ops_ctx *ctx) {
    pthread_mutex_lock(&create_lock);
    if (!ctx->mem) {
        struct ops_mem_count *c = dk_calloc(1, sizeof *c);
        pthread_mutex_init(&c->lock, NULL);
        ctx->mem = c;
    }
    pthread_mutex_unlock(&create_lock);
    return ctx->mem;
}

void mem_count_init(ops_ctx *ctx) { (void)count_of(ctx); }

void mem_count_add(ops_ctx *ctx, void *p, size_t bytes) {
    if (!p) return;
    struct ops_mem_count *c = count_of(ctx);
    pthread_mutex_lock(&c->lock);
    if (2 * (c->used + 1) > c->cap) grow(c);
    put(c, p, bytes);
    c->used++;
    c->bytes += bytes;
    if (c->bytes > c->peak) c->peak = c->bytes;
    pthread_mutex_unlock(&c->lock);
}

void mem_count_remove(ops_ctx *ctx, void *p) {
    if (!p) return;
    struct ops_mem_count *c = count_of(ctx);
    pthread_mutex_lock(&c->lock);
    size_t i = c->cap ? slot_of(c, p) : 0;
    while (c->cap && c->slot[i].p && c->slot[i].p != p) i = (i + 1) & (c->cap - 1);
    if (!c->cap || !c->slot[i].p) { /* not counted (made before the count, or by a copy of the context) */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->bytes -= c->slot[i].bytes;
    c->used--;
    /* Backward shift: pull later entries of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & (c->cap - 1); c->slot[j].p; j = (j + 1) & (c->cap - 1)) {
        size_t home = slot_of(c, c->slot[j].p);
        /* j's entry may move to hole when home is not cyclically in (hole, j]. */
        if (((j - home) & (c->cap - 1)) >= ((j - hole) & (c->cap - 1))) {
            c->slot[hole] = c->slot[j];
            hole = j;
        }
    }
    c->slot[hole].p = NULL;
    c->slot[hole].bytes = 0;
    pthread_mutex_unlock(&c->lock);
}

void mem_count_free(ops_ctx *ctx) {
    struct ops_mem_count *c = ctx->mem;
    if (!c) return;
    pthread_mutex_destroy(&c->lock);
    free(c->slot);
    free(c);
    ctx->mem = NULL;
}

/* One of the two counts, read under the lock. */
static size_t count_read(ops_ctx *ctx, int peak) {
    struct ops_mem_count *c = count_of(ctx);
    pthread_mutex_lock(&c->lock);
    size_t b = peak ? c->peak : c->bytes;
    pthread_mutex_unlock(&c->lock);
    return b;
}

size_t ops_mem_bytes(ops_ctx *ctx) { return count_read(ctx, 0); }

size_t ops_mem_peak(ops_ctx *ctx) { return count_read(ctx, 1); }

void ops_mem_peak_reset(ops_ctx *ctx) {
    struct ops_mem_count *c = count_of(ctx);
    pthread_mutex_lock(&c->lock);
    c->peak = c->bytes;
    pthread_mutex_unlock(&c->lock);
}
