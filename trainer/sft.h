/* sft.h: the supervised fine-tuning run (cold start): conversations from
 * data.train, loss on assistant tokens only, AdamW with warmup + decay,
 * gradient accumulation and global-norm clipping; one metrics line per step. */
#ifndef DK_SFT_H
#define DK_SFT_H

#include "common/error.h"
#include "trainer/config.h"

dk_status sft_run(const dk_config *cfg);

#endif
