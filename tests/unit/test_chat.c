/* test_chat.c: the ChatML template (data/chat.c) against Hugging Face:
 * tests/fixtures/tokenizers/chat.json holds conversations, their rendered
 * string, the ids `tokenizers` gives for that string and the loss mask
 * derived from the token offsets (a token is the assistant's when it
 * overlaps an assistant content span or its <|im_end|>). chat_encode must
 * reproduce both exactly. Also: the generation prompt, error messages of
 * the JSONL parser, every SFT conversation of tests/fixtures/sft/tiny.jsonl
 * within 256 tokens, and the template over a sentencepiece model. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/chat.h"
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

static tokenizer *must_load(const char *path) {
    tokenizer *t;
    if (tokenizer_load(path, &t)) {
        fprintf(stderr, "%s\n", dk_error());
        exit(1);
    }
    return t;
}

static void check_fixture(tokenizer *t) {
    char *text;
    if (dk_read_file(fixture("tests/fixtures/tokenizers/chat.json"), &text, NULL)) exit(1);
    cJSON *j = cJSON_Parse(text);
    free(text);
    int n_cases = 0, bad_ids = 0, bad_mask = 0, n_tok = 0, n_masked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const cJSON *msgs = cJSON_GetObjectItem(c, "messages");
        int nm = cJSON_GetArraySize(msgs);
        chat_message *m = dk_calloc((size_t)nm, sizeof *m);
        for (int i = 0; i < nm; i++) {
            m[i].role = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, i), "role")->valuestring;
            m[i].content = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, i), "content")->valuestring;
        }
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        int32_t *ids;
        uint8_t *mask;
        int n;
        CHECK(chat_encode(t, m, nm, gen, &ids, &mask, &n) == DK_OK, "chat_encode: %s", dk_error());
        const cJSON *wi = cJSON_GetObjectItem(c, "ids"), *wm = cJSON_GetObjectItem(c, "mask");
        int same_ids = n == cJSON_GetArraySize(wi), same_mask = same_ids;
        for (int i = 0; same_ids && i < n; i++) same_ids = ids[i] == cJSON_GetArrayItem(wi, i)->valueint;
        for (int i = 0; same_mask && i < n; i++) same_mask = mask[i] == cJSON_GetArrayItem(wm, i)->valueint;
        if (!same_ids || !same_mask) {
            fprintf(stderr, "case %d (%s): ids %s, mask %s\n  got ids:", n_cases,
                    cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "text")), same_ids ? "ok" : "DIFFER",
                    same_mask ? "ok" : "DIFFERS");
            for (int i = 0; i < n; i++) fprintf(stderr, " %d/%d", ids[i], mask[i]);
            fprintf(stderr, "\n  want ids: %s\n  want mask: %s\n", cJSON_PrintUnformatted(wi),
                    cJSON_PrintUnformatted(wm));
        }
        bad_ids += !same_ids;
        bad_mask += !same_mask;
        /* The rendered string, encoded in one go, gives the same ids. */
        const char *rendered = cJSON_GetObjectItem(c, "text")->valuestring;
        int32_t *whole;
        int nw;
        CHECK(tokenizer_encode(t, rendered, strlen(rendered), &whole, &nw) == DK_OK && nw == n &&
                  memcmp(whole, ids, (size_t)n * sizeof(int32_t)) == 0,
              "case %d: segment-wise and whole-string encodings differ", n_cases);
        free(whole);
        for (int i = 0; i < n; i++) n_masked += mask[i];
        n_tok += n;
        n_cases++;
        free(ids);
        free(mask);
        free(m);
    }
    CHECK(bad_ids == 0 && bad_mask == 0, "%d id and %d mask mismatches", bad_ids, bad_mask);
    printf("chat fixture: %d conversations, %d tokens (%d masked in), %d id and %d mask mismatches\n", n_cases, n_tok,
           n_masked, bad_ids, bad_mask);
    cJSON_Delete(j);
}

