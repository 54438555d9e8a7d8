/* test_tokenizer_bpe.c: the byte-level BPE tokenizer against the ids that
 * Hugging Face `tokenizers` gives for the same tokenizer.json
 * (tests/fixtures/tokenizers/bpe/, made by tests/make_tokenizer_fixtures.py):
 * every corpus line, multi-line chunk, edge case and fuzz string must give
 * identical ids and decode to what HF decodes. Also: merges written as
 * "a b" strings, special-token lookups, error messages, invalid UTF-8, a
 * 1 MB timing and concurrent use of one handle. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "data/tokenizer.h"
#include "tests/check.h"

static char src[2048];

static const char *fixture(const char *rel) {
    static char buf[4][4096];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", src, rel);
    return buf[k];
}

static cJSON *load_json(const char *path) {
    char *text;
    if (dk_read_file(path, &text, NULL)) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        fprintf(stderr, "%s: bad JSON\n", path);
        exit(1);
    }
    return j;
}

static tokenizer *must_load(const char *path) {
    tokenizer *t;
    if (tokenizer_load(path, &t)) {
        fprintf(stderr, "load %s: %s\n", path, dk_error());
        exit(1);
    }
    return t;
}

/* Encodes every case and compares with the expected ids; returns mismatches. */
static int check_cases(tokenizer *t, const cJSON *cases, const char *label, int check_decode) {
    int bad = 0, n_cases = 0, n_ids = 0, roundtrip = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        int32_t *ids;
        int n;
        if (tokenizer_encode(t, text, strlen(text), &ids, &n)) {
            CHECK(0, "%s: encode failed: %s", label, dk_error());
            bad++;
            continue;
        }
        int same = n == cJSON_GetArraySize(want);
        for (int i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(want, i)->valueint;
        if (!same) {
            bad++;
            if (bad <= 5) {
                fprintf(stderr, "%s: ids differ for %s\n  got :", label, cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "text")));
                for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n  want: %s\n", cJSON_PrintUnformatted(want));
            }
        }
        n_cases++;
        n_ids += n;
        if (check_decode) {
            const char *keys[2] = {"decoded", "decoded_skip_special"};
            for (int skip = 0; skip < 2; skip++) {
                const cJSON *w = cJSON_GetObjectItem(c, keys[skip]);
                if (!w) continue;
                char *out;
                size_t len;
                CHECK(tokenizer_decode(t, ids, n, skip, &out, &len) == DK_OK, "decode: %s", dk_error());
                CHECK(len == strlen(w->valuestring) && memcmp(out, w->valuestring, len) == 0,
                      "%s: decode(skip=%d) of %s gives '%s'", label, skip, text, out);
                if (!skip && strcmp(out, text) == 0) roundtrip++;
                free(out);
            }
        }
        free(ids);
    }
    printf("%s: %d cases, %d ids, %d mismatching", label, n_cases, n_ids, bad);
    if (check_decode) printf("; decode(encode(x)) == x for %d, the other %d (not NFC) decode to NFC(x) as in HF",
                             roundtrip, n_cases - roundtrip);
    printf("\n");
    return bad;
}

/* Writes a copy of tokenizer.json whose merges use the "a b" string form. */
static void write_string_merges(const char *in, const char *out) {
    cJSON *j = load_json(in);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges");
    cJSON *fresh = cJSON_CreateArray();
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring, cJSON_GetArrayItem(m, 1)->valuestring);
        cJSON_AddItemToArray(fresh, cJSON_CreateString(buf));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "merges", fresh);
    char *s = cJSON_PrintUnformatted(j);
    if (dk_write_file(out, s, strlen(s))) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
    free(s);
    cJSON_Delete(j);
}

/* Loads a variant of the fixture edited by `edit` and checks the error. */
static void expect_load_error(const char *base, void (*edit)(cJSON *), const char *want, const char *label) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/dk_test_tok_%d_%s.json", (int)getpid(), label);
    cJSON *j = load_json(base);
    edit(j);
    char *s = cJSON_PrintUnformatted(j);
    dk_write_file(path, s, strlen(s));
    free(s);
    cJSON_Delete(j);
    tokenizer *t = NULL;
    dk_status st = tokenizer_load(path, &t);
    CHECK(st != DK_OK && strstr(dk_error(), want) && strstr(dk_error(), path),
          "%s: want an error naming '%s' and the path, got status %d: %s", label, want, st, dk_error());
    printf("error (%s): %s\n", label, dk_error());
    tokenizer_free(t);
    remove(path);
}

