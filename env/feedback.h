/* feedback.h: the short text the model reads on its next turn, built from a
 * result: the compile error (middle-truncated, since both the first lines and
 * the final exception matter), correctness and the max difference, the
 * speedup with both runtimes, the top kernels by GPU time and the coverage,
 * the hack reasons, or the timeout/crash text. Deterministic: the same result
 * always gives the same bytes. A failure's class adds a concrete hint, a
 * mismatch its location, and the reference's per-op time its bottleneck
 * (env/feedback_hint.h); the whole text is cut to max_tokens. */
#ifndef KG_FEEDBACK_H
#define KG_FEEDBACK_H

#include <stddef.h>

#include "env/result.h"

typedef struct {
    int max_error_chars; /* longer error text keeps its head and tail (2000) */
    int top_kernels;     /* kernels listed, by time (5) */
    int max_name_chars;  /* kernel names are cut to this length (80) */
    int max_tokens;      /* the whole text, by kg_feedback_tokens (0: no limit) */
} kg_feedback_config;

void kg_feedback_config_default(kg_feedback_config *c);

/* A malloc'd string; never NULL. */
char *kg_feedback_build(const kg_feedback_config *c, const kg_result *r);

/* Copies s, keeping at most max_chars bytes: head and tail around a marker
 * that says how many bytes were left out. Never splits a UTF-8 character. */
char *kg_truncate_middle(const char *s, size_t max_chars);

#endif
