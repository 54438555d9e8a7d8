/* chat.c: the ChatML template (see chat.h) and the JSONL message parser.
 *
 * Each message is encoded as <|im_start|>, then "{role}\n{content}" as one
 * text segment, then <|im_end|>, then "\n". Encoding the segment whole (not
 * header and content apart) is what makes the ids equal HF's on the
 * rendered string: content that starts with whitespace merges with the
 * header's newline into one pre-token. The mask boundary inside the segment
 * is found by also encoding the header alone: the segment's ids agree with
 * the header's up to the first token that reaches into the content, and
 * that token and all after it are the assistant's. */
#define _POSIX_C_SOURCE 200809L
#include "data/chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char *const ROLES[] = {"system", "user", "assistant", "tool"};

static int role_known(const char *role) {
    for (size_t i = 0; i < sizeof ROLES / sizeof ROLES[0]; i++)
        if (strcmp(role, ROLES[i]) == 0) return 1;
    return 0;
}

static void push(chat_tokens *c, int32_t id, uint8_t mask) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->ids = dk_realloc(c->ids, (size_t)c->cap * sizeof(int32_t));
        c->mask = dk_realloc(c->mask, (size_t)c->cap);
    }
    c->ids[c->n] = id;
    c->mask[c->n] = mask;
    c->n++;
}

static dk_status marker(tokenizer *t, const char *name, int32_t *id) {
    *id = tokenizer_token_id(t, name);
    if (*id < 0) return dk_fail(DK_ERR_RUNTIME, "tokenizer has no %s token, which the ChatML template needs", name);
    return DK_OK;
}

dk_status chat_append_text(tokenizer *t, const char *text, int mask, chat_tokens *out) {
    int32_t *ids;
    int n;
    DK_TRY(tokenizer_encode(t, text, strlen(text), &ids, &n));
    for (int i = 0; i < n; i++) push(out, ids[i], (uint8_t)(mask != 0));
    free(ids);
    return DK_OK;
}

dk_status chat_append_message(tokenizer *t, const chat_message *m, chat_tokens *out) {
    if (!m->role || !role_known(m->role))
        return dk_fail(DK_ERR_RUNTIME, "unknown chat role '%s' (expected system, user, assistant or tool)",
                       m->role ? m->role : "(null)");
    if (!m->content) return dk_fail(DK_ERR_RUNTIME, "chat message with role '%s' has no content", m->role);
    int32_t im_start, im_end;
    DK_TRY(marker(t, "<|im_start|>", &im_start));
    DK_TRY(marker(t, "<|im_end|>", &im_end));
    int assistant = strcmp(m->role, "assistant") == 0;

    size_t rl = strlen(m->role), cl = strlen(m->content);
    char *seg = dk_malloc(rl + 1 + cl + 1);
    memcpy(seg, m->role, rl);
    seg[rl] = '\n';
    memcpy(seg + rl + 1, m->content, cl + 1);
    int32_t *ids = NULL, *head = NULL;
    int n = 0, nh = 0;
    dk_status st = tokenizer_encode(t, seg, rl + 1 + cl, &ids, &n);
    if (!st && assistant) st = tokenizer_encode(t, seg, rl + 1, &head, &nh);
    free(seg);
    if (st) {
        free(ids);
        return st;
    }
    int first_own = n; /* index of the first assistant-written token */
    if (assistant) {
        first_own = 0;
        while (first_own < n && first_own < nh && ids[first_own] == head[first_own]) first_own++;
    }
    push(out, im_start, 0);
    for (int i = 0; i < n; i++) push(out, ids[i], (uint8_t)(i >= first_own));
    push(out, im_end, (uint8_t)assistant);
    free(ids);
    free(head);
    return chat_append_text(t, "\n", 0, out);
}

dk_status chat_append_generation_prompt(tokenizer *t, chat_tokens *out) {
    int32_t im_start;
    DK_TRY(marker(t, "<|im_start|>", &im_start));
    push(out, im_start, 0);
    return chat_append_text(t, "assistant\n", 0, out);
}

void chat_tokens_free(chat_tokens *c) {
    free(c->ids);
    free(c->mask);
    c->ids = NULL;
    c->mask = NULL;
    c->n = c->cap = 0;
}

dk_status chat_encode(tokenizer *t, const chat_message *msgs, int n, int add_generation_prompt, int32_t **ids,
                      uint8_t **mask, int *n_tokens) {
    chat_tokens c = {0};
    dk_status st = DK_OK;
    for (int i = 0; i < n && !st; i++) {
        st = chat_append_message(t, &msgs[i], &c);
        if (st) st = dk_wrap(st, "message %d: ", i);
    }
    if (!st && add_generation_prompt) st = chat_append_generation_prompt(t, &c);
    if (st) {
        chat_tokens_free(&c);
        return st;
    }
    *ids = c.ids ? c.ids : dk_malloc(sizeof(int32_t));
    *mask = c.mask ? c.mask : dk_malloc(1);
    *n_tokens = c.n;
    return DK_OK;
}

dk_status chat_generation_prompt(tokenizer *t, int32_t **ids, int *n) {
    chat_tokens c = {0};
    dk_status st = chat_append_generation_prompt(t, &c);
    free(c.mask);
    if (st) {
        free(c.ids);
        return st;
    }
    *ids = c.ids;
    *n = c.n;
    return DK_OK;
}

/* ---- JSONL messages ---------------------------------------------------------- */

void chat_conversation_free(chat_conversation *c) {
    for (int i = 0; i < c->n; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    free(c->msgs);
    c->msgs = NULL;
    c->n = 0;
}

dk_status chat_parse_messages_json(const char *json, chat_conversation *out) {
    out->msgs = NULL;
    out->n = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) return dk_fail(DK_ERR_RUNTIME, "invalid JSON at byte %ld", end ? (long)(end - json) : 0L);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "messages");
    dk_status st = DK_OK;
    if (!cJSON_IsObject(root) || !cJSON_IsArray(list))
        st = dk_fail(DK_ERR_RUNTIME, "expected an object with a \"messages\" list");
    else if (cJSON_GetArraySize(list) == 0)
        st = dk_fail(DK_ERR_RUNTIME, "\"messages\" is empty");
    if (st) {
        cJSON_Delete(root);
        return st;
    }
    int n = cJSON_GetArraySize(list), i = 0;
    out->msgs = dk_calloc((size_t)n, sizeof(chat_message));
    const cJSON *m;
    cJSON_ArrayForEach(m, list) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m)) st = dk_fail(DK_ERR_RUNTIME, "messages[%d] is not an object", i);
        else if (!cJSON_IsString(role))
            st = dk_fail(DK_ERR_RUNTIME, "messages[%d]: \"role\" is missing or not a string", i);
        else if (!role_known(role->valuestring))
            st = dk_fail(DK_ERR_RUNTIME, "messages[%d]: unknown role '%s' (expected system, user, assistant or tool)", i,
                         role->valuestring);
        else if (!cJSON_IsString(content))
            st = dk_fail(DK_ERR_RUNTIME, "messages[%d] (%s): \"content\" is missing or not a string", i,
                         role->valuestring);
        if (st) break;
        out->msgs[i].role = dk_strdup(role->valuestring);
        out->msgs[i].content = dk_strdup(content->valuestring);
        out->n = ++i;
    }
    cJSON_Delete(root);
    if (st) chat_conversation_free(out);
    return st;
}
