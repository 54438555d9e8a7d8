/* skinny_plan.c: the block width and split count of a wgmma skinny
 * product (skinny_plan.h); host arithmetic only. */
#include "kernels/skinny_plan.h"

const int skinny_plan_widths[SKINNY_PLAN_WIDTHS] = {256, 192, 128, 96, 64};

int skinny_plan(int sms, int N, int K, int *splits) {
    const int kst = K / 64;
    double fill[SKINNY_PLAN_WIDTHS], best = 0.0;
    int ns_of[SKINNY_PLAN_WIDTHS];
    for (int i = 0; i < SKINNY_PLAN_WIDTHS; i++) {
        const int cols = skinny_plan_widths[i];
        const long tiles = ((long)N + cols - 1) / cols;
        fill[i] = -1.0, ns_of[i] = 1;
        for (int ns = 1; ns <= SKINNY_PLAN_MAX_SPLIT; ns++) {
            if (ns > 1 && (tiles * ns > sms || kst / ns < 2)) break;
            const long blocks = tiles * ns, waves = (blocks + sms - 1) / sms;
            const double f = (double)N / (double)(tiles * cols) * (double)blocks / (double)(waves * sms);
            if (f > fill[i] + 1e-9) fill[i] = f, ns_of[i] = ns;
        }
        if (fill[i] > best) best = fill[i];
    }
    int pick = SKINNY_PLAN_WIDTHS - 1;
    for (int i = SKINNY_PLAN_WIDTHS - 1; i >= 0; i--)
        if (fill[i] >= 0.98 * best) pick = i;
    *splits = ns_of[pick];
    return pick;
}
