/* run_begin.c: the checks and writes between resume and the first step. */
#include "trainer/run_begin.h"

#include <stdio.h>

#include "common/durable.h"
#include "trainer/run_logs.h"

dk_status run_begin(const dk_config *cfg, int start, int writes, int *nothing_to_do) {
    *nothing_to_do = 0;
    if (start > cfg->run.steps)
        return dk_fail(DK_ERR_USAGE,
                       "[run] steps = %d is below step %d of the checkpoint this run resumes from (under %s/ckpt): "
                       "a run cannot go back; raise [run] steps, or start afresh in another [run] dir",
                       cfg->run.steps, start, cfg->run.dir);
    if (start == cfg->run.steps) {
        if (writes)
            printf("run: already complete at step %d ([run] steps = %d): nothing to train; raise [run] steps to go on\n",
               start, cfg->run.steps);
        *nothing_to_do = 1;
        return DK_OK;
    }
    if (!writes) return DK_OK;
    DK_TRY(run_logs_resume(cfg->run.dir, start));
    char path[DK_CONFIG_STR + 32], tmp[DK_CONFIG_STR + 40];
    snprintf(path, sizeof path, "%s/config.ini", cfg->run.dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    DK_TRY(config_save(cfg, tmp));
    return dk_rename_durable(tmp, path);
}
