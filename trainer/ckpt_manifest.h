/* ckpt_manifest.h: the size and CRC-32C of every file of a checkpoint,
 * recorded in its state.json ("files": {"optim/rank_00000.bin": {"size",
 * "crc32c"}, ...}) and checked at resume, so that a truncated or damaged file
 * is found before anything is loaded from it. Each rank checksums a share of
 * the files (its own optimizer file, computed while it was written, and the
 * model files k with k % world == rank; rank 0 also the small files) and
 * writes the share to DIR/sums/rank_%05d.txt; rank 0 merges the shares into
 * state.json. At resume each rank checks a share again. */
#ifndef DK_CKPT_MANIFEST_H
#define DK_CKPT_MANIFEST_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/config.h"
#include "model/params.h"
#include "trainer/ckpt_shards.h"

/* Every rank, once every file is written: its share into DIR/sums/ (the
 * directory must exist). MAX_SHARD_BYTES is the one the model was saved with. */
dk_status ckpt_manifest_share(const char *dir, const model_config *c, const param_layout *pl, size_t max_shard_bytes,
                              const ckpt_shards_io *io, uint32_t optim_crc, uint64_t optim_size);
/* Rank 0: the WORLD shares into FILES (an object); then _clear removes them. */
dk_status ckpt_manifest_merge(const char *dir, int world, cJSON *files);
void ckpt_manifest_clear(const char *dir, int world);
/* Checks the entries of STATE's "files" with index i % world == rank (every
 * one when ALL): present, of the recorded size, with the recorded CRC-32C;
 * the error names the file. A state.json without "files" (written before
 * checksums were recorded) passes with a warning. */
dk_status ckpt_manifest_verify(const char *dir, const cJSON *state, int world, int rank, int all);

#endif
