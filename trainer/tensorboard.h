/* tensorboard.h: TensorBoard event files in the run directory, so that
 * `tensorboard --logdir RUN_DIR` draws the training curves with no extra
 * tool. A writer appends scalar Events (tensorflow's event.proto, encoded by
 * hand) framed as TFRecords; there is no dependency on TensorFlow or protobuf. */
#ifndef DK_TENSORBOARD_H
#define DK_TENSORBOARD_H

#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

typedef struct {
    FILE *f;
    char path[4096];
    int err; /* errno of the first failed write (0 = none), reported by tb_flush */
} tb_writer;

/* Creates LOGDIR (mkdir -p) and LOGDIR/events.out.tfevents.<unix time>.<host>
 * (".N" appended if that name exists), and writes the file_version Event. */
dk_status tb_open(tb_writer *w, const char *logdir);
/* One Event{wall_time, step, summary{value{tag, simple_value}}}; the value is
 * stored as a float, NaN and infinities as they are. */
void tb_scalar(tb_writer *w, const char *tag, int64_t step, double value);
/* Flushes to the OS; returns the first write error since tb_open, if any
 * (the message names the file). */
dk_status tb_flush(tb_writer *w);
/* Flushes and closes; returns what tb_flush would, or the close error. */
dk_status tb_close(tb_writer *w);

#endif
