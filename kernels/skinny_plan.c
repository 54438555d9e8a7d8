/* skinny_plan.c: the block width and split count of a wgmma skinny
 * product (skinny_plan.h); host arithmetic only.
 *
 * Why this rule. A product of up to 64 rows reads W once, and its speed is
 * how many multiprocessors stream W at once and how long each keeps its
 * ring of stages full. Splitting K puts more blocks on the GPU but
 * shortens each block's stream and adds a reduction across the cluster;
 * a split plan whose clusters do not all fit at once runs a second wave of
 * short blocks. So: the best fill of whole waves, of those plans within 2%
 * of it the fewest splits, then the widest block (each block reads A
 * again; a wider one reads less of it). */
#include "kernels/skinny_plan.h"

const int skinny_plan_widths[SKINNY_PLAN_WIDTHS] = {256, 192, 128, 96, 64};

int skinny_plan(int sms, const int *clusters, int N, int K, int *splits) {
    enum { NS = 4 };
    static const int split_counts[NS] = {1, 2, 4, 8};
    const int kst = K / 64;
    double fill[SKINNY_PLAN_WIDTHS][NS], best = 0.0;
    for (int i = 0; i < SKINNY_PLAN_WIDTHS; i++) {
        const int cols = skinny_plan_widths[i];
        const long tiles = ((long)N + cols - 1) / cols;
        for (int j = 0; j < NS; j++) {
            const int ns = split_counts[j];
            fill[i][j] = -1.0;
            if (ns > 1 && (tiles > (clusters ? clusters[ns] : sms / ns) || tiles * ns > sms || kst / ns < 2)) continue;
            const long blocks = tiles * ns, waves = (blocks + sms - 1) / sms;
            fill[i][j] = (double)N / (double)(tiles * cols) * (double)blocks / (double)(waves * sms);
            if (fill[i][j] > best) best = fill[i][j];
        }
    }
    for (int j = 0; j < NS; j++)
        for (int i = 0; i < SKINNY_PLAN_WIDTHS; i++)
            if (fill[i][j] >= 0.98 * best) {
                *splits = split_counts[j];
                return i;
            }
    *splits = 1; /* not reached: the best plan is within 2% of itself */
    return SKINNY_PLAN_WIDTHS - 1;
}
