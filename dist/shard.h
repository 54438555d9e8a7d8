/* shard.h: how ZeRO-3 splits one flat parameter unit across ranks. A unit is
 * one of the model's flat buffers (model/params.h): the embedding, each
 * decoder layer, the final norm and the lm head, in that order. A unit of n
 * elements is padded to a multiple of the world size W; every rank owns one
 * equal slice of the padded buffer, and the padding past n belongs to the last
 * ranks and is never read as a parameter. The rule depends only on (n, W, r),
 * so a checkpoint written at one world size can be cut again at another. */
#ifndef DK_DIST_SHARD_H
#define DK_DIST_SHARD_H

#include <stddef.h>

/* Elements in every rank's slice of a unit of n elements at world size w. */
static inline size_t shard_len(size_t n, int w) { return (n + (size_t)w - 1) / (size_t)w; }

/* The unit's padded size: shard_len * w (what an all-gather fills). */
static inline size_t shard_padded(size_t n, int w) { return shard_len(n, w) * (size_t)w; }

/* Rank r's slice [*begin, *end) in unit coordinates, clipped to the n real
 * elements (empty, begin == end, for a rank that holds only padding). */
static inline void shard_range(size_t n, int w, int r, size_t *begin, size_t *end) {
    size_t len = shard_len(n, w), b = len * (size_t)r, e = b + len;
    if (b > n) b = n;
    if (e > n) e = n;
    *begin = b;
    *end = e;
}

#endif
