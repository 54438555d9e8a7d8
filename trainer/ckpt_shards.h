/* ckpt_shards.h: the sharded part of a checkpoint, the interface ZeRO-3
 * calls. Every rank holds, for every unit of the model (model/weights.h: the
 * embedding, each layer, the final norm, the untied lm head), its slice
 * shard_range(n, world, rank) (dist/shard.h) of the fp32 masters and the
 * AdamW moments m and v. Saving, every rank
 *   - writes the bf16 weights of its slices into the model's HF files
 *     (model-0000k-of-0000n.safetensors + index, or model.safetensors; rank 0
 *     creates them first: model/weights_shards.h), and
 *   - writes optim/rank_%05d.bin: a header (version, world size, rank, the
 *     optimizer's step count, the number of units), a table with each unit's
 *     size and this rank's slice [begin, end) of it, then per unit the
 *     slice's fp32 master, m and v.
 * Loading at any world size, every rank reads, for each of its new slices,
 * the pieces from whichever old rank files hold them, so parameters and
 * optimizer state are bit-identical to the saved ones. No rank ever holds
 * more than one unit's slice of the three arrays: the state moves through
 * get / put callbacks one unit at a time.
 *
 * The caller owns the communication: it passes a barrier and, where it has
 * one, an all-reduce of a flag (all_ok), so that every rank learns whether
 * every other one succeeded. Without all_ok a rank that fails returns its
 * error after the barrier; the job must then end (as mpirun does when a rank
 * exits), and no DONE marks the checkpoint complete. */
#ifndef DK_CKPT_SHARDS_H
#define DK_CKPT_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/config.h"
#include "model/params.h"

typedef struct {
    int world, rank;
    void *ctx; /* passed to every callback */
    /* Copies this rank's slice [begin, end) of UNIT into host fp32 arrays
     * (end - begin elements each). Never called for an empty slice. */
    dk_status (*get)(void *ctx, int unit, size_t begin, size_t end, float *master, float *m, float *v);
    /* Installs this rank's slice [begin, end) of UNIT from host fp32 arrays;
     * the arrays are reused after it returns. */
    dk_status (*put)(void *ctx, int unit, size_t begin, size_t end, const float *master, const float *m,
                     const float *v);
    /* Returns when every rank has called it. NULL only at world 1. */
    void (*barrier)(void *ctx);
    /* An all-reduce: 1 when every rank passed ok != 0. Optional: NULL makes a
     * failure on one rank an error on that rank only (see above), and makes
     * every rank check every file at resume instead of a share of them. */
    int (*all_ok)(void *ctx, int ok);
} ckpt_shards_io;

/* Waits for every rank and combines their outcomes: with all_ok, a rank whose
 * own step succeeded gets an error naming WHAT when another failed. */
dk_status ckpt_shards_sync(const ckpt_shards_io *io, dk_status st, const char *what);

/* Every rank: writes the weights (HF, bf16, MAX_SHARD_BYTES per file, 0: one
 * file) and DIR/optim/rank_%05d.bin (DIR/optim must exist); returns the
 * CRC-32C and size of this rank's optimizer file. STEP_T is the optimizer's
 * step count. */
dk_status ckpt_shards_save(const char *dir, const model_config *c, const param_layout *pl, int step_t,
                           size_t max_shard_bytes, const ckpt_shards_io *io, uint32_t *optim_crc,
                           uint64_t *optim_size);
/* Every rank: restores its slices from DIR/optim/rank_*.bin, written at any
 * world size (read from the files), and the step count. Errors name the file
 * and the unit. */
dk_status ckpt_shards_load(const char *dir, const model_config *c, const param_layout *pl, const ckpt_shards_io *io,
                           int *step_t);

/* Every rank: a fresh start from a Hugging Face checkpoint directory
 * (model.path: one model.safetensors or a sharded set): its slices of the
 * weights become the fp32 masters, m and v start at zero. A rank converts
 * only its own slices; the files are mapped, not read whole. */
dk_status ckpt_shards_init_from_hf(const char *dir, const model_config *c, const param_layout *pl,
                                   const ckpt_shards_io *io);

#endif
