/* test_tokenizer_nfc.c: NFC normalization (data/unicode.c) against the NFC
 * normalizer of Hugging Face `tokenizers` (tests/fixtures/tokenizers/nfc.json,
 * made by tests/make_tokenizer_fixtures.py): every code point on its own,
 * and random strings of combining marks, decomposable letters and Hangul
 * jamo, which exercise reordering, blocking and composition. The quick
 * check must never call a string NFC that normalization would change. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/unicode.h"

int main(void) {
    const char *env = getenv("DK_SOURCE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/nfc.json", env ? env : ".");
    char *text;
    if (dk_read_file(path, &text, NULL)) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return 1;

    /* Expected output per code point: itself unless listed as changed. */
    const cJSON *changed = cJSON_GetObjectItem(j, "changed_singletons");
    const char **want = dk_calloc(0x110000, sizeof(char *));
    const cJSON *it;
    cJSON_ArrayForEach(it, changed) want[cJSON_GetArrayItem(it, 0)->valueint] = cJSON_GetArrayItem(it, 1)->valuestring;

    int bad_single = 0, bad_quick = 0, n_single = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        char in[5];
        int n = unicode_utf8_encode(cp, in);
        in[n] = '\0';
        char *out;
        size_t len;
        unicode_nfc(in, (size_t)n, &out, &len);
        const char *w = want[cp] ? want[cp] : in;
        if (strcmp(out, w) != 0 && ++bad_single <= 5) fprintf(stderr, "U+%04X: got '%s', want '%s'\n", cp, out, w);
        if (unicode_is_nfc_quick(in, (size_t)n) && strcmp(out, in) != 0 && ++bad_quick <= 5)
            fprintf(stderr, "U+%04X: quick check says NFC but it changes\n", cp);
        free(out);
        n_single++;
    }

    int bad_str = 0, n_str = 0, n_changed = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "strings")) {
        const char *s = cJSON_GetArrayItem(it, 0)->valuestring, *w = cJSON_GetArrayItem(it, 1)->valuestring;
        char *out;
        size_t len;
        unicode_nfc(s, strlen(s), &out, &len);
        if ((len != strlen(w) || strcmp(out, w) != 0) && ++bad_str <= 5)
            fprintf(stderr, "string %d: got '%s', want '%s'\n", n_str, out, w);
        if (unicode_is_nfc_quick(s, strlen(s)) && strcmp(s, w) != 0 && ++bad_quick <= 5)
            fprintf(stderr, "string %d: quick check says NFC but it changes\n", n_str);
        n_changed += strcmp(s, w) != 0;
        free(out);
        n_str++;
    }

    /* All strings joined by newlines, which nothing composes with: NFC
     * works span by span inside one long text, so this must equal the
     * per-string results joined the same way. */
    size_t cap = 1 << 16, nj = 0, nw = 0;
    char *joined = dk_malloc(cap), *joined_want = dk_malloc(cap);
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "strings")) {
        const char *s = cJSON_GetArrayItem(it, 0)->valuestring, *w = cJSON_GetArrayItem(it, 1)->valuestring;
        size_t ls = strlen(s), lw = strlen(w);
        if (nj + ls + 2 > cap || nw + lw + 2 > cap) {
            cap *= 2;
            joined = dk_realloc(joined, cap);
            joined_want = dk_realloc(joined_want, cap);
        }
        memcpy(joined + nj, s, ls);
        memcpy(joined_want + nw, w, lw);
        nj += ls;
        nw += lw;
        joined[nj++] = '\n';
        joined_want[nw++] = '\n';
    }
    char *jout;
    size_t jlen;
    unicode_nfc(joined, nj, &jout, &jlen);
    int bad_joined = jlen != nw || memcmp(jout, joined_want, nw) != 0;
    if (bad_joined) fprintf(stderr, "joined strings: NFC differs (%zu vs %zu bytes)\n", jlen, nw);
    free(jout);
    free(joined);
    free(joined_want);

    /* UTF-8 validation. */
    struct { const char *s; size_t len, valid; } v[] = {
        {"abc", 3, 3}, {"a\xc3\xa9", 3, 3}, {"a\xc3", 2, 1}, {"\xc0\x80", 2, 0}, {"x\xed\xa0\x80", 4, 1},
        {"\xf4\x90\x80\x80", 4, 0}, {"ok\xf0\x9f\x9a\x80", 6, 6}, {"\x80", 1, 0},
    };
    int bad_utf8 = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (unicode_utf8_valid_prefix(v[i].s, v[i].len) != v[i].valid) {
            bad_utf8++;
            fprintf(stderr, "utf8 case %zu: valid prefix %zu, want %zu\n", i, unicode_utf8_valid_prefix(v[i].s, v[i].len),
                    v[i].valid);
        }

    printf("nfc: %d code points (%d change) with %d mismatches; %d strings (%d change) with %d mismatches; "
           "joined: %s; %d quick-check errors; %d UTF-8 validation errors\n",
           n_single, cJSON_GetArraySize(changed), bad_single, n_str, n_changed, bad_str,
           bad_joined ? "DIFFERS" : "same", bad_quick, bad_utf8);
    free(want);
    cJSON_Delete(j);
    int fail = bad_single || bad_str || bad_joined || bad_quick || bad_utf8;
    printf("%s\n", fail ? "FAILED" : "ok");
    return fail ? 1 : 0;
}
