/* run_logs.h: the run's append-only logs, RUN_DIR/metrics.jsonl and
 * RUN_DIR/rollouts.jsonl, kept equal to an uninterrupted run's across crashes.
 *
 * Before each checkpoint the logs are fsynced and their byte sizes recorded
 * under that step in RUN_DIR/logs_offsets.json (written to a temporary,
 * fsynced and renamed). A run resumed from step S truncates both logs to the
 * sizes recorded for S, which drops the lines of the steps it is about to redo
 * and any half-written line a kill left, in place and without rewriting what
 * is kept. Where no size was recorded for S (a checkpoint copied from
 * elsewhere, an older run) the complete lines whose "step" is <= S are kept,
 * through a temporary + fsync + rename. */
#ifndef DK_RUN_LOGS_H
#define DK_RUN_LOGS_H

#include "common/error.h"

/* Cuts both logs back to the end of step `step` (0: empties them and forgets
 * every recorded size), so the run appends from there. */
dk_status run_logs_resume(const char *run_dir, int step);
/* Makes the logs durable and records their sizes as the end of `step`; call
 * it after the step's lines are written and before its checkpoint. */
dk_status run_logs_mark(const char *run_dir, int step);

#endif
