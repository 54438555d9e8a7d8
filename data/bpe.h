/* bpe.h: byte-level BPE read from a Hugging Face tokenizer.json (the format
 * of Qwen2/Qwen3, Llama 3, GPT-2). The pipeline is the one the file
 * describes: added tokens split the text first (longest match, never split
 * further), the rest is NFC-normalized when the file asks for it,
 * pre-tokenized by the Split regexes (PCRE2), mapped to the GPT-2 byte
 * alphabet and merged by rank. Callers use data/tokenizer.h, which picks
 * this or sentencepiece by file type. */
#ifndef DK_BPE_H
#define DK_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct bpe_tokenizer bpe_tokenizer;

/* Errors name the path and the offending key (bad JSON, a model type or
 * normalizer this code does not handle, a merge of unknown tokens...). */
dk_status bpe_load(const char *path, bpe_tokenizer **out);
void bpe_free(bpe_tokenizer *b);

/* text must be valid UTF-8 (the error gives the byte offset where it is
 * not). No BOS/EOS is added. *ids is malloc'ed. Safe to call from several
 * threads on one tokenizer. */
dk_status bpe_encode(bpe_tokenizer *b, const char *text, size_t len, int32_t **ids, int *n);
/* Concatenated bytes of the tokens (NUL-terminated, malloc'ed). Ids that cut
 * a multi-byte character leave its partial bytes, so a streaming caller can
 * join pieces; whole encodings of valid text decode to valid text. */
dk_status bpe_decode(const bpe_tokenizer *b, const int32_t *ids, int n, int skip_special, char **text, size_t *len);

int bpe_vocab_size(const bpe_tokenizer *b);                    /* max id + 1, added tokens included */
int bpe_token_id(const bpe_tokenizer *b, const char *token);   /* -1 if absent */
const char *bpe_token_str(const bpe_tokenizer *b, int id);     /* as written in the file; NULL if none */
int bpe_is_special(const bpe_tokenizer *b, int id);            /* an added token marked "special" */

#endif
