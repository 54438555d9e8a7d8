/* zero_ckpt.h: the checkpoint interface (trainer/ckpt_shards.h) of a ZeRO-3
 * model (trainer/zero.h). A sharded run saves and resumes the normal
 * checkpoint: each rank moves its own slices of the fp32 masters and AdamW
 * moments, one unit at a time, and the ranks meet through the run's comm.
 * The shard rule of both sides is dist/shard.h's, so a slice the checkpoint
 * asks for is always the one zero holds. */
#ifndef DK_ZERO_CKPT_H
#define DK_ZERO_CKPT_H

#include "trainer/ckpt_shards.h"
#include "trainer/zero.h"

/* get / put through zero_shard_get / set, barrier and all_ok through z->c. */
ckpt_shards_io zero_ckpt_io(zero *z);
/* The same for a fresh start (ckpt_shards_init_from_hf): put sets the act
 * shard and takes the master back from it, as zero_load_host does, so a
 * start from HF weights matches the unsharded trainer's (optim_init). */
ckpt_shards_io zero_ckpt_io_init(zero *z);

#endif
