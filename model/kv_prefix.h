/* kv_prefix.h: the table of full KV pages by content, for prefix sharing.
 *
 * A full page is known by its page_size token ids and by the page before it
 * in its sequence (-1 for a first page). Its K/V depend on exactly those:
 * the page before stands for the whole history, because a sequence only
 * finds a page through the chain of pages it already holds. Two sequences
 * whose first k pages hold the same tokens therefore find the same k pages,
 * and the match is exact: keys are compared, the hash only picks a bucket.
 *
 * An entry is pending while its K/V are still to be written (its page was
 * just handed to a sequence that will prefill it) and ready once the step
 * that writes its last position has been queued: a later step reads it in
 * stream order. The engine (model/generate.c) adds a page when it is full of
 * known tokens and removes it when the page returns to the free list; a
 * parent page outlives its children because every holder of a page holds
 * the pages before it. */
#ifndef DK_MODEL_KV_PREFIX_H
#define DK_MODEL_KV_PREFIX_H

#include <stdint.h>

enum { KV_PREFIX_ABSENT = 0, KV_PREFIX_PENDING = 1, KV_PREFIX_READY = 2 };

typedef struct kv_prefix {
    int n_pages, page_size, n_buckets;
    int32_t *tokens;   /* [n_pages, page_size]: each entered page's tokens */
    int32_t *parent;   /* [n_pages]: the page before it, -1 for a first page */
    uint64_t *hash;    /* [n_pages] */
    int32_t *next;     /* [n_pages]: the next page of its bucket, -1 at the end */
    int32_t *bucket;   /* [n_buckets]: a bucket's first page, -1 when empty */
    uint8_t *state;    /* [n_pages]: KV_PREFIX_* */
    int n_entries;
} kv_prefix;

void kv_prefix_init(kv_prefix *t, int n_pages, int page_size);
void kv_prefix_free(kv_prefix *t);

/* Enters a page holding tokens[0 .. page_size-1] after parent, pending. */
void kv_prefix_add(kv_prefix *t, int32_t page, int32_t parent, const int32_t *tokens);
/* Marks an entered page ready. */
void kv_prefix_ready(kv_prefix *t, int32_t page);
/* Takes a page out of the table (nothing when it is not in). */
void kv_prefix_remove(kv_prefix *t, int32_t page);
static inline int kv_prefix_state(const kv_prefix *t, int32_t page) { return t->state[page]; }

/* The page holding tokens after parent, a ready one before a pending one;
 * -1 when none. *ready says which it is. */
int32_t kv_prefix_find(const kv_prefix *t, int32_t parent, const int32_t *tokens, int *ready);

#endif
