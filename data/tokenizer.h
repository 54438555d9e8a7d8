/* tokenizer.h: text <-> token ids for the model. One handle type over the
 * two formats checkpoints ship: a Hugging Face tokenizer.json (byte-level
 * BPE, as Qwen2/Qwen3 and Llama 3 use; data/bpe.c) and a sentencepiece
 * .model (data/spm.cc). Encoding never adds BOS/EOS: the chat template and
 * the data loaders add what the model needs. */
#ifndef DK_TOKENIZER_H
#define DK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct tokenizer tokenizer;

/* path: a tokenizer.json, a sentencepiece *.model, or a checkpoint
 * directory holding tokenizer.json (preferred) or tokenizer.model. Errors
 * name the path: missing file, bad JSON, unsupported model type. */
dk_status tokenizer_load(const char *path, tokenizer **out);
void tokenizer_free(tokenizer *t);

/* text: len bytes of UTF-8. *ids is malloc'ed (free()). A handle may be used
 * by several threads at once. */
dk_status tokenizer_encode(tokenizer *t, const char *text, size_t len, int32_t **ids, int *n);
/* skip_special drops special tokens (<|im_end|>, ...; control pieces for
 * sentencepiece). *text is malloc'ed, NUL-terminated, *len bytes long (len
 * may be NULL). An unknown id is an error naming it and its position. */
dk_status tokenizer_decode(tokenizer *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len);

int tokenizer_vocab_size(const tokenizer *t);                   /* largest id + 1, added tokens included */
int tokenizer_token_id(const tokenizer *t, const char *token);  /* -1 if absent */
const char *tokenizer_token_str(const tokenizer *t, int id);    /* as stored (byte-level form for BPE); NULL if none */
int tokenizer_is_special(const tokenizer *t, int id);

#endif
