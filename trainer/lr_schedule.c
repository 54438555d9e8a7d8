/* lr_schedule.c: warmup + decay schedules. Warmup ramps linearly from lr/warmup
 * to lr (step 0 already trains); decay runs from the end of warmup to the last
 * step, reaching min_lr exactly there. */
#include "trainer/lr_schedule.h"

#include <math.h>
#include <string.h>

double lr_at(const lr_schedule *s, int step) {
    if (s->warmup_steps > 0 && step < s->warmup_steps) return s->lr * (double)(step + 1) / s->warmup_steps;
    if (s->kind == LR_CONSTANT) return s->lr;
    int span = s->total_steps - s->warmup_steps - 1;
    double p = span > 0 ? (double)(step - s->warmup_steps) / span : 0.0; /* no room to decay: peak lr */
    if (p < 0) p = 0;
    if (p > 1) p = 1;
    double f = s->kind == LR_COSINE ? 0.5 * (1.0 + cos(3.14159265358979323846 * p)) : 1.0 - p;
    return s->min_lr + (s->lr - s->min_lr) * f;
}

const char *const lr_kind_names[LR_N_KINDS] = {[LR_COSINE] = "cosine", [LR_LINEAR] = "linear",
                                               [LR_CONSTANT] = "constant"};

int lr_kind_parse(const char *name, lr_kind *out) {
    for (int i = 0; i < LR_N_KINDS; i++)
        if (!strcmp(name, lr_kind_names[i])) {
            *out = (lr_kind)i;
            return 0;
        }
    return -1;
}