/* A hand-checked case: which tokens are the assistant's. */
static void check_by_hand(tokenizer *t) {
    chat_message m[] = {{"system", "S"}, {"user", "hi"}, {"assistant", "ok"}};
    int32_t *ids;
    uint8_t *mask;
    int n;
    CHECK(chat_encode(t, m, 3, 1, &ids, &mask, &n) == DK_OK, "%s", dk_error());
    int32_t s = tokenizer_token_id(t, "<|im_start|>"), e = tokenizer_token_id(t, "<|im_end|>");
    int32_t *ok_ids, *nl_ids;
    int n_ok, n_nl;
    tokenizer_encode(t, "ok", 2, &ok_ids, &n_ok);
    tokenizer_encode(t, "\n", 1, &nl_ids, &n_nl);
    /* Last tokens: ... "ok" <|im_end|> "\n" <|im_start|> "assistant" "\n" */
    int32_t *gen;
    int n_gen;
    CHECK(chat_generation_prompt(t, &gen, &n_gen) == DK_OK && gen[0] == s, "generation prompt");
    int tail = n_ok + 1 + n_nl + n_gen;
    CHECK(n > tail, "too short");
    int k = n - tail;
    int masked = 0;
    for (int i = 0; i < n; i++) masked += mask[i];
    CHECK(masked == n_ok + 1, "masked %d tokens, want %d ('ok' + <|im_end|>)", masked, n_ok + 1);
    for (int i = 0; i < n_ok; i++) CHECK(ids[k + i] == ok_ids[i] && mask[k + i] == 1, "content token %d", i);
    CHECK(ids[k + n_ok] == e && mask[k + n_ok] == 1, "closing <|im_end|> is masked in");
    CHECK(ids[k + n_ok + 1] == nl_ids[0] && mask[k + n_ok + 1] == 0, "newline after <|im_end|> is masked out");
    CHECK(memcmp(ids + n - n_gen, gen, (size_t)n_gen * sizeof(int32_t)) == 0, "generation prompt at the end");
    CHECK(ids[0] == s && mask[0] == 0, "first token");
    printf("by hand: %d tokens, %d masked in (the assistant's 'ok' and its <|im_end|>), prompt of %d tokens\n", n,
           masked, n_gen);
    free(ids);
    free(mask);
    free(ok_ids);
    free(nl_ids);
    free(gen);

    chat_message bad[] = {{"user", "x"}, {"robot", "y"}};
    CHECK(chat_encode(t, bad, 2, 0, &ids, &mask, &n) != DK_OK && strstr(dk_error(), "'robot'") &&
              strstr(dk_error(), "message 1"),
          "unknown role: %s", dk_error());
    printf("error (role): %s\n", dk_error());
}

static void check_parser(void) {
    chat_conversation c;
    const char *good = "{\"id\": 7, \"messages\": [{\"role\": \"system\", \"content\": \"be \\\"brief\\\"\"}, "
                       "{\"role\": \"user\", \"content\": \"hi\\n\"}, {\"role\": \"assistant\", \"content\": \"\"}]}\r\n";
    CHECK(chat_parse_messages_json(good, &c) == DK_OK, "parse: %s", dk_error());
    CHECK(c.n == 3 && strcmp(c.msgs[0].content, "be \"brief\"") == 0 && strcmp(c.msgs[1].content, "hi\n") == 0 &&
              strcmp(c.msgs[2].role, "assistant") == 0 && c.msgs[2].content[0] == '\0',
          "parsed messages");
    chat_conversation_free(&c);
    struct {
        const char *json, *want;
    } bad[] = {
        {"{\"messages\": [", "invalid JSON at byte"},
        {"{\"messages\": []} trailing", "invalid JSON at byte 17"},
        {"[1, 2]", "\"messages\" list"},
        {"{\"msgs\": []}", "\"messages\" list"},
        {"{\"messages\": []}", "\"messages\" is empty"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, 5]}", "messages[1] is not an object"},
        {"{\"messages\": [{\"content\": \"a\"}]}", "messages[0]: \"role\""},
        {"{\"messages\": [{\"role\": \"bot\", \"content\": \"a\"}]}", "messages[0]: unknown role 'bot'"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "messages[0] (user): \"content\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dk_status st = chat_parse_messages_json(bad[i].json, &c);
        CHECK(st != DK_OK && strstr(dk_error(), bad[i].want) && c.n == 0 && !c.msgs,
              "parse error %zu: got '%s', want '%s'", i, dk_error(), bad[i].want);
        printf("error (json %zu): %s\n", i, dk_error());
    }
}

