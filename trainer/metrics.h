/* metrics.h: the run's metrics log, one JSON object per line in
 * RUN_DIR/metrics.jsonl, written and flushed at every step so a crash loses
 * nothing and a plotting tool can tail it. Every number also goes to a
 * TensorBoard event file under RUN_DIR/tb, so `tensorboard --logdir RUN_DIR`
 * shows the curves. */
#ifndef DK_METRICS_H
#define DK_METRICS_H

#include <stdio.h>

#include "common/error.h"
#include "trainer/tensorboard.h"

typedef struct {
    FILE *f;
    char line[8192];
    int len;
    int step;
    tb_writer tb;
    int have_tb;
} metrics_log;

/* Opens RUN_DIR/metrics.jsonl for appending: run_logs_resume (run_logs.h)
 * has cut it back to the step the run continues from. */
dk_status metrics_open(metrics_log *m, const char *run_dir);
void metrics_begin(metrics_log *m, int step);
void metrics_add(metrics_log *m, const char *key, double value);
void metrics_add_str(metrics_log *m, const char *key, const char *value);
void metrics_end(metrics_log *m); /* writes the line and flushes */
void metrics_close(metrics_log *m);

#endif
