/* feedback_hint.h: what the model should try next, read from a result
 * (docs/DESIGN.md §11). The error text is sorted into a few classes, each with
 * one concrete hint (an illegal address points at mask bounds and offsets,
 * exhausted shared memory at smaller BLOCK sizes or fewer stages); an output
 * mismatch is located from the optional `mismatch` field; the reference's
 * per-op time breakdown comes from the optional `reference_profile` field.
 * Every optional field is read defensively from the result's raw JSON: a
 * harness that does not send it yet gives the same feedback as before. */
#ifndef KG_FEEDBACK_HINT_H
#define KG_FEEDBACK_HINT_H

#include <stddef.h>

#include "env/result.h"

typedef enum {
    KG_HINT_NONE = 0,
    KG_HINT_ILLEGAL_ADDRESS, /* out-of-bounds or misaligned memory access */
    KG_HINT_OUT_OF_RESOURCES, /* shared memory, registers, or threads exhausted */
    KG_HINT_OUT_OF_MEMORY,   /* a device or host allocation failed */
    KG_HINT_MISMATCH,        /* ran, but the output is wrong */
    KG_HINT_SHAPE,           /* ran, but the output has the wrong shape or dtype */
    KG_HINT_NAN,             /* ran, but the output holds NaN where the reference does not */
    KG_HINT_TIMEOUT,         /* did not finish in time */
} kg_hint_class;

kg_hint_class kg_hint_classify(const kg_result *r);
const char *kg_hint_name(kg_hint_class c);
/* The hint sentence of a class; "" for KG_HINT_NONE. */
const char *kg_hint_text(kg_hint_class c);

/* "Mismatch: ..." lines from the result's `mismatch` object: {mode, trial,
 * first_index: [ints], candidate, reference, fp64 (the values there), n_bad,
 * numel, max_abs_diff, atol, rtol, max_ratio (the largest |diff| / (atol +
 * rtol |ref|)), budget_ratio (the largest error against fp64 over its
 * budget), k, pattern}. Every key is optional. Appends to *out (a malloc'd
 * string or NULL); nothing when the field is absent. */
void kg_hint_mismatch(const kg_result *r, char **out);

/* "Reference time by op: ..." from `reference_profile`, a list of
 * {name, share} (share in [0, 1]), the top_n largest shares first. Appends
 * to *out; nothing when the field is absent or empty. Also used for the
 * first-turn prompt (rl/prompts.h), so it takes the raw JSON list. */
void kg_hint_bottleneck_json(const char *reference_profile_json, int top_n, char **out);
void kg_hint_bottleneck(const kg_result *r, int top_n, char **out);

/* Tokens of a text by the stated estimate: bytes / 4, rounded up. */
size_t kg_feedback_tokens(const char *s);

/* Copies s cut to at most max_tokens (kg_feedback_tokens) by keeping its head
 * (feedback puts the most useful lines first) up to a line boundary where one
 * is near, and a marker saying how many bytes were left out. max_tokens <= 0:
 * no limit. Never splits a UTF-8 character. */
char *kg_feedback_fit(const char *s, int max_tokens);

#endif
