/* progress.h: a progress bar for the long phases of a step (rollouts,
 * KernelGym waits, evals). On a terminal it redraws one line in place; piped
 * into a file or a CI log it prints a plain line at 0%, 25%, 50%, 75% and at
 * the end, so logs stay short and readable. */
#ifndef DK_PROGRESS_H
#define DK_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;          /* NULL: every call does nothing (e.g. ranks other than 0) */
    int tty;
    char label[48];
    char extra[160];  /* the last extra text, repeated by progress_end */
    long total, done;
    double t0, last_draw;
    int quarter;      /* plain output: quarters (25% marks) already printed */
    long printed;     /* plain output: done of the last printed line, -1 = none */
} progress;

void progress_begin(progress *p, const char *label, long total, FILE *f);
/* done: items finished so far; extra: short status text ("ok 12 | fail 3") or NULL. */
void progress_update(progress *p, long done, const char *extra);
void progress_end(progress *p);

/* Formats one status line into buf (at most n - 1 characters, always
 * NUL-terminated, cut short when n is small), e.g.
 *   rollout [######------------------] 16/64  25% 0:10 1.6/s ETA 0:30 ok 12 | fail 3
 * bar_width 0 leaves the bar out. total <= 0 counts as nothing to do (100%).
 * The rate is per second, or seconds per item when below one per second; the
 * ETA is (total - done) / rate, "--:--" until the first item is done.
 * Returns the length written. */
size_t progress_format(char *buf, size_t n, const char *label, long done, long total, double elapsed,
                       const char *extra, int bar_width);

#endif
