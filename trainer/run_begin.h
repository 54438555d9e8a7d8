/* run_begin.h: what a training run does once it knows where it starts, before
 * its first step: refuse a [run] steps it cannot honour, cut the logs back
 * to the resumed step (run_logs.h) and only then save the resolved config as
 * RUN_DIR/config.ini, so a start that fails leaves the directory as the last
 * run that did start left it. */
#ifndef DK_RUN_BEGIN_H
#define DK_RUN_BEGIN_H

#include "common/error.h"
#include "trainer/config.h"

/* start: the step the run continues from (0 when fresh). Only the rank that
 * owns the run directory (rank 0) passes writes = 1; the others take the same
 * decisions and write nothing. *nothing_to_do is set
 * when start == [run] steps: the run is already complete, a message says so
 * and nothing in the run directory changes. start > [run] steps is a config
 * error (exit 2) naming both numbers. */
dk_status run_begin(const dk_config *cfg, int start, int writes, int *nothing_to_do);

#endif
