/* sample_common.h: the pieces of ops_sample that the CPU reference
 * (sample_cpu.c) and the CUDA kernel (sample.cu) must compute identically, so
 * that both backends draw the same token from the same logits:
 *
 * - the counter-based generator: a uniform in (0, 1) for every (seed,
 *   counter, vocabulary index), from two rounds of the splitmix64 finaliser.
 *   No state is carried between calls, so a draw depends on nothing but its
 *   key: not on the batch a row ran in, nor on the thread that computed it.
 * - the sampling rule: the token is the argmax over the kept tokens of
 *   y_i - log(E_i), with y = logits / T and E_i = -log(u_i) an Exp(1) draw
 *   (the exponential race, the same law as the Gumbel-max trick), so it is
 *   distributed as softmax(y) restricted to the kept set. Ties go to the
 *   lower index.
 * - the truncation masses: top-p compares integer masses
 *   floor(exp(y_i - max y) * 2^40), whose sums are exact in any order, so
 *   the kept set does not depend on how a backend orders its additions.
 * - the order-preserving map from a float to a uint32 key used by the
 *   radix selections of top-k and top-p.
 *
 * Compiled as C (host) and as CUDA (host + device). */
#ifndef DK_SAMPLE_COMMON_H
#define DK_SAMPLE_COMMON_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SAMPLE_FN static __host__ __device__ __forceinline__
#else
#define SAMPLE_FN static inline
#endif

/* Scale of the fixed-point masses: exp(y - max) <= 1 becomes at most 2^40,
 * so a vocabulary of up to 2^23 tokens sums without overflow. */
#define SAMPLE_MASS_SCALE 1099511627776.0f /* 2^40 */

SAMPLE_FN uint64_t sample_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The per-row key: mixes the seed and the counter once per row. */
SAMPLE_FN uint64_t sample_row_key(uint64_t seed, uint64_t counter) {
    return sample_mix64(seed ^ sample_mix64(counter + 0x9e3779b97f4a7c15ull));
}

/* A uniform in (0, 1) for vocabulary index i: 23 random bits k, and
 * (k + 0.5) / 2^23, which fp32 holds exactly for every k, so the value is
 * never 0 or 1. (With 24 bits, k + 0.5 rounds for k >= 2^23, and k = 2^24 - 1
 * rounded to u = 1: -log u = 0 gave that token an infinite race value, a
 * draw ignoring the logits in about 1 row in 110 at a 152k vocabulary.) */
SAMPLE_FN float sample_uniform(uint64_t row_key, uint32_t i) {
    uint64_t x = sample_mix64(row_key + (uint64_t)(i + 1) * 0xd1b54a32d192ed03ull);
    return ((float)(uint32_t)(x >> 41) + 0.5f) * (1.0f / 8388608.0f);
}

/* Order-preserving key of a float: a > b (as floats, no NaN) iff key(a) >
 * key(b) (as unsigned). */
SAMPLE_FN uint32_t sample_float_key(float f) {
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(f);
#else
    memcpy(&u, &f, sizeof u);
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

SAMPLE_FN float sample_key_float(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
#ifdef __CUDA_ARCH__
    f = __uint_as_float(u);
#else
    memcpy(&f, &u, sizeof f);
#endif
    return f;
}

/* The fixed-point mass of a tempered logit y given the row maximum m. */
SAMPLE_FN uint64_t sample_mass(float e) { return (uint64_t)(e * SAMPLE_MASS_SCALE); }

#endif