static void check_sft(tokenizer *t) {
    char *text;
    if (dk_read_file(fixture("tests/fixtures/sft/tiny.jsonl"), &text, NULL)) {
        CHECK(0, "%s", dk_error());
        return;
    }
    int line = 0, longest = 0, multi = 0;
    long total = 0, masked = 0;
    for (char *s = text, *nl; *s; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl) nl = s + strlen(s) - 1;
        else *nl = '\0';
        line++;
        chat_conversation c;
        if (chat_parse_messages_json(s, &c)) {
            CHECK(0, "tiny.jsonl:%d: %s", line, dk_error());
            continue;
        }
        int32_t *ids;
        uint8_t *mask;
        int n;
        CHECK(chat_encode(t, c.msgs, c.n, 0, &ids, &mask, &n) == DK_OK, "tiny.jsonl:%d: %s", line, dk_error());
        int mine = 0;
        for (int i = 0; i < n; i++) mine += mask[i];
        CHECK(n <= 256, "tiny.jsonl:%d: %d tokens > 256", line, n);
        CHECK(mine > 0 && mine < n, "tiny.jsonl:%d: %d of %d tokens masked in", line, mine, n);
        multi += c.n > 3;
        if (n > longest) longest = n;
        total += n;
        masked += mine;
        free(ids);
        free(mask);
        chat_conversation_free(&c);
        if (!nl[1]) break;
    }
    CHECK(line >= 30 && line <= 60, "tiny.jsonl has %d conversations", line);
    printf("sft: %d conversations (%d multi-turn), %ld tokens, %ld masked in, longest %d tokens\n", line, multi, total,
           masked, longest);
    free(text);
}

/* The template works over a sentencepiece model that has the markers (the
 * ids there are sentencepiece's own segment-wise encoding). */
static void check_spm(void) {
    tokenizer *t = must_load(fixture("tests/fixtures/tokenizers/spm/model.model"));
    chat_message m[] = {{"user", "write relu"}, {"assistant", "ok"}};
    int32_t *ids;
    uint8_t *mask;
    int n;
    CHECK(chat_encode(t, m, 2, 1, &ids, &mask, &n) == DK_OK, "spm chat: %s", dk_error());
    int32_t s = tokenizer_token_id(t, "<|im_start|>"), e = tokenizer_token_id(t, "<|im_end|>");
    int starts = 0, ends = 0, masked = 0;
    for (int i = 0; i < n; i++) {
        starts += ids[i] == s;
        ends += ids[i] == e;
        masked += mask[i];
    }
    CHECK(starts == 3 && ends == 2 && masked >= 2, "spm chat: %d starts, %d ends, %d masked", starts, ends, masked);
    char *out;
    tokenizer_decode(t, ids, n, 0, &out, NULL);
    printf("spm chat: %d tokens, %d masked in, decodes to %s\n", n, masked, out);
    free(out);
    free(ids);
    free(mask);
    tokenizer_free(t);
}

int main(void) {
    const char *env = getenv("DK_SOURCE");
    snprintf(src, sizeof src, "%s", env ? env : ".");
    tokenizer *t = must_load(fixture("tests/fixtures/tokenizers/bpe/tokenizer.json"));
    check_fixture(t);
    check_by_hand(t);
    check_parser();
    check_sft(t);
    check_spm();
    tokenizer_free(t);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
