/* kv_prefix.c: the page table of kv_prefix.h: chained buckets over a hash of
 * (parent page, tokens), with every key compared in full on a lookup. */
#include "model/kv_prefix.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/util.h"

/* FNV-1a over the parent id and the token ids, then a final mix so that
 * the low bits (the bucket) depend on every input bit. */
static uint64_t key_hash(int32_t parent, const int32_t *tokens, int n) {
    uint64_t h = 1469598103934665603ull;
    h = (h ^ (uint32_t)parent) * 1099511628211ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)tokens[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

void kv_prefix_init(kv_prefix *t, int n_pages, int page_size) {
    memset(t, 0, sizeof *t);
    t->n_pages = n_pages;
    t->page_size = page_size;
    t->n_buckets = 1;
    while (t->n_buckets < n_pages) t->n_buckets *= 2;
    t->tokens = dk_malloc((size_t)n_pages * (size_t)page_size * sizeof(int32_t));
    t->parent = dk_malloc((size_t)n_pages * sizeof(int32_t));
    t->hash = dk_malloc((size_t)n_pages * sizeof(uint64_t));
    t->next = dk_malloc((size_t)n_pages * sizeof(int32_t));
    t->state = dk_calloc((size_t)n_pages, 1);
    t->bucket = dk_malloc((size_t)t->n_buckets * sizeof(int32_t));
    for (int i = 0; i < t->n_buckets; i++) t->bucket[i] = -1;
}

void kv_prefix_free(kv_prefix *t) {
    free(t->tokens);
    free(t->parent);
    free(t->hash);
    free(t->next);
    free(t->state);
    free(t->bucket);
    memset(t, 0, sizeof *t);
}

void kv_prefix_add(kv_prefix *t, int32_t page, int32_t parent, const int32_t *tokens) {
    if (page < 0 || page >= t->n_pages || t->state[page] != KV_PREFIX_ABSENT)
        DK_ABORT("kv prefix: page %d entered twice or out of range (%d pages)", page, t->n_pages);
    const int P = t->page_size;
    memcpy(t->tokens + (size_t)page * P, tokens, (size_t)P * sizeof(int32_t));
    t->parent[page] = parent;
    t->hash[page] = key_hash(parent, tokens, P);
    const int b = (int)(t->hash[page] & (uint64_t)(t->n_buckets - 1));
    t->next[page] = t->bucket[b];
    t->bucket[b] = page;
    t->state[page] = KV_PREFIX_PENDING;
    t->n_entries++;
}

void kv_prefix_ready(kv_prefix *t, int32_t page) {
    if (t->state[page] == KV_PREFIX_ABSENT) DK_ABORT("kv prefix: page %d marked ready but not entered", page);
    t->state[page] = KV_PREFIX_READY;
}

void kv_prefix_remove(kv_prefix *t, int32_t page) {
    if (t->state[page] == KV_PREFIX_ABSENT) return;
    const int b = (int)(t->hash[page] & (uint64_t)(t->n_buckets - 1));
    int32_t *link = &t->bucket[b];
    while (*link != page) {
        if (*link < 0) DK_ABORT("kv prefix: page %d is marked entered but missing from its bucket", page);
        link = &t->next[*link];
    }
    *link = t->next[page];
    t->state[page] = KV_PREFIX_ABSENT;
    t->n_entries--;
}

int32_t kv_prefix_find(const kv_prefix *t, int32_t parent, const int32_t *tokens, int *ready) {
    const int P = t->page_size;
    const uint64_t h = key_hash(parent, tokens, P);
    int32_t pending = -1;
    for (int32_t p = t->bucket[h & (uint64_t)(t->n_buckets - 1)]; p >= 0; p = t->next[p]) {
        if (t->hash[p] != h || t->parent[p] != parent ||
            memcmp(t->tokens + (size_t)p * P, tokens, (size_t)P * sizeof(int32_t)))
            continue;
        if (t->state[p] == KV_PREFIX_READY) {
            *ready = 1;
            return p;
        }
        if (pending < 0) pending = p;
    }
    *ready = 0;
    return pending;
}
