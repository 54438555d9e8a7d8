/* chat.h: the ChatML chat template of Qwen2/Qwen3, built in C. A message
 * renders as
 *     <|im_start|>{role}\n{content}<|im_end|>\n
 * and a conversation is the messages in order, optionally followed by the
 * generation prompt <|im_start|>assistant\n. Encoding gives the token ids
 * Hugging Face's tokenizer gives on the fully rendered string (the markers
 * are added tokens, so they cut the text into segments that tokenize
 * independently) plus a loss mask: 1 on the tokens the assistant wrote —
 * its content and the <|im_end|> that closes it, so the model learns to
 * stop — and 0 elsewhere (headers, the newline after <|im_end|>, system,
 * user and tool messages). */
#ifndef DK_CHAT_H
#define DK_CHAT_H

#include <stdint.h>

#include "common/error.h"
#include "data/tokenizer.h"

typedef struct {
    const char *role; /* "system", "user", "assistant" or "tool" */
    const char *content;
} chat_message;

/* A growing token sequence with its mask, for building a conversation turn
 * by turn (the multi-turn rollout appends feedback and generation prompts
 * to it). Zero-initialize; free with chat_tokens_free. */
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    int n, cap;
} chat_tokens;

/* Appends one rendered message; an unknown role is an error naming it. A
 * tokenizer without <|im_start|>/<|im_end|> is an error too. */
dk_status chat_append_message(tokenizer *t, const chat_message *m, chat_tokens *out);
/* Appends <|im_start|>assistant\n (mask 0). */
dk_status chat_append_generation_prompt(tokenizer *t, chat_tokens *out);
/* Appends the encoding of plain text with every mask value set to `mask`
 * (e.g. the "\n" that follows a generated <|im_end|> before the next turn). */
dk_status chat_append_text(tokenizer *t, const char *text, int mask, chat_tokens *out);
void chat_tokens_free(chat_tokens *c);

/* The whole conversation: *ids and *mask are malloc'ed, n_tokens long. */
dk_status chat_encode(tokenizer *t, const chat_message *msgs, int n, int add_generation_prompt, int32_t **ids,
                      uint8_t **mask, int *n_tokens);
/* Ids of <|im_start|>assistant\n alone, malloc'ed. */
dk_status chat_generation_prompt(tokenizer *t, int32_t **ids, int *n);

/* One JSONL record {"messages": [{"role": ..., "content": ...}, ...]}
 * parsed into owned messages. Other keys are ignored. Errors describe the
 * problem without a file name or line ("messages[2]: unknown role 'bot'"),
 * for the caller to prefix with its own "file:line: ". */
typedef struct {
    chat_message *msgs;
    int n;
} chat_conversation;

dk_status chat_parse_messages_json(const char *json, chat_conversation *out);
void chat_conversation_free(chat_conversation *c);

#endif
