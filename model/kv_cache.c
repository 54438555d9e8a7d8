/* kv_cache.c: planning the paged KV cache, its free list and the pages'
 * reference counts. Pages are taken from the top of a stack, so the most
 * recently freed (still warm in caches) are reused first; the order has no
 * effect on results. */
#include "model/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

size_t kv_cache_page_bytes(const model_config *c, int page_size, size_t elem_size) {
    return 2 * (size_t)c->n_layers * (size_t)page_size * (size_t)c->n_kv_heads * (size_t)c->head_dim * elem_size;
}

dk_status kv_cache_create(kv_cache *kv, ops_ctx *ctx, const model_config *c, int page_size, int n_pages) {
    memset(kv, 0, sizeof *kv);
    if (page_size <= 0) return dk_fail(DK_ERR_USAGE, "kv cache: page_size must be positive, got %d", page_size);
    if (n_pages <= 0) return dk_fail(DK_ERR_USAGE, "kv cache: needs at least one page, got %d", n_pages);
    const size_t A = ops_act_size(ctx);
    const size_t layer = (size_t)n_pages * page_size * c->n_kv_heads * c->head_dim * A;
    kv->ctx = ctx;
    kv->n_layers = c->n_layers;
    kv->n_pages = n_pages;
    kv->page_size = page_size;
    kv->n_kv_heads = c->n_kv_heads;
    kv->head_dim = c->head_dim;
    kv->bytes = 2 * layer * (size_t)c->n_layers;
    kv->base = ops_alloc(ctx, kv->bytes);
    kv->k = dk_calloc((size_t)c->n_layers, sizeof(void *));
    kv->v = dk_calloc((size_t)c->n_layers, sizeof(void *));
    for (int l = 0; l < c->n_layers; l++) {
        kv->k[l] = (char *)kv->base + (2 * (size_t)l) * layer;
        kv->v[l] = (char *)kv->base + (2 * (size_t)l + 1) * layer;
    }
    kv->free_list = dk_malloc((size_t)n_pages * sizeof(int32_t));
    /* Page 0 on top, so a fresh cache fills from the start. */
    for (int i = 0; i < n_pages; i++) kv->free_list[i] = n_pages - 1 - i;
    kv->n_free = n_pages;
    kv->refs = dk_calloc((size_t)n_pages, sizeof(int32_t));
    return DK_OK;
}

void kv_cache_free(kv_cache *kv) {
    if (!kv->ctx) return;
    ops_free(kv->ctx, kv->base);
    free(kv->k);
    free(kv->v);
    free(kv->free_list);
    free(kv->refs);
    memset(kv, 0, sizeof *kv);
}

int32_t kv_cache_take(kv_cache *kv) {
    if (kv->n_free == 0) return -1;
    int32_t p = kv->free_list[--kv->n_free];
    kv->refs[p] = 1;
    return p;
}

void kv_cache_ref(kv_cache *kv, int32_t page) {
    if (page < 0 || page >= kv->n_pages || kv->refs[page] <= 0)
        DK_ABORT("kv cache: a holder added to page %d, which is not taken (%d pages)", page, kv->n_pages);
    kv->refs[page]++;
}

int kv_cache_give(kv_cache *kv, const int32_t *pages, int n) {
    int freed = 0;
    for (int i = n - 1; i >= 0; i--) {
        const int32_t p = pages[i];
        if (p < 0 || p >= kv->n_pages || kv->refs[p] <= 0 || kv->n_free >= kv->n_pages)
            DK_ABORT("kv cache: returning page %d (free %d of %d): not a page taken from this cache", p, kv->n_free,
                     kv->n_pages);
        if (--kv->refs[p] > 0) continue;
        kv->free_list[kv->n_free++] = p;
        freed++;
    }
    return freed;
}
