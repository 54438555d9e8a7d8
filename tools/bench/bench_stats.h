/* bench_stats.h: the order statistics the benchmarks report: a qsort
 * comparison of doubles and the median of a few timings (each benchmark
 * is one program, so the header holds the code). */
#ifndef DK_BENCH_STATS_H
#define DK_BENCH_STATS_H

#include <stdlib.h>
#include <string.h>

static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (1 <= n <= 64), v left as it was. */
static inline double bench_median(const double *v, int n) {
    double s[64];
    memcpy(s, v, (size_t)n * sizeof s[0]);
    qsort(s, (size_t)n, sizeof s[0], bench_cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

#endif
