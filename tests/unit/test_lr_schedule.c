/* Learning-rate schedules against hand-computed values: linear warmup from
 * lr/warmup, then cosine / linear decay reaching min_lr exactly at the last
 * step, or constant. */
#include <math.h>
#include <stdio.h>

#include "trainer/lr_schedule.h"

static int fails, checks;
static void near(const char *what, double got, double want) {
    checks++;
    if (fabs(got - want) > 1e-12 * fmax(1.0, fabs(want))) {
        fails++;
        printf("FAIL %s: %.15g, want %.15g\n", what, got, want);
    }
}

int main(void) {
    lr_schedule c = {LR_COSINE, 1e-3, 1e-4, 4, 14};
    near("warmup step 0", lr_at(&c, 0), 0.25e-3);
    near("warmup step 3", lr_at(&c, 3), 1e-3);
    near("cosine start", lr_at(&c, 4), 1e-3);
    /* decay spans steps 4..13 (9 intervals); midpoint 8.5 is not a step, so
     * check step 7: p = 3/9, f = (1 + cos(pi/3)) / 2 = 0.75 */
    near("cosine p=1/3", lr_at(&c, 7), 1e-4 + 0.9e-3 * 0.75);
    near("cosine end", lr_at(&c, 13), 1e-4);
    near("past the end", lr_at(&c, 20), 1e-4);
    lr_schedule l = {LR_LINEAR, 2.0, 0.0, 0, 5};
    near("linear 0", lr_at(&l, 0), 2.0);
    near("linear 2", lr_at(&l, 2), 1.0);
    near("linear 4", lr_at(&l, 4), 0.0);
    lr_schedule k = {LR_CONSTANT, 3e-4, 0.0, 2, 100};
    near("constant warmup", lr_at(&k, 0), 1.5e-4);
    near("constant", lr_at(&k, 50), 3e-4);
    lr_schedule one = {LR_COSINE, 1e-3, 1e-5, 0, 1};
    near("single step keeps the peak", lr_at(&one, 0), 1e-3);
    lr_kind kind;
    checks++;
    if (lr_kind_parse("cosine", &kind) != 0 || kind != LR_COSINE || lr_kind_parse("exp", &kind) == 0) {
        fails++;
        printf("FAIL lr_kind_parse\n");
    }
    printf("%d passed, %d failed\n", checks - fails, fails);
    return fails != 0;
}
