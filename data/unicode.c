/* unicode.c: UTF-8 validation and NFC normalization for the tokenizers.
 *
 * NFC = canonical decomposition, canonical reordering of combining marks,
 * then canonical composition (Unicode Standard Annex #15). Text is scanned
 * first: almost all real text (ASCII, CJK, emoji, precomposed Latin) has no
 * character that NFC can touch, and is returned without being rewritten. */
#include "data/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/unicode_tables.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Hangul syllables compose and decompose arithmetically (Unicode ch. 3.12). */
enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_LN = 19, HANGUL_VN = 21, HANGUL_TN = 28, HANGUL_NN = HANGUL_VN * HANGUL_TN,
    HANGUL_SN = HANGUL_LN * HANGUL_NN,
};

size_t unicode_utf8_valid_prefix(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int n;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
        else return i;
        if (i + (size_t)n > len) return i;
        for (int k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return i;
        i += (size_t)n;
    }
    return len;
}

uint32_t unicode_utf8_decode(const unsigned char *s, int *n) {
    unsigned c = s[0];
    if (c < 0x80) { *n = 1; return c; }
    if ((c & 0xE0) == 0xC0) { *n = 2; return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); }
    if ((c & 0xF0) == 0xE0) { *n = 3; return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu); }
    *n = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

int unicode_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = N_ELEMS(unicode_ccc);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < unicode_ccc[mid][0]) hi = mid;
        else if (cp > unicode_ccc[mid][1]) lo = mid + 1;
        else return (int)unicode_ccc[mid][2];
    }
    return 0;
}

/* Index into unicode_decomp of cp's decomposition, or -1. */
static int decomp_of(uint32_t cp) {
    size_t lo = 0, hi = N_ELEMS(unicode_decomp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < unicode_decomp[mid][0]) hi = mid;
        else if (cp > unicode_decomp[mid][0]) lo = mid + 1;
        else return (int)mid;
    }
    return -1;
}

/* The primary composite of (a, b), or 0 when they do not compose. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 && b > HANGUL_T &&
        b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    uint64_t key = ((uint64_t)a << 21) | b;
    size_t lo = 0, hi = N_ELEMS(unicode_compose);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (key < unicode_compose[mid][0]) hi = mid;
        else if (key > unicode_compose[mid][0]) lo = mid + 1;
        else return (uint32_t)unicode_compose[mid][1];
    }
    return 0;
}

int unicode_is_nfc_quick(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0xCC) { /* every code point below U+0300 is stable */
            i += s[i] < 0x80 ? 1 : 2;
            continue;
        }
        int n;
        uint32_t cp = unicode_utf8_decode(s + i, &n);
        if (in_ranges(unicode_nfc_maybe, N_ELEMS(unicode_nfc_maybe), cp)) return 0;
        i += (size_t)n;
    }
    return 1;
}

typedef struct {
    uint32_t *v;
    size_t n, cap;
} cp_buf;

static void cp_push(cp_buf *b, uint32_t cp) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->v = dk_realloc(b->v, b->cap * sizeof(uint32_t));
    }
    b->v[b->n++] = cp;
}

static void decompose(uint32_t cp, cp_buf *out) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        uint32_t s = cp - HANGUL_S;
        cp_push(out, HANGUL_L + s / HANGUL_NN);
        cp_push(out, HANGUL_V + (s % HANGUL_NN) / HANGUL_TN);
        if (s % HANGUL_TN) cp_push(out, HANGUL_T + s % HANGUL_TN);
        return;
    }
    int d = cp < 0xC0 ? -1 : decomp_of(cp);
    if (d < 0) {
        cp_push(out, cp);
        return;
    }
    /* The table holds full decompositions, so no recursion is needed. */
    for (uint32_t k = 0; k < unicode_decomp[d][2]; k++) cp_push(out, unicode_decomp_cps[unicode_decomp[d][1] + k]);
}