static void edit_wordpiece(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "type", cJSON_CreateString("WordPiece"));
}
static void edit_nfkc(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "normalizer"), "type", cJSON_CreateString("NFKC"));
}
static void edit_bad_merge(cJSON *j) {
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges"), 3);
    cJSON_ReplaceItemInArray(m, 0, cJSON_CreateString("zzz_not_a_token"));
}

typedef struct {
    tokenizer *t;
    const char *text;
    size_t len;
    const int32_t *want;
    int n_want;
    int ok;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 3; r++) {
        int32_t *ids;
        int n;
        if (tokenizer_encode(j->t, j->text, j->len, &ids, &n)) {
            j->ok = 0;
            return NULL;
        }
        j->ok &= n == j->n_want && memcmp(ids, j->want, (size_t)n * sizeof(int32_t)) == 0;
        free(ids);
    }
    return NULL;
}

int main(void) {
    const char *env = getenv("DK_SOURCE");
    snprintf(src, sizeof src, "%s", env ? env : ".");
    const char *tok_path = fixture("tests/fixtures/tokenizers/bpe/tokenizer.json");
    cJSON *expected = load_json(fixture("tests/fixtures/tokenizers/bpe/expected.json"));
    const cJSON *cases = cJSON_GetObjectItem(expected, "cases");

    double t0 = dk_now();
    tokenizer *t = must_load(tok_path);
    printf("load: %.1f ms\n", 1e3 * (dk_now() - t0));

    /* Vocabulary and special tokens: 507 learned ids + 5 added = 512, the
     * vocab_size of configs/tiny.ini. */
    int vs = tokenizer_vocab_size(t);
    CHECK(vs == cJSON_GetObjectItem(expected, "vocab_size")->valueint && vs == 512, "vocab size %d", vs);
    const char *names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    for (int i = 0; i < 5; i++) {
        int id = tokenizer_token_id(t, names[i]);
        CHECK(id == 507 + i, "%s has id %d", names[i], id);
        CHECK(tokenizer_token_str(t, id) && strcmp(tokenizer_token_str(t, id), names[i]) == 0, "token_str(%d)", id);
        CHECK(tokenizer_is_special(t, id) == (i < 3), "%s special flag", names[i]);
    }
    CHECK(tokenizer_token_id(t, "no such token") == -1, "absent token");
    CHECK(tokenizer_token_str(t, 512) == NULL && tokenizer_token_str(t, -1) == NULL, "token_str out of range");
    int g = tokenizer_token_id(t, "\xc4\xa0"); /* "Ġ", the byte-level space */
    CHECK(g >= 0 && !tokenizer_is_special(t, g), "byte-level space token: %d", g);
    printf("vocab %d, <|im_start|> = %d, <|im_end|> = %d, 'Ġ' = %d\n", vs, tokenizer_token_id(t, "<|im_start|>"),
           tokenizer_token_id(t, "<|im_end|>"), g);

    int bad = check_cases(t, cases, "bpe (list merges)", 1);
    CHECK(bad == 0, "%d cases differ from HF tokenizers", bad);

    /* The same tokenizer with merges as "a b" strings. */
    char alt[256];
    snprintf(alt, sizeof alt, "/tmp/dk_test_tok_%d_strmerges.json", (int)getpid());
    write_string_merges(tok_path, alt);
    tokenizer *t2 = must_load(alt);
    bad = check_cases(t2, cases, "bpe (string merges)", 0);
    CHECK(bad == 0, "string-form merges: %d cases differ", bad);
    tokenizer_free(t2);
    remove(alt);

    /* Variants: GPT-2 ByteLevel regex + prefix space, Llama 3 regex with
     * ignore_merges, added tokens with lstrip/rstrip or matched on
     * normalized text. */
    cJSON *variants = load_json(fixture("tests/fixtures/tokenizers/bpe/variants.json"));
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(variants, "variants")) {
        const char *name = cJSON_GetObjectItem(v, "name")->valuestring;
        char vpath[256];
        snprintf(vpath, sizeof vpath, "/tmp/dk_test_tok_%d_%s.json", (int)getpid(), name);
        char *s = cJSON_PrintUnformatted(cJSON_GetObjectItem(v, "tokenizer"));
        dk_write_file(vpath, s, strlen(s));
        free(s);
        tokenizer *tv = must_load(vpath);
        bad = check_cases(tv, cJSON_GetObjectItem(v, "cases"), name, 0);
        CHECK(bad == 0, "variant %s: %d cases differ", name, bad);
        tokenizer_free(tv);
        remove(vpath);
    }
    cJSON_Delete(variants);

    /* A checkpoint directory finds its tokenizer.json. */
    tokenizer *t3 = must_load(fixture("tests/fixtures/tokenizers/bpe"));
    CHECK(tokenizer_vocab_size(t3) == 512, "directory load");
    tokenizer_free(t3);

    /* Errors name the culprit. */
    tokenizer *none = NULL;
    const char *missing = "/nonexistent/dir/tokenizer.json";
    CHECK(tokenizer_load(missing, &none) != DK_OK && strstr(dk_error(), missing), "missing file: %s", dk_error());
    printf("error (missing): %s\n", dk_error());
    char badjson[256];
    snprintf(badjson, sizeof badjson, "/tmp/dk_test_tok_%d_bad.json", (int)getpid());
    dk_write_file(badjson, "{\"model\": {\n  \"vocab\": [1,,]\n}", 30);
    CHECK(tokenizer_load(badjson, &none) != DK_OK && strstr(dk_error(), badjson) && strstr(dk_error(), "line 2"),
          "bad JSON: %s", dk_error());
    printf("error (bad JSON): %s\n", dk_error());
    remove(badjson);
    expect_load_error(tok_path, edit_wordpiece, "WordPiece", "model_type");
    expect_load_error(tok_path, edit_nfkc, "NFKC", "normalizer");
    expect_load_error(tok_path, edit_bad_merge, "model.merges[3]", "merge");

    int32_t *ids;
    int n;
    CHECK(tokenizer_encode(t, "ok \xff bad", 8, &ids, &n) != DK_OK && strstr(dk_error(), "byte 3"),
          "invalid UTF-8: %s", dk_error());
    printf("error (invalid UTF-8): %s\n", dk_error());
    int32_t bad_ids[] = {1, 2, 9999};
    char *out;
    CHECK(tokenizer_decode(t, bad_ids, 3, 0, &out, NULL) != DK_OK && strstr(dk_error(), "9999"), "bad id: %s",
          dk_error());

    /* 1 MB of mixed text: the corpus repeated. */
    char *corpus;
    size_t clen;
    if (dk_read_file(fixture("tests/fixtures/tokenizers/corpus.txt"), &corpus, &clen)) return 1;
    size_t big_len = 0, target = 1 << 20;
    char *big = dk_malloc(target + clen + 1);
    while (big_len < target) {
        memcpy(big + big_len, corpus, clen);
        big_len += clen;
        big[big_len++] = '\n';
    }
    t0 = dk_now();
    CHECK(tokenizer_encode(t, big, big_len, &ids, &n) == DK_OK, "1 MB encode: %s", dk_error());
    double dt = dk_now() - t0;
    size_t dlen;
    t0 = dk_now();
    CHECK(tokenizer_decode(t, ids, n, 0, &out, &dlen) == DK_OK, "1 MB decode");
    double dt_dec = dk_now() - t0;
    CHECK(dlen == big_len && memcmp(out, big, big_len) == 0, "1 MB round trip");
    printf("1 MB: %zu bytes -> %d ids in %.1f ms (%.1f MB/s), decode %.1f ms\n", big_len, n, 1e3 * dt,
           big_len / dt / 1e6, 1e3 * dt_dec);
    CHECK(dt < 1.0, "encoding 1 MB took %.2f s", dt);
    free(out);

    /* One handle, several threads (the piece cache is shared). */
    pthread_t th[4];
    thread_job jobs[4];
    size_t part = big_len / 8;
    while (part > 0 && big[part - 1] != '\n') part--; /* whole lines: valid UTF-8 */
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, big, part, NULL, 0, 0};
        int32_t *w;
        tokenizer_encode(t, big, part, &w, &jobs[i].n_want);
        jobs[i].want = w;
        pthread_create(&th[i], NULL, encode_thread, &jobs[i]);
    }
    int threads_ok = 1;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        threads_ok &= jobs[i].ok;
        free((void *)jobs[i].want);
    }
    CHECK(threads_ok, "concurrent encodes differ");
    printf("4 threads x 3 encodes of 128 KB: %s\n", threads_ok ? "identical" : "DIFFERENT");
    free(ids);
    free(big);
    free(corpus);

    tokenizer_free(t);
    cJSON_Delete(expected);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
