/* test_skinny_plan.c: the plan of the wgmma skinny products (kernels/
 * skinny_plan.h) at 132 SMs holding 66 clusters of 2, 30 of 4 and 15 of 8
 * (an H100's answer to cudaOccupancyMaxActiveClusters), against plans
 * worked out by hand from its rule (best fill of whole waves, counting idle
 * columns, split plans only where their clusters all fit at once; of the
 * plans within 2% of the best, the fewest splits, then the widest):
 *   1.7B o        N 2048  K 2048: 96 columns, 22 tiles x 4 splits = 88
 *        blocks (0.646, a tie with 2 x 96 at 11 x 8), where 64 x 4 (32
 *        clusters of 4) and 128 x 8 (16 of 8) would fill 0.970 but do not
 *        fit; without the residency table (sms / s) 64 x 4 is taken
 *   1.7B q|k|v    N 4096  K 2048: 64 columns, 64 x 2 = 128 (0.970)
 *   1.7B gate|up  N 12288 K 2048: 96 columns, 128 blocks, no split (0.970;
 *        2 x 96 at 64 x 2 ties with more splits)
 *   1.7B lm head  N 151936 K 2048: 2 x 96, 792 blocks = 6 whole waves
 *        (0.999; 96 columns tie at 1583 blocks, and the wider wins)
 *   8B down       N 4096  K 12288: 64 columns, 64 x 2 = 128 (0.970)
 *   14B q|k|v     N 7168  K 5120: 64 columns, 112 blocks, no split (0.848,
 *        a tie with 128 at 56 x 2 and 2 x 128 at 28 x 4)
 *   K = 64 (one stage): no split; N 1000 takes 64 columns (16 blocks)
 * and, over a sweep of shapes and tables, its bounds: 1, 2, 4 or 8 splits,
 * and where K is split every cluster resident at once and every split 2
 * stages or more. */
#include <stdio.h>

#include "kernels/skinny_plan.h"
#include "tests/check.h"

static const int h100[SKINNY_PLAN_MAX_SPLIT + 1] = {0, 0, 66, 0, 30, 0, 0, 0, 15};

static void expect(const char *what, const int *clusters, int N, int K, int cols, int splits) {
    int ns = 0;
    const int w = skinny_plan(132, clusters, N, K, &ns);
    CHECK(w >= 0 && w < SKINNY_PLAN_WIDTHS && skinny_plan_widths[w] == cols && ns == splits,
          "%s (N %d, K %d): %d columns x %d splits, want %d x %d", what, N, K,
          w >= 0 && w < SKINNY_PLAN_WIDTHS ? skinny_plan_widths[w] : -1, ns, cols, splits);
}

int main(void) {
    expect("1.7B o", h100, 2048, 2048, 96, 4);
    expect("1.7B o, no residency table", NULL, 2048, 2048, 64, 4);
    expect("1.7B q|k|v", h100, 4096, 2048, 64, 2);
    expect("1.7B gate|up", h100, 12288, 2048, 96, 1);
    expect("1.7B lm head", h100, 151936, 2048, 192, 1);
    expect("8B down", h100, 4096, 12288, 64, 2);
    expect("14B q|k|v", h100, 7168, 5120, 64, 1);
    expect("one stage", h100, 1000, 64, 64, 1);

    int bad = 0, plans = 0;
    for (int sms = 60; sms <= 144; sms += 12)
        for (int t = 0; t < 2; t++) {
            /* t = 1: a GPU whose GPCs leave a tenth of the clusters idle */
            int clusters[SKINNY_PLAN_MAX_SPLIT + 1] = {0};
            for (int s = 2; s <= SKINNY_PLAN_MAX_SPLIT; s *= 2) clusters[s] = t ? sms / s * 9 / 10 : sms / s;
            for (int N = 8; N <= 200000; N = N * 3 / 2 + 8)
                for (int K = 64; K <= 20480; K *= 2) {
                    int ns = 0;
                    const int w = skinny_plan(sms, clusters, N, K, &ns);
                    plans++;
                    if (w < 0 || w >= SKINNY_PLAN_WIDTHS || (ns != 1 && ns != 2 && ns != 4 && ns != 8)) {
                        bad++;
                        continue;
                    }
                    const long tiles = (N + skinny_plan_widths[w] - 1) / skinny_plan_widths[w];
                    if (ns > 1 && (tiles > clusters[ns] || tiles * ns > sms || (K / 64) / ns < 2)) bad++;
                }
        }
    CHECK(bad == 0, "%d of %d plans break the bounds", bad, plans);
    printf("skinny plans: 8 worked cases; %d plans within bounds\n", plans);
    return check_report();
}
