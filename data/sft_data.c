/* sft_data.c: JSONL conversations -> (ids, mask) examples, and the
 * deterministic per-epoch shuffle used to batch them. */
#define _POSIX_C_SOURCE 200809L
#include "data/sft_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "data/chat.h"

dk_status sft_dataset_load(sft_dataset *ds, const char *path, tokenizer *tok, int max_length) {
    memset(ds, 0, sizeof *ds);
    FILE *f = fopen(path, "r");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open SFT data: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, cap_ex = 0;
    dk_status st = DK_OK;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        int blank = 1;
        for (ssize_t i = 0; i < len; i++)
            if (line[i] != ' ' && line[i] != '\t' && line[i] != '\n' && line[i] != '\r') blank = 0;
        if (blank) continue;
        chat_conversation conv = {0};
        st = chat_parse_messages_json(line, &conv);
        sft_example ex = {0};
        if (st == DK_OK) st = chat_encode(tok, conv.msgs, conv.n, 0, &ex.ids, &ex.mask, &ex.n);
        chat_conversation_free(&conv);
        if (st != DK_OK) {
            dk_wrap(st, "%s:%d: ", path, lineno);
            break;
        }
        if (st != DK_OK) break;
        int n_target = 0;
        for (int i = 1; i < ex.n; i++) n_target += ex.mask[i];
        if (ex.n > max_length || n_target == 0) {
            if (ex.n > max_length) ds->n_too_long++;
            else ds->n_no_target++;
            free(ex.ids);
            free(ex.mask);
            continue;
        }
        ex.line = lineno;
        if (ds->n == cap_ex) {
            cap_ex = cap_ex ? 2 * cap_ex : 64;
            ds->ex = dk_realloc(ds->ex, (size_t)cap_ex * sizeof *ds->ex);
        }
        ds->ex[ds->n++] = ex;
        ds->n_tokens += ex.n;
    }
    free(line);
    fclose(f);
    if (st != DK_OK) {
        sft_dataset_free(ds);
        return st;
    }
    if (ds->n == 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: no usable conversation (%d longer than max_length %d, %d without an assistant turn)",
                       path, ds->n_too_long, max_length, ds->n_no_target);
    return DK_OK;
}

void sft_dataset_free(sft_dataset *ds) {
    for (int i = 0; i < ds->n; i++) {
        free(ds->ex[i].ids);
        free(ds->ex[i].mask);
    }
    free(ds->ex);
    memset(ds, 0, sizeof *ds);
}

int sft_dataset_index(const sft_dataset *ds, uint64_t seed, long i) {
    long epoch = i / ds->n;
    return (int)dk_permute((uint64_t)(i % ds->n), (uint64_t)ds->n, dk_key(seed, (uint64_t)epoch, 0, 0, 0));
}
