/* utf8.h: making text safe for JSON. A model's output is tokens, and a byte-
 * level tokenizer happily decodes a turn cut inside a multi-byte character,
 * or a token that never was UTF-8, into bytes that JSON readers refuse. */
#ifndef DK_UTF8_H
#define DK_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s[0..n) (1 to 4), or 0 when s[0]
 * starts no valid one (a stray continuation byte, an overlong form, a
 * surrogate, a code point past U+10FFFF, a cut sequence, or NUL). */
int dk_utf8_seq_len(const unsigned char *s, size_t n);
/* A malloc'd, NUL-terminated copy of s[0..n) in which every byte that starts
 * no valid sequence is replaced by U+FFFD; *n_bad (may be NULL) counts them. */
char *dk_utf8_sanitize(const char *s, size_t n, size_t *n_bad);

#endif
