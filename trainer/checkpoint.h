/* checkpoint.h: checkpoints (docs/DESIGN.md §13). A checkpoint is a directory
 *   RUN_DIR/ckpt/step_00000100/
 *     model.safetensors, or model-0000k-of-0000n.safetensors + index,
 *     and config.json                     HF names, bf16: servable as is
 *     optim/rank_%05d.bin                 per rank: fp32 master, m, v of its
 *                                         shard of every unit (ckpt_shards.h)
 *     state.json                          step, seed, data cursor, world size,
 *                                         run id, and the size and CRC-32C of
 *                                         every other file
 *     config.ini                          the run's resolved config
 *     DONE                                written last
 * It is written to step_X.tmp/, every file and directory is fsynced, and only
 * then is it renamed, so neither a crash nor a power cut leaves a directory
 * that resume would take for complete. Resume checks every file against
 * state.json (a truncated or damaged file fails, naming it) and falls back to
 * the previous complete checkpoint with a warning. It restores the fp32
 * masters from the optimizer files, so it is bit-exact even though the
 * safetensors copy is bf16, and it re-shards when the world size changed.
 *
 * Each process is one run with its own run id. Pruning (ckpt.keep) keeps the
 * newest checkpoints of this run first and then, while room is left, the
 * newest of earlier runs: a run never deletes what it just wrote, even beside
 * an earlier run's checkpoint of a higher step. */
#ifndef DK_CHECKPOINT_H
#define DK_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"
#include "trainer/ckpt_shards.h"
#include "trainer/config.h"
#include "trainer/optim.h"

typedef struct {
    int step;         /* optimizer steps completed */
    long data_cursor; /* examples (or tasks) consumed */
    uint64_t seed;
    int world_size;
} ckpt_state;

/* The run id this process writes into its checkpoints (made on first use). */
const char *ckpt_run_id(void);

/* Writes the checkpoint of `st->step` and prunes all but the newest `keep`
 * complete ones (keep 0: keep all). */
dk_status ckpt_save(const char *run_dir, const model *m, const optim *o, const dk_config *cfg, const ckpt_state *st,
                    int keep);
/* Checks a checkpoint directory (DONE, state.json, every file's size and
 * checksum) and restores parameters, optimizer state and the state; errors
 * name the file. */
dk_status ckpt_load(const char *path, model *m, optim *o, ckpt_state *st);
/* Applies [ckpt] resume: auto takes the newest complete checkpoint of the run
 * directory that passes its checks (none there: a fresh start), a path takes
 * that one, none starts fresh: refused (DK_ERR_USAGE) when the run directory
 * already holds checkpoints, unless ckpt.overwrite deletes them. *start is the
 * step to continue from (0 when fresh). */
dk_status ckpt_resume(const dk_config *cfg, model *m, optim *o, int *start);

/* The same for every rank of a sharded run: the model's state moves through
 * IO (ckpt_shards.h); rank 0 writes the files of the whole checkpoint, the
 * ranks share the checksum work. STEP_T is the optimizer's step count;
 * MAX_SHARD_BYTES bounds each HF file (0: one file). */
dk_status ckpt_save_shards(const char *run_dir, const model_config *c, const param_layout *pl, int step_t,
                           const ckpt_shards_io *io, const dk_config *cfg, const ckpt_state *st, int keep,
                           size_t max_shard_bytes);
/* The HF shard limit ckpt_save uses (the 5 GB of transformers' save_pretrained). */
#define CKPT_MAX_SHARD_BYTES ((size_t)5000000000u)
dk_status ckpt_load_shards(const char *path, const model_config *c, const param_layout *pl, const ckpt_shards_io *io,
                           ckpt_state *st, int *step_t);
/* *step_t is left alone on a fresh start. */
dk_status ckpt_resume_shards(const dk_config *cfg, const model_config *c, const param_layout *pl,
                             const ckpt_shards_io *io, int *start, int *step_t);

#endif
