/* skinny_plan.h: the plan of a wgmma skinny product (matmul_skinny_wgmma.cu)
 * as plain arithmetic, so that every build, the CPU one included, can test
 * it (tests/unit/test_skinny_plan.c): the block width and the splits of K. */
#ifndef DK_SKINNY_PLAN_H
#define DK_SKINNY_PLAN_H

#ifdef __cplusplus
extern "C" {
#endif

/* Block widths of the wgmma kernel, widest first: 2 x 128, 2 x 96, 128, 96
 * and 64 columns (two consumer warpgroups or one). */
#define SKINNY_PLAN_WIDTHS 5
extern const int skinny_plan_widths[SKINNY_PLAN_WIDTHS];
#define SKINNY_PLAN_MAX_SPLIT 8 /* the portable cluster size */

/* For N columns and K (a multiple of 64) on `sms` multiprocessors, one
 * block each, where clusters[s] (s = 2, 4, 8) is the most clusters of s
 * blocks the GPU holds at once (cudaOccupancyMaxActiveClusters: fewer than
 * sms / s where a GPC's multiprocessors do not divide by s; NULL takes
 * sms / s): of every width and 1, 2, 4 or 8 splits of K (a split plan only
 * where its clusters are all resident in one wave and every split keeps 2
 * stages of 64 or more), the share of whole waves the blocks fill,
 * counting columns past N as idle; of the plans within 2% of the best
 * fill, the one with the fewest splits, the widest of those. Returns the
 * index into skinny_plan_widths; *splits gets the split count. */
int skinny_plan(int sms, const int *clusters, int N, int K, int *splits);

#ifdef __cplusplus
}
#endif

#endif
