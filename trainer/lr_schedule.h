/* lr_schedule.h: learning-rate schedules (linear warmup, then cosine, linear
 * or constant decay to min_lr). Pure functions of the step, so a resumed run
 * gets the same rate without saved state. */
#ifndef DK_LR_SCHEDULE_H
#define DK_LR_SCHEDULE_H

typedef enum { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2 } lr_kind;
enum { LR_N_KINDS = LR_CONSTANT + 1 };
/* The schedules' names, indexed by lr_kind: read by lr_kind_parse and the run
 * config's train.schedule key. */
extern const char *const lr_kind_names[LR_N_KINDS];

typedef struct {
    lr_kind kind;
    double lr, min_lr;
    int warmup_steps, total_steps;
} lr_schedule;

/* Rate for optimizer step `step` (0-based). */
double lr_at(const lr_schedule *s, int step);
int lr_kind_parse(const char *name, lr_kind *out); /* 0 ok, -1 unknown */

#endif
