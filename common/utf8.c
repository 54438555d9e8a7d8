/* utf8.c: the well-formed byte sequences of the Unicode standard (table 3-7)
 * and a replacing copy. */
#include "common/utf8.h"

#include <string.h>

#include "common/util.h"

int dk_utf8_seq_len(const unsigned char *s, size_t n) {
    if (n == 0 || s[0] == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
        else if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        return 0; /* a continuation byte, C0, C1 or F5..FF */
    }
    if (n < (size_t)len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

char *dk_utf8_sanitize(const char *s, size_t n, size_t *n_bad) {
    char *out = dk_malloc(n * 3 + 1); /* each byte becomes at most 3 */
    size_t o = 0, bad = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int len = dk_utf8_seq_len(u + i, n - i);
        if (len > 0) {
            memcpy(out + o, u + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            bad++;
        }
    }
    out[o] = '\0';
    if (n_bad) *n_bad = bad;
    return out;
}
