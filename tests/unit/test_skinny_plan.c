/* test_skinny_plan.c: the plan of the wgmma skinny products (kernels/
 * skinny_plan.h) at 132 SMs (H100 and H200 SXM), against plans worked out
 * by hand from its rule (fill of whole waves, counting idle columns; the
 * widest within 2% of the best; its fewest splits):
 *   1.7B gate|up  N 12288 K 2048: 2 x 96 columns, 64 tiles x 2 splits = 128
 *        blocks (0.970), where 128 columns give 96 blocks (0.727)
 *   1.7B q|k|v    N 4096  K 2048: 2 x 128, 16 x 8 = 128 (0.970)
 *   1.7B o, down  N 2048  K 2048, 6144: 128, 16 x 8 (0.970; 96 columns tie
 *        at 22 x 6 with 3% of their columns idle, and the wider wins)
 *   1.7B lm head  N 151936 K 2048: 2 x 96, 792 blocks = 6 whole waves
 *        (0.999), where 2 x 128 leaves the fifth wave 0.5 full (0.899)
 *   8B gate|up    N 24576 K 4096: 2 x 96, 128 blocks, no split
 *   14B q|k|v     N 7168  K 5120: 2 x 128, 28 x 4 = 112 (0.848, a tie
 *        with 2 x 96 at 38 x 3 and 128 at 56 x 2: the widest)
 *   K = 64 (one stage): no split; N 1000 takes 64 columns (16 blocks)
 * and, over a sweep of shapes, its bounds: 1 to 8 splits, and where K is
 * split every block in one wave and every split 2 stages or more. */
#include <stdio.h>

#include "kernels/skinny_plan.h"
#include "tests/check.h"

static void expect(const char *what, int N, int K, int cols, int splits) {
    int ns = 0;
    const int w = skinny_plan(132, N, K, &ns);
    CHECK(w >= 0 && w < SKINNY_PLAN_WIDTHS && skinny_plan_widths[w] == cols && ns == splits,
          "%s (N %d, K %d): %d columns x %d splits, want %d x %d", what, N, K,
          w >= 0 && w < SKINNY_PLAN_WIDTHS ? skinny_plan_widths[w] : -1, ns, cols, splits);
}

int main(void) {
    expect("1.7B gate|up", 12288, 2048, 192, 2);
    expect("1.7B q|k|v", 4096, 2048, 256, 8);
    expect("1.7B o", 2048, 2048, 128, 8);
    expect("1.7B down", 2048, 6144, 128, 8);
    expect("1.7B lm head", 151936, 2048, 192, 1);
    expect("8B gate|up", 24576, 4096, 192, 1);
    expect("14B q|k|v", 7168, 5120, 256, 4);
    expect("one stage", 1000, 64, 64, 1);

    int bad = 0, plans = 0;
    for (int sms = 60; sms <= 144; sms += 12)
        for (int N = 8; N <= 200000; N = N * 3 / 2 + 8)
            for (int K = 64; K <= 20480; K *= 2) {
                int ns = 0;
                const int w = skinny_plan(sms, N, K, &ns);
                plans++;
                if (w < 0 || w >= SKINNY_PLAN_WIDTHS || ns < 1 || ns > SKINNY_PLAN_MAX_SPLIT) {
                    bad++;
                    continue;
                }
                const long tiles = (N + skinny_plan_widths[w] - 1) / skinny_plan_widths[w];
                if (ns > 1 && (tiles * ns > sms || (K / 64) / ns < 2)) bad++;
            }
    CHECK(bad == 0, "%d of %d plans break the bounds", bad, plans);
    printf("skinny plans: 8 worked cases; %d plans within bounds\n", plans);
    return check_report();
}
