/* test_tokenizer_spm.c: the sentencepiece path of the tokenizer front end
 * (data/spm.cc over libsentencepiece) against the ids and decodes of the
 * Python sentencepiece package for the same model
 * (tests/fixtures/tokenizers/spm/, made by tests/make_tokenizer_fixtures.py),
 * plus piece lookups and the missing-file error. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "data/tokenizer.h"
#include "tests/check.h"

int main(void) {
    const char *env = getenv("DK_SOURCE");
    char model[4096], exp_path[4096];
    snprintf(model, sizeof model, "%s/tests/fixtures/tokenizers/spm/model.model", env ? env : ".");
    snprintf(exp_path, sizeof exp_path, "%s/tests/fixtures/tokenizers/spm/expected.json", env ? env : ".");
    char *text;
    if (dk_read_file(exp_path, &text, NULL)) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    cJSON *expected = cJSON_Parse(text);
    free(text);
    tokenizer *t;
    if (!expected || tokenizer_load(model, &t)) {
        fprintf(stderr, "setup: %s\n", dk_error());
        return 1;
    }

    int vs = tokenizer_vocab_size(t);
    CHECK(vs == cJSON_GetObjectItem(expected, "vocab_size")->valueint, "vocab size %d", vs);
    int im_start = tokenizer_token_id(t, "<|im_start|>"), im_end = tokenizer_token_id(t, "<|im_end|>");
    CHECK(im_start > 0 && im_end > 0 && im_start != im_end, "ChatML pieces: %d %d", im_start, im_end);
    CHECK(strcmp(tokenizer_token_str(t, im_end), "<|im_end|>") == 0, "token_str");
    CHECK(tokenizer_token_id(t, "no such piece") == -1, "absent piece");
    CHECK(tokenizer_token_str(t, vs) == NULL, "token_str out of range");
    int eos = tokenizer_token_id(t, "</s>");
    CHECK(eos >= 0 && tokenizer_is_special(t, eos) && !tokenizer_is_special(t, im_end), "control pieces: </s> = %d", eos);
    printf("vocab %d, <|im_start|> = %d, <|im_end|> = %d, </s> = %d\n", vs, im_start, im_end, eos);

    int bad = 0, bad_dec = 0, n_cases = 0, n_ids = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(expected, "cases")) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "ids");
        int32_t *ids;
        int n;
        CHECK(tokenizer_encode(t, s, strlen(s), &ids, &n) == DK_OK, "encode: %s", dk_error());
        int same = n == cJSON_GetArraySize(want);
        for (int i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(want, i)->valueint;
        if (!same && ++bad <= 5)
            fprintf(stderr, "ids differ for %s: want %s\n", cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "text")),
                    cJSON_PrintUnformatted(want));
        char *out;
        size_t len;
        CHECK(tokenizer_decode(t, ids, n, 0, &out, &len) == DK_OK, "decode: %s", dk_error());
        const char *wd = cJSON_GetObjectItem(c, "decoded")->valuestring;
        if (strcmp(out, wd) != 0 && ++bad_dec <= 5) fprintf(stderr, "decode differs: '%s' vs '%s'\n", out, wd);
        free(out);
        n_cases++;
        n_ids += n;
        free(ids);
    }
    CHECK(bad == 0 && bad_dec == 0, "%d ids / %d decodes differ", bad, bad_dec);
    printf("spm: %d cases, %d ids, %d id mismatches, %d decode mismatches\n", n_cases, n_ids, bad, bad_dec);

    /* Control pieces vanish from the text, skipped or not. */
    int32_t seq[] = {eos, im_end};
    char *out;
    CHECK(tokenizer_decode(t, seq, 2, 1, &out, NULL) == DK_OK && strcmp(out, "<|im_end|>") == 0, "skip special: '%s'",
          out);
    free(out);
    int32_t bad_ids[] = {vs};
    CHECK(tokenizer_decode(t, bad_ids, 1, 0, &out, NULL) != DK_OK && strstr(dk_error(), "position 0"), "bad id: %s",
          dk_error());

    tokenizer *none = NULL;
    const char *missing = "/nonexistent/spm/tokenizer.model";
    CHECK(tokenizer_load(missing, &none) != DK_OK && strstr(dk_error(), missing), "missing: %s", dk_error());
    printf("error (missing): %s\n", dk_error());
    char notspm[256];
    snprintf(notspm, sizeof notspm, "/tmp/dk_test_spm_%d.model", (int)getpid());
    dk_write_file(notspm, "this is not a protobuf", 22);
    CHECK(tokenizer_load(notspm, &none) != DK_OK && strstr(dk_error(), notspm), "not a model: %s", dk_error());
    printf("error (not a model): %s\n", dk_error());
    remove(notspm);

    tokenizer_free(t);
    cJSON_Delete(expected);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
