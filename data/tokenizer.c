/* tokenizer.c: the tokenizer front end: picks the implementation from the
 * path (a .model file is sentencepiece, anything else a tokenizer.json; a
 * directory is searched for either) and forwards every call to it. */
#define _POSIX_C_SOURCE 200809L
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/bpe.h"
#include "data/spm.h"

struct tokenizer {
    bpe_tokenizer *bpe; /* exactly one of the two is set */
    spm_tokenizer *spm;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

dk_status tokenizer_load(const char *path, tokenizer **out) {
    *out = NULL;
    char buf[4096];
    const char *file = path;
    if (dk_dir_exists(path)) {
        const char *names[] = {"tokenizer.json", "tokenizer.model"};
        file = NULL;
        for (int i = 0; i < 2 && !file; i++) {
            snprintf(buf, sizeof buf, "%s/%s", path, names[i]);
            if (dk_file_exists(buf)) file = buf;
        }
        if (!file)
            return dk_fail(DK_ERR_RUNTIME, "%s: directory has neither tokenizer.json nor tokenizer.model", path);
    }
    tokenizer *t = dk_calloc(1, sizeof *t);
    dk_status st = ends_with(file, ".model") ? spm_load(file, &t->spm) : bpe_load(file, &t->bpe);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return DK_OK;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    bpe_free(t->bpe);
    spm_free(t->spm);
    free(t);
}

dk_status tokenizer_encode(tokenizer *t, const char *text, size_t len, int32_t **ids, int *n) {
    return t->bpe ? bpe_encode(t->bpe, text, len, ids, n) : spm_encode(t->spm, text, len, ids, n);
}

dk_status tokenizer_decode(tokenizer *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len) {
    return t->bpe ? bpe_decode(t->bpe, ids, n, skip_special, text, len)
                  : spm_decode(t->spm, ids, n, skip_special, text, len);
}

int tokenizer_vocab_size(const tokenizer *t) { return t->bpe ? bpe_vocab_size(t->bpe) : spm_vocab_size(t->spm); }

int tokenizer_token_id(const tokenizer *t, const char *token) {
    return t->bpe ? bpe_token_id(t->bpe, token) : spm_token_id(t->spm, token);
}

const char *tokenizer_token_str(const tokenizer *t, int id) {
    return t->bpe ? bpe_token_str(t->bpe, id) : spm_token_str(t->spm, id);
}

int tokenizer_is_special(const tokenizer *t, int id) {
    return t->bpe ? bpe_is_special(t->bpe, id) : spm_is_special(t->spm, id);
}
