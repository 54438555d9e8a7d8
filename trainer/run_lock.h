/* run_lock.h: one trainer per run directory. A run holds an advisory lock on
 * RUN_DIR/run.lock for its whole life; a second trainer started on the same
 * directory is refused with the owner's pid, host and start time instead of
 * interleaving metrics.jsonl, doubling rollouts.jsonl and racing on the
 * checkpoint temporaries. The lock is an fcntl record lock: the kernel drops
 * it when the owner exits, kill -9 included, so a stale run.lock never blocks
 * a restart, and forked children (the harness, a private Redis) never hold it. */
#ifndef DK_RUN_LOCK_H
#define DK_RUN_LOCK_H

#include "common/error.h"

typedef struct {
    int fd; /* -1 when not held */
} run_lock;

/* Takes RUN_DIR/run.lock (creating RUN_DIR and the file as needed) and writes
 * this process's pid, host and start time into it. Refused (DK_ERR_RUNTIME)
 * while another process holds it; the message names that owner. */
dk_status run_lock_acquire(const char *run_dir, run_lock *l);
/* Drops the lock (the file stays; its content is only informative). */
void run_lock_release(run_lock *l);

#endif
