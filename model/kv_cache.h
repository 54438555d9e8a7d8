/* kv_cache.h: the paged KV cache of the generation engine. Memory is one
 * device allocation planned up front: for every layer a K and a V array of
 * [n_pages, page_size, Hkv, D] act elements (the layout ops_kv_write and
 * ops_paged_attention read). Pages are handed out from a free list and
 * reference-counted: conversations that share a prompt hold the same pages
 * (model/kv_prefix.h finds them), and a page returns to the free list when
 * its last holder gives it back. Which sequence holds which page is the
 * engine's business. */
#ifndef DK_MODEL_KV_CACHE_H
#define DK_MODEL_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "model/config.h"

typedef struct kv_cache {
    ops_ctx *ctx;
    int n_layers, n_pages, page_size, n_kv_heads, head_dim;
    void *base;          /* the one allocation */
    void **k, **v;       /* per layer, views into base */
    int32_t *free_list;  /* stack of free page ids */
    int n_free;
    int32_t *refs;       /* [n_pages] holders of each page; 0 for a free page */
    size_t bytes;
} kv_cache;

/* Bytes of one page over all layers, K and V, elem_size bytes per element. */
size_t kv_cache_page_bytes(const model_config *c, int page_size, size_t elem_size);

dk_status kv_cache_create(kv_cache *kv, ops_ctx *ctx, const model_config *c, int page_size, int n_pages);
void kv_cache_free(kv_cache *kv);

/* A free page id with one holder, or -1 when none is left. */
int32_t kv_cache_take(kv_cache *kv);
/* One more holder of a page already taken. */
void kv_cache_ref(kv_cache *kv, int32_t page);
/* Drops one holder of each page; pages left without one return to the
 * pool. Returns how many did. */
int kv_cache_give(kv_cache *kv, const int32_t *pages, int n);

#endif