/* NFC of one span that starts with a starter: decompose, reorder, compose. */
static void nfc_span(const unsigned char *s, size_t len, cp_buf *d, int **cls, size_t *cls_cap, char **o, size_t *k,
                     size_t *o_cap) {
    d->n = 0;
    for (size_t i = 0; i < len;) {
        int n;
        uint32_t cp = unicode_utf8_decode(s + i, &n);
        decompose(cp, d);
        i += (size_t)n;
    }
    if (d->n + 1 > *cls_cap) {
        *cls_cap = d->n + 1;
        *cls = dk_realloc(*cls, *cls_cap * sizeof(int));
    }
    int *c = *cls;
    for (size_t i = 0; i < d->n; i++) c[i] = ccc_of(d->v[i]);

    /* Canonical ordering: a stable sort by combining class within each run
     * of non-starters (runs are short, so insertion sort). */
    for (size_t i = 1; i < d->n; i++) {
        if (c[i] == 0) continue;
        size_t j = i;
        while (j > 0 && c[j - 1] > c[i] && c[j - 1] != 0) j--;
        if (j < i) {
            uint32_t cp = d->v[i];
            int cc = c[i];
            memmove(d->v + j + 1, d->v + j, (i - j) * sizeof(uint32_t));
            memmove(c + j + 1, c + j, (i - j) * sizeof(int));
            d->v[j] = cp;
            c[j] = cc;
        }
    }

    /* Canonical composition: a character joins the last starter unless a
     * character between them has a class of zero or >= its own (blocked). */
    size_t w = 0;      /* composed length, written in place */
    long starter = -1; /* index of the last starter in the output */
    int last_cls = -1; /* class of the previous output character */
    for (size_t i = 0; i < d->n; i++) {
        uint32_t cp = d->v[i];
        int cc = c[i];
        if (starter >= 0 && (last_cls < cc || (last_cls == 0 && (size_t)starter == w - 1))) {
            uint32_t comp = compose_pair(d->v[starter], cp);
            if (comp) {
                d->v[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = (long)w;
        last_cls = cc;
        d->v[w++] = cp;
    }

    if (*k + w * 4 + 1 > *o_cap) {
        *o_cap = 2 * (*k + w * 4 + 1);
        *o = dk_realloc(*o, *o_cap);
    }
    for (size_t i = 0; i < w; i++) *k += (size_t)unicode_utf8_encode(d->v[i], *o + *k);
}

/* NFC only changes text around the characters of unicode_nfc_maybe, so
 * each run of them is normalized together with the starter before it, and
 * everything else is copied as it is. */
void unicode_nfc(const char *str, size_t len, char **out, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t o_cap = len + len / 4 + 16, k = 0, cls_cap = 0;
    char *o = dk_malloc(o_cap);
    cp_buf d = {0};
    int *cls = NULL;
    size_t copied = 0; /* s[0..copied) is already in o */
    size_t prev = 0;   /* start of the last character that is not "maybe" */
    for (size_t i = 0; i < len;) {
        int n;
        uint32_t cp = s[i] < 0x80 ? (n = 1, s[i]) : unicode_utf8_decode(s + i, &n);
        if (cp < 0x300 || !in_ranges(unicode_nfc_maybe, N_ELEMS(unicode_nfc_maybe), cp)) {
            prev = i;
            i += (size_t)n;
            continue;
        }
        size_t start = prev >= copied && prev < i ? prev : (copied < i ? i : copied);
        size_t end = i + (size_t)n;
        while (end < len) {
            int m;
            uint32_t c2 = unicode_utf8_decode(s + end, &m);
            if (c2 < 0x300 || !in_ranges(unicode_nfc_maybe, N_ELEMS(unicode_nfc_maybe), c2)) break;
            end += (size_t)m;
        }
        if (k + (start - copied) + 1 > o_cap) {
            o_cap = 2 * (k + (start - copied) + 1);
            o = dk_realloc(o, o_cap);
        }
        memcpy(o + k, s + copied, start - copied);
        k += start - copied;
        nfc_span(s + start, end - start, &d, &cls, &cls_cap, &o, &k, &o_cap);
        copied = end;
        prev = end; /* the span's output ends the text a later span could reach back into */
        i = end;
    }
    if (k + (len - copied) + 1 > o_cap) {
        o_cap = k + (len - copied) + 1;
        o = dk_realloc(o, o_cap);
    }
    memcpy(o + k, s + copied, len - copied);
    k += len - copied;
    o[k] = '\0';
    free(d.v);
    free(cls);
    *out = o;
    *out_len = k;
}
