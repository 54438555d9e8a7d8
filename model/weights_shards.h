/* weights_shards.h: a model's Hugging Face checkpoint one unit range at a
 * time, so that ranks which each hold a shard of every unit (dist/shard.h)
 * can write and read it without any of them holding the whole model.
 *
 * Writing is planned: the plan (which tensors go in which
 * model-0000k-of-0000n.safetensors file, every header, every byte offset) is
 * a pure function of the config, the dtype and the shard byte limit, so every
 * rank computes it alone. Then
 *   rank 0:     weights_plan_create   config.json, every file at its final
 *                                     size with its header, the index
 *   (barrier)
 *   every rank: weights_plan_write    its unit ranges, converted from fp32,
 *                                     pwritten at their final offsets
 *               weights_plan_finish   fsync
 *   (barrier)
 * The files are byte-identical to what weights_save_hf writes in one process
 * (same layout), whatever the number of ranks and however the ranges are cut.
 * This layer knows nothing of MPI: the caller places the barriers.
 *
 * Reading opens a checkpoint directory (one model.safetensors or a sharded set
 * with its index), validates every tensor up front as weights_load_hf does,
 * and then converts any unit range [begin, begin + count) to fp32. */
#ifndef DK_MODEL_WEIGHTS_SHARDS_H
#define DK_MODEL_WEIGHTS_SHARDS_H

#include <stddef.h>

#include "common/error.h"
#include "model/config.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "model/weights.h"

/* The HF tensors of every unit: slots[unit_first[u] .. unit_first[u + 1]). */
typedef struct {
    model_config cfg;
    param_layout pl;
    int n_units, n_slots;
    weights_slot *slots;
    int *unit_first;
} weights_map;

typedef struct {
    weights_map map;
    st_entry *entries; /* names and shapes of the slots, no data */
    st_layout layout;
} weights_plan;

/* MAX_SHARD_BYTES 0: one model.safetensors. */
dk_status weights_plan_init(weights_plan *p, const model_config *c, const param_layout *pl, st_dtype dtype,
                            size_t max_shard_bytes);
void weights_plan_free(weights_plan *p);
/* Rank 0, before any write: DIR/config.json, every file, the index. */
dk_status weights_plan_create(const weights_plan *p, const char *dir);
/* Elements [begin, begin + count) of UNIT from SRC (host fp32), into the
 * HF tensors they belong to. Ranges of different calls may be written by
 * different processes at the same time; they must not overlap. */
dk_status weights_plan_write(const weights_plan *p, const char *dir, int unit, size_t begin, size_t count,
                             const float *src);
/* Flushes every file of the plan, config.json and the index to stable
 * storage (fsync). */
dk_status weights_plan_finish(const weights_plan *p, const char *dir);

typedef struct {
    weights_map map;
    st_reader r;
    const st_tensor **tensor; /* per slot */
} weights_reader;

/* Opens DIR for the model of C: a missing tensor, a wrong shape, an
 * unexpected tensor, or a tied lm_head.weight that differs from the
 * embedding fails here, naming the file and the tensor. */
dk_status weights_reader_open(weights_reader *w, const char *dir, const model_config *c, const param_layout *pl);
/* Elements [begin, begin + count) of UNIT as fp32 into OUT. */
dk_status weights_reader_read(const weights_reader *w, int unit, size_t begin, size_t count, float *out);
void weights_reader_close(weights_reader *w);

#endif
