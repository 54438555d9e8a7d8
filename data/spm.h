/* spm.h: a small C interface to sentencepiece's SentencePieceProcessor, so
 * the C tokenizer front end (data/tokenizer.h) can open .model files
 * (Llama 2, Gemma, T5 style tokenizers). Implemented in C++ in spm.cc. */
#ifndef DK_SPM_H
#define DK_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/error.h"

typedef struct spm_tokenizer spm_tokenizer;

/* Errors name the path (missing file, not a sentencepiece model). */
dk_status spm_load(const char *path, spm_tokenizer **out);
void spm_free(spm_tokenizer *s);

/* The model's own normalization and pieces; no BOS/EOS is added. *ids is
 * malloc'ed. Safe to call from several threads on one tokenizer. */
dk_status spm_encode(const spm_tokenizer *s, const char *text, size_t len, int32_t **ids, int *n);
/* skip_special drops control pieces (<s>, </s>, <pad>); sentencepiece
 * drops them from the text anyway, so it only matters for the unknown
 * piece, which is kept. *text is malloc'ed and NUL-terminated. */
dk_status spm_decode(const spm_tokenizer *s, const int32_t *ids, int n, int skip_special, char **text, size_t *len);

int spm_vocab_size(const spm_tokenizer *s);
int spm_token_id(const spm_tokenizer *s, const char *piece); /* -1 if absent */
const char *spm_token_str(const spm_tokenizer *s, int id);   /* NULL if out of range */
int spm_is_special(const spm_tokenizer *s, int id);          /* a control piece */

#ifdef __cplusplus
}
#endif

#endif
