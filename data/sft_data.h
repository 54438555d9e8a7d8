/* sft_data.h: the supervised (cold-start) dataset: a JSONL file of
 * conversations, one {"messages": [{"role", "content"}, ...]} per line,
 * rendered with the ChatML template into token ids plus a loss mask that
 * marks what the assistant wrote. Conversations longer than max_length tokens
 * are dropped and counted, never silently cut mid-answer. */
#ifndef DK_SFT_DATA_H
#define DK_SFT_DATA_H

#include <stdint.h>

#include "common/error.h"
#include "data/tokenizer.h"

typedef struct {
    int32_t *ids;
    uint8_t *mask; /* 1 where the token was written by the assistant */
    int n;
    int line;      /* 1-based line in the file, for messages */
} sft_example;

typedef struct {
    sft_example *ex;
    int n;
    int n_too_long; /* dropped: longer than max_length */
    int n_no_target; /* dropped: no assistant token to learn from */
    long n_tokens;   /* in the kept examples */
} sft_dataset;

/* Reads and tokenizes PATH. A malformed line is an error naming PATH:LINE. */
dk_status sft_dataset_load(sft_dataset *ds, const char *path, tokenizer *tok, int max_length);
void sft_dataset_free(sft_dataset *ds);

/* The example at position i of the epoch-th pass: a permutation of all
 * examples keyed by (seed, epoch), so the order needs no saved state. */
int sft_dataset_index(const sft_dataset *ds, uint64_t seed, long i);

#endif
