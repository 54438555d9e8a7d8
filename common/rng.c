/* rng.c: keys and keyed permutations for rng.h. */
#include "common/rng.h"

uint64_t dk_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    uint64_t x = dk_mix64(seed ^ 0x6a09e667f3bcc909ULL);
    x = dk_mix64(x ^ a);
    x = dk_mix64(x ^ (b + 0x3c6ef372fe94f82bULL));
    x = dk_mix64(x ^ (c + 0xa54ff53a5f1d36f1ULL));
    return dk_mix64(x ^ (d + 0x510e527fade682d1ULL));
}

/* A 4-round Feistel network over the smallest even number of bits covering
 * n, cycle-walking back into [0, n): a bijection whatever n is. */
uint64_t dk_permute(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 2;
    while ((1ULL << bits) < n) bits++;
    if (bits & 1) bits++;
    const int half = bits / 2;
    const uint64_t mask = (1ULL << half) - 1;
    do {
        uint64_t l = i >> half, r = i & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t t = l ^ (dk_mix64(r ^ key ^ ((uint64_t)round << 56)) & mask);
            l = r;
            r = t;
        }
        i = (l << half) | r;
    } while (i >= n);
    return i;
}
