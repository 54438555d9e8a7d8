/* checkpoint.h: checkpoints (docs/DESIGN.md §13). A checkpoint is a directory
 *   RUN_DIR/ckpt/step_00000100/
 *     model.safetensors (+ index) and config.json   HF names, bf16: servable as is
 *     optim/rank_00000.bin                           fp32 master, m, v of this rank's
 *                                                    shard, with global flat offsets
 *     state.json                                     step, seed, data cursor, world size
 *     config.ini                                     the run's resolved config
 *     DONE                                           written last
 * It is written to step_X.tmp/ and renamed, so a crash never leaves a
 * directory that resume would take for complete. Resume restores the fp32
 * masters from the optimizer file, so it is bit-exact even though the
 * safetensors copy is bf16. */
#ifndef DK_CHECKPOINT_H
#define DK_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"
#include "trainer/config.h"
#include "trainer/optim.h"

typedef struct {
    int step;         /* optimizer steps completed */
    long data_cursor; /* examples (or tasks) consumed */
    uint64_t seed;
    int world_size;
} ckpt_state;

/* Writes the checkpoint of `st->step` and prunes all but the newest `keep`
 * complete ones (keep 0: keep all). */
dk_status ckpt_save(const char *run_dir, const model *m, const optim *o, const dk_config *cfg, const ckpt_state *st,
                    int keep);
/* The newest complete checkpoint under RUN_DIR/ckpt (path empty when none). */
dk_status ckpt_find_latest(const char *run_dir, char *path, size_t n);
/* Restores parameters, optimizer state and the state of a checkpoint directory
 * (one written by ckpt_save with the same model shape); errors name the file. */
dk_status ckpt_load(const char *path, model *m, optim *o, ckpt_state *st);
/* Applies [ckpt] resume: auto takes the newest complete checkpoint of the run
 * directory (none there: a fresh start), a path takes that one, none starts
 * fresh. *start is the step to continue from (0 when fresh). */
dk_status ckpt_resume(const dk_config *cfg, model *m, optim *o, int *start);

#endif
