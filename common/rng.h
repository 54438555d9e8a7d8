/* rng.h: counter-based randomness (docs/DESIGN.md §3): every draw is a pure
 * function of a key such as (seed, step, task, sample), so results do not
 * depend on batch order, world size or what ran before. */
#ifndef DK_RNG_H
#define DK_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* splitmix64's finaliser: a bijective 64-bit mix. */
static inline uint64_t dk_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A key from a seed and up to four counters. */
uint64_t dk_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Position of i in a keyed permutation of [0, n): O(1) per index, no table. */
uint64_t dk_permute(uint64_t i, uint64_t n, uint64_t key);

#ifdef __cplusplus
}
#endif

#endif
