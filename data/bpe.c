/* bpe.c: byte-level BPE from a Hugging Face tokenizer.json, giving the same
 * ids as the `tokenizers` library.
 *
 * Encoding a text:
 *   1. added tokens with "normalized": false (<|im_start|>, ...) are cut out
 *      of the raw text, leftmost-longest; they are never split further;
 *   2. the text between them is NFC-normalized if the file says so, and the
 *      added tokens with "normalized": true are cut out of that;
 *   3. the pre-tokenizer steps split each remaining segment into pieces
 *      (Split regexes through PCRE2, ByteLevel's prefix space and regex);
 *   4. each piece's bytes become single-byte tokens that are merged by rank
 *      (lowest rank first, leftmost on ties), with a cache of pieces seen.
 *
 * PCRE2 and the Oniguruma engine HF uses disagree on a few characters:
 * PCRE2 counts U+180E as \s, and PCRE2 10.42 knows Unicode 14 while HF's
 * engine knows letters and digits added up to Unicode 16. The patterns are
 * rewritten so \s, \p{L} and \p{N} mean what they mean to HF. */
#define _POSIX_C_SOURCE 200809L
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/bpe.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/unicode.h"

/* ---- hash maps ------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* token string -> id (owns copies of the strings). */
typedef struct {
    char **key; /* NULL = empty */
    uint32_t *len;
    int32_t *id;
    size_t mask;
} str_map;

/* (left id, right id) -> merge rank and merged id. */
typedef struct {
    uint64_t *key; /* UINT64_MAX = empty */
    int32_t *rank, *merged;
    size_t mask;
} merge_map;

#define EMPTY_KEY UINT64_MAX

/* ---- the tokenizer ----------------------------------------------------------- */

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    int special, normalized, lstrip, rstrip;
} added_token;

/* One pre-tokenizer step, applied to every piece in turn. */
typedef struct {
    enum { STEP_SPLIT, STEP_PREFIX_SPACE } kind;
    pcre2_code *re;
} pretok_step;

/* Recently seen pieces and their ids; bounded, cleared when full. */
typedef struct {
    uint64_t *hash;      /* 0 = empty */
    uint32_t *key_off, *ids_off;
    uint16_t *key_len, *n_ids;
    size_t mask, used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
} piece_cache;

struct bpe_tokenizer {
    char *path;
    int n_ids;          /* max id + 1 */
    char **id_str;      /* token as written in the file, NULL for unused ids */
    char **id_bytes;    /* what the token decodes to */
    size_t *id_bytes_len;
    uint8_t *id_special;
    str_map vocab;      /* model.vocab */
    str_map added_map;  /* added token content -> id */
    merge_map merges;
    int32_t byte_id[256];
    int32_t unk_id;
    int fuse_unk, byte_fallback, ignore_merges;
    added_token *added;
    int n_added;
    int *added_order;       /* added tokens by first byte, longest first */
    int added_bucket[257];  /* added_order[added_bucket[c] .. added_bucket[c + 1]) start with byte c */
    int nfc;
    pretok_step *steps;
    int n_steps;
    pthread_mutex_t cache_lock;
    piece_cache cache;
};

/* The GPT-2 byte alphabet: printable bytes map to themselves, the others to
 * U+0100 and up, so every byte is a visible character. */
static uint32_t byte_to_unicode(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int n = 0;
    for (int k = 0; k < b; k++)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) n++;
    return 256u + (uint32_t)n;
}

enum { BYTE_ALPHABET_END = 324 }; /* one past the largest character of the alphabet */
static int byte_of_char[BYTE_ALPHABET_END];
static pthread_once_t byte_of_char_once = PTHREAD_ONCE_INIT;

static void byte_of_char_init(void) {
    for (int i = 0; i < BYTE_ALPHABET_END; i++) byte_of_char[i] = -1;
    for (int b = 0; b < 256; b++) byte_of_char[byte_to_unicode(b)] = b;
}

static int unicode_to_byte(uint32_t cp) {
    pthread_once(&byte_of_char_once, byte_of_char_init);
    return cp < BYTE_ALPHABET_END ? byte_of_char[cp] : -1;
}

/* ---- str_map / merge_map ----------------------------------------------------- */

static void str_map_init(str_map *m, size_t n) {
    size_t cap = pow2_at_least(2 * n + 1);
    m->key = dk_calloc(cap, sizeof(char *));
    m->len = dk_malloc(cap * sizeof(uint32_t));
    m->id = dk_malloc(cap * sizeof(int32_t));
    m->mask = cap - 1;
}

static void str_map_free(str_map *m) {
    if (m->key)
        for (size_t i = 0; i <= m->mask; i++) free(m->key[i]);
    free(m->key);
    free(m->len);
    free(m->id);
}

static int32_t str_map_get(const str_map *m, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        if (!m->key[i]) return -1;
        if (m->len[i] == n && memcmp(m->key[i], s, n) == 0) return m->id[i];
    }
}

/* Sets s -> id; a repeated string keeps its last id, as a JSON object does. */
static void str_map_put(str_map *m, const char *s, int32_t id) {
    size_t n = strlen(s);
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        if (!m->key[i]) {
            m->key[i] = dk_strdup(s);
            m->len[i] = (uint32_t)n;
            m->id[i] = id;
            return;
        }
        if (m->len[i] == n && memcmp(m->key[i], s, n) == 0) {
            m->id[i] = id;
            return;
        }
    }
}

static void merge_map_init(merge_map *m, size_t n) {
    size_t cap = pow2_at_least(2 * n + 1);
    m->key = dk_malloc(cap * sizeof(uint64_t));
    m->rank = dk_malloc(cap * sizeof(int32_t));
    m->merged = dk_malloc(cap * sizeof(int32_t));
    for (size_t i = 0; i < cap; i++) m->key[i] = EMPTY_KEY;
    m->mask = cap - 1;
}

/* A later duplicate of a pair replaces the earlier one, as in HF's map. */
static void merge_map_put(merge_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == EMPTY_KEY || m->key[i] == k) {
            m->key[i] = k;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}

static inline int merge_map_get(const merge_map *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return 1;
        }
        if (m->key[i] == EMPTY_KEY) return 0;
    }
}

/* ---- piece cache --------------------------------------------------------------- */

enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_PIECE = 128 };

static void cache_clear(piece_cache *c) {
    if (!c->hash) {
        c->hash = dk_malloc(CACHE_SLOTS * sizeof(uint64_t));
        c->key_off = dk_malloc(CACHE_SLOTS * sizeof(uint32_t));
        c->ids_off = dk_malloc(CACHE_SLOTS * sizeof(uint32_t));
        c->key_len = dk_malloc(CACHE_SLOTS * sizeof(uint16_t));
        c->n_ids = dk_malloc(CACHE_SLOTS * sizeof(uint16_t));
        c->mask = CACHE_SLOTS - 1;
    }
    memset(c->hash, 0, CACHE_SLOTS * sizeof(uint64_t));
    c->used = 0;
    c->keys_len = 0;
    c->ids_len = 0;
}

static void cache_free(piece_cache *c) {
    free(c->hash);
    free(c->key_off);
    free(c->ids_off);
    free(c->key_len);
    free(c->n_ids);
    free(c->keys);
    free(c->ids);
}

static int cache_get(const piece_cache *c, uint64_t h, const char *s, size_t n, const int32_t **ids, int *n_ids) {
    for (size_t i = h & c->mask;; i = (i + 1) & c->mask) {
        if (c->hash[i] == 0) return 0;
        if (c->hash[i] == h && c->key_len[i] == n && memcmp(c->keys + c->key_off[i], s, n) == 0) {
            *ids = c->ids + c->ids_off[i];
            *n_ids = c->n_ids[i];
            return 1;
        }
    }
}

static void cache_put(piece_cache *c, uint64_t h, const char *s, size_t n, const int32_t *ids, int n_ids) {
    if (c->used * 2 >= CACHE_SLOTS || c->keys_len + n > (1u << 24) || c->ids_len + (size_t)n_ids > (1u << 22))
        cache_clear(c);
    if (c->keys_len + n > c->keys_cap) {
        c->keys_cap = pow2_at_least(c->keys_len + n + 4096);
        c->keys = dk_realloc(c->keys, c->keys_cap);
    }
    if (c->ids_len + (size_t)n_ids > c->ids_cap) {
        c->ids_cap = pow2_at_least(c->ids_len + (size_t)n_ids + 1024);
        c->ids = dk_realloc(c->ids, c->ids_cap * sizeof(int32_t));
    }
    size_t i = h & c->mask;
    while (c->hash[i] != 0) i = (i + 1) & c->mask;
    c->hash[i] = h;
    c->key_off[i] = (uint32_t)c->keys_len;
    c->key_len[i] = (uint16_t)n;
    c->ids_off[i] = (uint32_t)c->ids_len;
    c->n_ids[i] = (uint16_t)n_ids;
    memcpy(c->keys + c->keys_len, s, n);
    memcpy(c->ids + c->ids_len, ids, (size_t)n_ids * sizeof(int32_t));
    c->keys_len += n;
    c->ids_len += (size_t)n_ids;
    c->used++;
}

/* ---- growable buffers used while encoding ------------------------------------- */

typedef struct {
    int32_t *v;
    int n, cap;
} id_vec;

static void ids_push(id_vec *a, int32_t id) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = dk_realloc(a->v, (size_t)a->cap * sizeof(int32_t));
    }
    a->v[a->n++] = id;
}

typedef struct {
    size_t off, len;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} span_vec;

static void spans_push(span_vec *a, size_t off, size_t len) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->v = dk_realloc(a->v, a->cap * sizeof(span));
    }
    a->v[a->n].off = off;
    a->v[a->n].len = len;
    a->n++;
}

/* Scratch for one encode call: pieces, the merge heap, symbol lists. */
typedef struct {
    char *buf; /* the segment being pre-tokenized, plus prefixed copies */
    size_t buf_len, buf_cap;
    span_vec pieces, next_pieces;
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* with a large JIT stack, made when a match needs it */
    pcre2_jit_stack *jit_stack;
    dk_status status;          /* first failure of a regex match */
    const char *path;
    int32_t *sym, *prev, *next;
    struct heap_item { int32_t rank, pos, merged; } *heap;
    int sym_cap, heap_n, heap_cap;
    id_vec word;
} encode_scratch;

static size_t buf_append(encode_scratch *s, const char *p, size_t n) {
    if (s->buf_len + n + 1 > s->buf_cap) {
        s->buf_cap = pow2_at_least(s->buf_len + n + 1);
        s->buf = dk_realloc(s->buf, s->buf_cap);
    }
    memcpy(s->buf + s->buf_len, p, n);
    size_t off = s->buf_len;
    s->buf_len += n;
    return off;
}

/* ---- BPE on one piece ---------------------------------------------------------- */

static int heap_less(const struct heap_item *a, const struct heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(encode_scratch *s, int32_t rank, int32_t pos, int32_t merged) {
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? 2 * s->heap_cap : 256;
        s->heap = dk_realloc(s->heap, (size_t)s->heap_cap * sizeof(*s->heap));
    }
    int i = s->heap_n++;
    struct heap_item it = {rank, pos, merged};
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!heap_less(&it, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = it;
}

static struct heap_item heap_pop(encode_scratch *s) {
    struct heap_item top = s->heap[0], last = s->heap[--s->heap_n];
    int i = 0, n = s->heap_n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* The token string of raw bytes p[0..n) in the byte alphabet. */
static size_t bytes_to_token(const char *p, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)unicode_utf8_encode(byte_to_unicode((unsigned char)p[i]), out + k);
    out[k] = '\0';
    return k;
}

/* Initial symbol(s) for byte c; HF's rules for a character missing from
 * the vocabulary: byte fallback tokens, else the unknown token (fused when
 * asked), else nothing. */
static void initial_symbols(const bpe_tokenizer *b, unsigned char c, id_vec *out) {
    int32_t id = b->byte_id[c];
    if (id >= 0) {
        ids_push(out, id);
        return;
    }
    if (b->byte_fallback) {
        char ch[5], name[8];
        int n = unicode_utf8_encode(byte_to_unicode(c), ch);
        int32_t fb[4];
        int ok = 1;
        for (int k = 0; k < n && ok; k++) {
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)ch[k]);
            fb[k] = str_map_get(&b->vocab, name, strlen(name));
            ok = fb[k] >= 0;
        }
        if (ok) {
            for (int k = 0; k < n; k++) ids_push(out, fb[k]);
            return;
        }
    }
    if (b->unk_id >= 0) {
        if (b->fuse_unk && out->n > 0 && out->v[out->n - 1] == b->unk_id) return;
        ids_push(out, b->unk_id);
    }
}

/* Appends the ids of one pre-tokenized piece to out. */
static void bpe_piece(const bpe_tokenizer *b, encode_scratch *s, const char *p, size_t n, id_vec *out) {
    if (b->ignore_merges) {
        char *tok = dk_malloc(2 * n + 1);
        size_t k = bytes_to_token(p, n, tok);
        int32_t id = str_map_get(&b->vocab, tok, k);
        free(tok);
        if (id >= 0) {
            ids_push(out, id);
            return;
        }
    }
    s->word.n = 0;
    for (size_t i = 0; i < n; i++) initial_symbols(b, (unsigned char)p[i], &s->word);
    int m = s->word.n;
    if (m <= 1) {
        if (m == 1) ids_push(out, s->word.v[0]);
        return;
    }
    if (m > s->sym_cap) {
        s->sym_cap = m;
        s->sym = dk_realloc(s->sym, (size_t)m * sizeof(int32_t));
        s->prev = dk_realloc(s->prev, (size_t)m * sizeof(int32_t));
        s->next = dk_realloc(s->next, (size_t)m * sizeof(int32_t));
    }
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    s->heap_n = 0;
    for (int i = 0; i < m; i++) {
        sym[i] = s->word.v[i];
        prev[i] = i - 1;
        next[i] = i + 1 < m ? i + 1 : -1;
    }
    int32_t rank, merged;
    for (int i = 0; i + 1 < m; i++)
        if (merge_map_get(&b->merges, sym[i], sym[i + 1], &rank, &merged)) heap_push(s, rank, i, merged);
    while (s->heap_n > 0) {
        struct heap_item top = heap_pop(s);
        int pos = top.pos;
        if (sym[pos] < 0 || next[pos] < 0) continue; /* merged away, or now last */
        int r = next[pos];
        /* A stale entry: one side changed since it was pushed. */
        if (!merge_map_get(&b->merges, sym[pos], sym[r], &rank, &merged) || merged != top.merged) continue;
        sym[pos] = merged;
        sym[r] = -1;
        next[pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = pos;
        if (prev[pos] >= 0 && merge_map_get(&b->merges, sym[prev[pos]], sym[pos], &rank, &merged))
            heap_push(s, rank, prev[pos], merged);
        if (next[pos] >= 0 && merge_map_get(&b->merges, sym[pos], sym[next[pos]], &rank, &merged))
            heap_push(s, rank, pos, merged);
    }
    for (int i = 0; i >= 0; i = next[i]) ids_push(out, sym[i]);
}

/* ---- pre-tokenization ---------------------------------------------------------- */

/* Splits every piece by re; matches and the gaps between them both become
 * pieces (HF's "Isolated" behaviour). */
static void split_pieces(encode_scratch *s, pcre2_code *re) {
    s->next_pieces.n = 0;
    for (size_t k = 0; k < s->pieces.n; k++) {
        span pc = s->pieces.v[k];
        PCRE2_SPTR subj = (PCRE2_SPTR)(s->buf + pc.off);
        size_t start = 0;
        while (start < pc.len) {
            int rc = pcre2_match(re, subj, pc.len, start, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->mctx) {
                s->jit_stack = pcre2_jit_stack_create(32 * 1024, 256 * 1024 * 1024, NULL);
                s->mctx = pcre2_match_context_create(NULL);
                if (!s->jit_stack || !s->mctx) DK_ABORT("out of memory for a PCRE2 JIT stack");
                pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
                continue;
            }
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                if (!s->status)
                    s->status = dk_fail(DK_ERR_RUNTIME, "tokenizer %s: pre-tokenizer regex failed on a %zu-byte piece: %s",
                                        s->path, pc.len, (const char *)msg);
                break;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* an empty match cuts nothing: step one character */
                if (me >= pc.len) break;
                int cl;
                unicode_utf8_decode(subj + me, &cl);
                start = me + (size_t)cl;
                continue;
            }
            if (ms > start) spans_push(&s->next_pieces, pc.off + start, ms - start);
            spans_push(&s->next_pieces, pc.off + ms, me - ms);
            start = me;
        }
        if (start < pc.len) spans_push(&s->next_pieces, pc.off + start, pc.len - start);
    }
    span_vec t = s->pieces;
    s->pieces = s->next_pieces;
    s->next_pieces = t;
}

static void prefix_space_pieces(encode_scratch *s) {
    for (size_t k = 0; k < s->pieces.n; k++) {
        span *pc = &s->pieces.v[k];
        if (pc->len > 0 && s->buf[pc->off] == ' ') continue;
        size_t off = buf_append(s, " ", 1);
        /* buf may have moved: copy the piece from its offset afterwards */
        if (s->buf_len + pc->len + 1 > s->buf_cap) {
            s->buf_cap = pow2_at_least(s->buf_len + pc->len + 1);
            s->buf = dk_realloc(s->buf, s->buf_cap);
        }
        memcpy(s->buf + s->buf_len, s->buf + pc->off, pc->len);
        s->buf_len += pc->len;
        pc->off = off;
        pc->len += 1;
    }
}

/* Encodes a normalized segment that holds no added token. */
static void encode_plain(bpe_tokenizer *b, encode_scratch *s, const char *text, size_t len, id_vec *out) {
    if (len == 0) return;
    s->buf_len = 0;
    buf_append(s, text, len);
    s->pieces.n = 0;
    spans_push(&s->pieces, 0, len);
    for (int i = 0; i < b->n_steps; i++) {
        if (b->steps[i].kind == STEP_SPLIT) split_pieces(s, b->steps[i].re);
        else prefix_space_pieces(s);
    }
    int have_lock = pthread_mutex_trylock(&b->cache_lock) == 0;
    for (size_t k = 0; k < s->pieces.n; k++) {
        const char *p = s->buf + s->pieces.v[k].off;
        size_t n = s->pieces.v[k].len;
        if (n == 0) continue;
        if (!have_lock || n > CACHE_MAX_PIECE) {
            bpe_piece(b, s, p, n, out);
            continue;
        }
        uint64_t h = hash_bytes(p, n) | 1;
        const int32_t *cached;
        int n_cached;
        if (cache_get(&b->cache, h, p, n, &cached, &n_cached)) {
            for (int i = 0; i < n_cached; i++) ids_push(out, cached[i]);
            continue;
        }
        int before = out->n;
        bpe_piece(b, s, p, n, out);
        cache_put(&b->cache, h, p, n, out->v + before, out->n - before);
    }
    if (have_lock) pthread_mutex_unlock(&b->cache_lock);
}

/* ---- added tokens ---------------------------------------------------------------- */

/* Unicode White_Space at s[i]; *cl gets the character's byte length. */
static int is_space_at(const char *s, size_t i, size_t *cl) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *cl = 1;
        return c == ' ' || (c >= '\t' && c <= '\r');
    }
    int n;
    uint32_t cp = unicode_utf8_decode((const unsigned char *)s + i, &n);
    *cl = (size_t)n;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Leftmost-longest match at or after `from` among added tokens whose
 * "normalized" flag equals `normalized`; returns its index or -1. */
static int find_added(const bpe_tokenizer *b, const char *s, size_t len, size_t from, int normalized, size_t *at) {
    for (size_t i = from; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        for (int j = b->added_bucket[c]; j < b->added_bucket[c + 1]; j++) {
            const added_token *a = &b->added[b->added_order[j]];
            if (a->normalized == normalized && a->len <= len - i && memcmp(s + i, a->content, a->len) == 0) {
                *at = i;
                return b->added_order[j];
            }
        }
    }
    return -1;
}

/* Cuts the added tokens of one kind out of s; calls `rest` on the text
 * between them. lstrip/rstrip tokens swallow neighbouring whitespace. */
typedef struct {
    bpe_tokenizer *b;
    encode_scratch *s;
    id_vec *out;
} encode_ctx;

static void split_added(encode_ctx *c, const char *s, size_t len, int normalized,
                        void (*rest)(encode_ctx *, const char *, size_t)) {
    const bpe_tokenizer *b = c->b;
    size_t done = 0, from = 0, at;
    int k;
    while (from < len && (k = find_added(b, s, len, from, normalized, &at)) >= 0) {
        const added_token *a = &b->added[k];
        size_t start = at, stop = at + a->len, cl;
        if (a->lstrip) {
            /* Step back over whitespace, not into text already consumed. */
            size_t j = start;
            while (j > done) {
                size_t p = j - 1;
                while (p > done && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
                if (!is_space_at(s, p, &cl)) break;
                j = p;
            }
            start = j;
        }
        if (a->rstrip)
            while (stop < len && is_space_at(s, stop, &cl)) stop += cl;
        if (start > done) rest(c, s + done, start - done);
        ids_push(c->out, a->id);
        done = from = stop;
    }
    if (done < len) rest(c, s + done, len - done);
}

static void encode_after_normalize(encode_ctx *c, const char *s, size_t len) {
    encode_plain(c->b, c->s, s, len, c->out);
}

static void encode_normalized(encode_ctx *c, const char *s, size_t len) {
    char *norm = NULL;
    if (c->b->nfc && !unicode_is_nfc_quick(s, len)) {
        unicode_nfc(s, len, &norm, &len);
        s = norm;
    }
    split_added(c, s, len, 1, encode_after_normalize);
    free(norm);
}

dk_status bpe_encode(bpe_tokenizer *b, const char *text, size_t len, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    size_t valid = unicode_utf8_valid_prefix(text, len);
    if (valid != len)
        return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: input is not valid UTF-8 at byte %zu", b->path, valid);
    if (len > (size_t)1 << 30)
        return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: input of %zu bytes is too long", b->path, len);
    encode_scratch s = {0};
    s.md = pcre2_match_data_create(8, NULL);
    s.path = b->path;
    id_vec out = {0};
    encode_ctx c = {b, &s, &out};
    split_added(&c, text, len, 0, encode_normalized);
    pcre2_match_data_free(s.md);
    if (s.mctx) pcre2_match_context_free(s.mctx);
    if (s.jit_stack) pcre2_jit_stack_free(s.jit_stack);
    free(s.buf);
    free(s.pieces.v);
    free(s.next_pieces.v);
    free(s.sym);
    free(s.prev);
    free(s.next);
    free(s.heap);
    free(s.word.v);
    if (s.status) {
        free(out.v);
        return s.status;
    }
    *ids = out.v ? out.v : dk_malloc(sizeof(int32_t));
    *n = out.n;
    return DK_OK;
}

/* ---- decoding ------------------------------------------------------------------ */

dk_status bpe_decode(const bpe_tokenizer *b, const int32_t *ids, int n, int skip_special, char **text, size_t *len) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= b->n_ids || !b->id_str[id])
            return dk_fail(DK_ERR_RUNTIME, "tokenizer %s: cannot decode id %d at position %d (vocabulary of %d)",
                           b->path, id, i, b->n_ids);
        if (!(skip_special && b->id_special[id])) total += b->id_bytes_len[id];
    }
    char *o = dk_malloc(total + 1);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (skip_special && b->id_special[id]) continue;
        memcpy(o + k, b->id_bytes[id], b->id_bytes_len[id]);
        k += b->id_bytes_len[id];
    }
    o[k] = '\0';
    *text = o;
    if (len) *len = k;
    return DK_OK;
}

/* HF's ByteLevel decoder: a token whose characters are all in the byte
 * alphabet becomes those bytes; any other token stays as its UTF-8 text. */
static void token_bytes(const char *tok, char **out, size_t *out_len) {
    size_t n = strlen(tok);
    char *o = dk_malloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int cl;
        int byte = unicode_to_byte(unicode_utf8_decode((const unsigned char *)tok + i, &cl));
        if (byte < 0) {
            memcpy(o, tok, n);
            k = n;
            break;
        }
        o[k++] = (char)byte;
        i += (size_t)cl;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
}

/* ---- loading ------------------------------------------------------------------- */

/* Makes \s, \S, \p{L}, \p{N}, \P{L} and \P{N} mean what Oniguruma means by
 * them (see the top of the file). \S, \P{..} inside a class stay as they are:
 * a negated set cannot be widened inside another class. */
static const char SPACE_ITEMS[] =
    "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
static const char LETTER_ITEMS[] =
    "\\p{L}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}"
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}"
    "\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}"
    "\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
static const char NUMBER_ITEMS[] =
    "\\p{N}\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

typedef struct {
    char *v;
    size_t n, cap;
} str_buf;

static void sb_add(str_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = pow2_at_least(b->n + n + 1);
        b->v = dk_realloc(b->v, b->cap);
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    b->v[b->n] = '\0';
}

static void sb_adds(str_buf *b, const char *s) { sb_add(b, s, strlen(s)); }

static char *rewrite_pattern(const char *p) {
    str_buf o = {0};
    sb_add(&o, "", 0);
    int in_class = 0;
    size_t n = strlen(p);
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            int letter = strncmp(p + i + 2, "{L}", 3) == 0, number = strncmp(p + i + 2, "{N}", 3) == 0;
            const char *items = NULL;
            int negate = 0;
            size_t skip = 2;
            if (e == 's' || e == 'S') items = SPACE_ITEMS, negate = e == 'S';
            else if ((e == 'p' || e == 'P') && (letter || number))
                items = letter ? LETTER_ITEMS : NUMBER_ITEMS, negate = e == 'P', skip = 5;
            if (items && in_class && !negate) {
                sb_adds(&o, items);
            } else if (items && !in_class) {
                sb_adds(&o, negate ? "[^" : "[");
                sb_adds(&o, items);
                sb_adds(&o, "]");
            } else {
                sb_add(&o, p + i, skip);
            }
            i += skip - 1;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            sb_add(&o, p + i, 1);
            /* A ']' right after '[' or '[^' is a literal member. */
            if (i + 1 < n && p[i + 1] == '^') sb_add(&o, p + ++i, 1);
            if (i + 1 < n && p[i + 1] == ']') sb_add(&o, p + ++i, 1);
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = strstr(p + i + 2, ":]");
            size_t m = end ? (size_t)(end - (p + i)) + 2 : 1;
            sb_add(&o, p + i, m);
            i += m - 1;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        sb_add(&o, p + i, 1);
    }
    return o.v;
}

static dk_status compile_regex(const char *path, const char *where, const char *pattern, int literal,
                               pcre2_code **out) {
    char *rewritten = literal ? dk_strdup(pattern) : rewrite_pattern(pattern);
    int err;
    PCRE2_SIZE erroff;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, opts, &err, &erroff, NULL);
    free(rewritten);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dk_fail(DK_ERR_RUNTIME, "%s: %s: regex /%s/ does not compile: %s", path, where, pattern,
                       (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    *out = re;
    return DK_OK;
}

static void add_step(bpe_tokenizer *b, int kind, pcre2_code *re) {
    b->steps = dk_realloc(b->steps, (size_t)(b->n_steps + 1) * sizeof(pretok_step));
    b->steps[b->n_steps].kind = kind;
    b->steps[b->n_steps].re = re;
    b->n_steps++;
}

static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int json_flag(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static const char *json_type(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static dk_status load_pretokenizer(bpe_tokenizer *b, const cJSON *pt, const char *where, int *n_bytelevel) {
    const char *type = json_type(pt);
    if (!type) return dk_fail(DK_ERR_RUNTIME, "%s: %s has no \"type\"", b->path, where);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) return dk_fail(DK_ERR_RUNTIME, "%s: %s.pretokenizers is not a list", b->path, where);
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", where, i++);
            DK_TRY(load_pretokenizer(b, it, sub, n_bytelevel));
        }
        return DK_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(re) && !cJSON_IsString(lit))
            return dk_fail(DK_ERR_RUNTIME, "%s: %s.pattern has neither \"Regex\" nor \"String\"", b->path, where);
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
            return dk_fail(DK_ERR_RUNTIME, "%s: %s.behavior '%s' is unsupported (only \"Isolated\")", b->path, where,
                           cJSON_IsString(beh) ? beh->valuestring : "?");
        if (json_flag(pt, "invert", 0))
            return dk_fail(DK_ERR_RUNTIME, "%s: %s.invert = true is unsupported", b->path, where);
        pcre2_code *code;
        DK_TRY(compile_regex(b->path, where, cJSON_IsString(re) ? re->valuestring : lit->valuestring,
                             !cJSON_IsString(re), &code));
        add_step(b, STEP_SPLIT, code);
        return DK_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        (*n_bytelevel)++;
        if (json_flag(pt, "add_prefix_space", 0)) add_step(b, STEP_PREFIX_SPACE, NULL);
        if (json_flag(pt, "use_regex", 1)) {
            pcre2_code *code;
            DK_TRY(compile_regex(b->path, where, GPT2_PATTERN, 0, &code));
            add_step(b, STEP_SPLIT, code);
        }
        return DK_OK;
    }
    return dk_fail(DK_ERR_RUNTIME, "%s: %s type '%s' is unsupported (Split, ByteLevel or a Sequence of them)",
                   b->path, where, type);
}

static dk_status load_normalizer(bpe_tokenizer *b, const cJSON *nm, const char *where) {
    if (!nm || cJSON_IsNull(nm)) return DK_OK;
    const char *type = json_type(nm);
    if (type && strcmp(type, "NFC") == 0) {
        b->nfc = 1;
        return DK_OK;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(nm, "normalizers");
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, list) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", where, i++);
            DK_TRY(load_normalizer(b, it, sub));
        }
        return DK_OK;
    }
    return dk_fail(DK_ERR_RUNTIME, "%s: %s type '%s' is unsupported (only NFC)", b->path, where, type ? type : "?");
}

static dk_status grow_ids(bpe_tokenizer *b, long id, const char *where) {
    if (id < 0 || id >= (1L << 24))
        return dk_fail(DK_ERR_RUNTIME, "%s: %s: token id %ld out of range", b->path, where, id);
    if (id < b->n_ids) return DK_OK;
    int n = (int)id + 1;
    b->id_str = dk_realloc(b->id_str, (size_t)n * sizeof(char *));
    for (int i = b->n_ids; i < n; i++) b->id_str[i] = NULL;
    b->n_ids = n;
    return DK_OK;
}

static dk_status load_model(bpe_tokenizer *b, const cJSON *model) {
    const char *type = json_type(model);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type ? strcmp(type, "BPE") != 0 : !cJSON_IsArray(merges))
        return dk_fail(DK_ERR_RUNTIME, "%s: unsupported model type '%s' (only BPE)", b->path, type ? type : "?");
    if (!cJSON_IsObject(vocab)) return dk_fail(DK_ERR_RUNTIME, "%s: model.vocab is missing or not an object", b->path);
    if (!cJSON_IsArray(merges)) return dk_fail(DK_ERR_RUNTIME, "%s: model.merges is missing or not a list", b->path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(v) && v->valuedouble > 0)
        return dk_fail(DK_ERR_RUNTIME, "%s: model.dropout = %g is unsupported (encoding must be deterministic)",
                       b->path, v->valuedouble);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(model, affix[i]);
        if (cJSON_IsString(v) && v->valuestring[0])
            return dk_fail(DK_ERR_RUNTIME, "%s: model.%s '%s' is unsupported (byte-level BPE has none)", b->path,
                           affix[i], v->valuestring);
    }
    b->fuse_unk = json_flag(model, "fuse_unk", 0);
    b->byte_fallback = json_flag(model, "byte_fallback", 0);
    b->ignore_merges = json_flag(model, "ignore_merges", 0);

    int n_vocab = cJSON_GetArraySize(vocab);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)(long)it->valuedouble)
            return dk_fail(DK_ERR_RUNTIME, "%s: model.vocab['%s'] is not an integer id", b->path, it->string);
        long id = (long)it->valuedouble;
        DK_TRY(grow_ids(b, id, "model.vocab"));
        if (!b->id_str[id]) b->id_str[id] = dk_strdup(it->string);
    }
    str_map_init(&b->vocab, (size_t)n_vocab);
    cJSON_ArrayForEach(it, vocab) str_map_put(&b->vocab, it->string, (int32_t)it->valuedouble);

    b->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(v)) {
        b->unk_id = str_map_get(&b->vocab, v->valuestring, strlen(v->valuestring));
        if (b->unk_id < 0)
            return dk_fail(DK_ERR_RUNTIME, "%s: model.unk_token '%s' is not in model.vocab", b->path, v->valuestring);
    }
    for (int c = 0; c < 256; c++) {
        char tok[8], byte = (char)c;
        size_t k = bytes_to_token(&byte, 1, tok);
        b->byte_id[c] = str_map_get(&b->vocab, tok, k);
    }

    int n_merges = cJSON_GetArraySize(merges);
    merge_map_init(&b->merges, (size_t)n_merges);
    str_buf joined = {0};
    int rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if (cJSON_IsString(it)) {
            const char *sp = strchr(it->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                l = it->valuestring;
                ll = (size_t)(sp - l);
                r = sp + 1;
                rl = strlen(r);
            }
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            l = cJSON_GetArrayItem(it, 0)->valuestring;
            r = cJSON_GetArrayItem(it, 1)->valuestring;
            ll = strlen(l);
            rl = strlen(r);
        }
        if (!l) {
            free(joined.v);
            return dk_fail(DK_ERR_RUNTIME, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", b->path, rank);
        }
        joined.n = 0;
        sb_add(&joined, l, ll);
        sb_add(&joined, r, rl);
        int32_t a = str_map_get(&b->vocab, l, ll);
        int32_t c = str_map_get(&b->vocab, r, rl);
        int32_t m = str_map_get(&b->vocab, joined.v, joined.n);
        if (a < 0 || c < 0 || m < 0) {
            const char *miss = a < 0 ? l : c < 0 ? r : joined.v;
            int miss_len = (int)(a < 0 ? ll : c < 0 ? rl : joined.n);
            dk_status st = dk_fail(DK_ERR_RUNTIME, "%s: model.merges[%d] ('%.*s' + '%.*s'): '%.*s' is not in model.vocab",
                                   b->path, rank, (int)ll, l, (int)rl, r, miss_len, miss);
            free(joined.v);
            return st;
        }
        merge_map_put(&b->merges, a, c, rank, m);
        rank++;
    }
    free(joined.v);
    return DK_OK;
}

static dk_status load_added(bpe_tokenizer *b, const cJSON *list) {
    if (!list || cJSON_IsNull(list)) return DK_OK;
    if (!cJSON_IsArray(list)) return dk_fail(DK_ERR_RUNTIME, "%s: added_tokens is not a list", b->path);
    int n = cJSON_GetArraySize(list);
    b->added = dk_calloc((size_t)(n ? n : 1), sizeof(added_token));
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || !content->valuestring[0])
            return dk_fail(DK_ERR_RUNTIME, "%s: added_tokens[%d] needs an integer \"id\" and a non-empty \"content\"",
                           b->path, i);
        if (json_flag(it, "single_word", 0))
            return dk_fail(DK_ERR_RUNTIME, "%s: added_tokens[%d] '%s': single_word = true is unsupported", b->path, i,
                           content->valuestring);
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%d]", i);
        DK_TRY(grow_ids(b, (long)id->valuedouble, where));
        added_token *a = &b->added[b->n_added++];
        a->id = (int32_t)id->valuedouble;
        a->special = json_flag(it, "special", 0);
        a->normalized = json_flag(it, "normalized", !a->special);
        a->lstrip = json_flag(it, "lstrip", 0);
        a->rstrip = json_flag(it, "rstrip", 0);
        a->content = dk_strdup(content->valuestring);
        a->len = strlen(a->content);
        i++;
    }
    return DK_OK;
}

typedef struct {
    unsigned first;
    size_t len;
    int index;
} added_key;

static int added_key_cmp(const void *pa, const void *pb) {
    const added_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->index - b->index;
}

dk_status bpe_load(const char *path, bpe_tokenizer **out) {
    *out = NULL;
    char *text;
    size_t len;
    DK_TRY(dk_read_file(path, &text, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = text; end && p < end && p < text + len; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        free(text);
        return dk_fail(DK_ERR_RUNTIME, "%s: invalid JSON at line %d, column %d", path, line, col);
    }
    free(text);

    bpe_tokenizer *b = dk_calloc(1, sizeof *b);
    b->path = dk_strdup(path);
    pthread_mutex_init(&b->cache_lock, NULL);
    cache_clear(&b->cache);
    dk_status st = DK_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) st = dk_fail(DK_ERR_RUNTIME, "%s: no \"model\" object (not a tokenizer.json?)", path);
    if (!st) st = load_model(b, model);
    if (!st) st = load_added(b, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (!st) st = load_normalizer(b, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int n_bytelevel = 0;
    if (!st && cJSON_IsObject(pt)) st = load_pretokenizer(b, pt, "pre_tokenizer", &n_bytelevel);
    if (!st && n_bytelevel != 1)
        st = dk_fail(DK_ERR_RUNTIME, "%s: pre_tokenizer has %d ByteLevel steps; byte-level BPE needs exactly one",
                     path, n_bytelevel);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!st && (!json_type(dec) || strcmp(json_type(dec), "ByteLevel") != 0))
        st = dk_fail(DK_ERR_RUNTIME, "%s: decoder type '%s' is unsupported (only ByteLevel)", path,
                     json_type(dec) ? json_type(dec) : "null");
    cJSON_Delete(root);
    if (st) {
        bpe_free(b);
        return st;
    }

    /* Added tokens: an added token's content is the string of its id (and
     * is looked up before model.vocab, as in HF), those matched against
     * normalized text are normalized themselves, and every id gets its
     * decoded bytes. */
    b->id_special = dk_calloc((size_t)b->n_ids, 1);
    str_map_init(&b->added_map, (size_t)b->n_added);
    for (int i = 0; i < b->n_added; i++) {
        added_token *a = &b->added[i];
        if (b->id_str[a->id] && strcmp(b->id_str[a->id], a->content) != 0) {
            free(b->id_str[a->id]);
            b->id_str[a->id] = NULL;
        }
        if (!b->id_str[a->id]) b->id_str[a->id] = dk_strdup(a->content);
        b->id_special[a->id] = (uint8_t)a->special;
        str_map_put(&b->added_map, a->content, a->id);
        if (a->normalized && b->nfc && !unicode_is_nfc_quick(a->content, a->len)) {
            char *norm;
            unicode_nfc(a->content, a->len, &norm, &a->len);
            free(a->content);
            a->content = norm;
        }
    }
    /* Bucket the added tokens by first byte, longest first, so the first
     * hit at a position is the longest match there. */
    added_key *keys = dk_malloc((size_t)(b->n_added ? b->n_added : 1) * sizeof(added_key));
    for (int i = 0; i < b->n_added; i++)
        keys[i] = (added_key){(unsigned char)b->added[i].content[0], b->added[i].len, i};
    qsort(keys, (size_t)b->n_added, sizeof(added_key), added_key_cmp);
    b->added_order = dk_malloc((size_t)(b->n_added ? b->n_added : 1) * sizeof(int));
    for (int i = 0; i < b->n_added; i++) b->added_order[i] = keys[i].index;
    free(keys);
    for (int c = 0, j = 0; c <= 256; c++) {
        while (j < b->n_added && (unsigned char)b->added[b->added_order[j]].content[0] < c) j++;
        b->added_bucket[c] = j;
    }
    b->id_bytes = dk_calloc((size_t)b->n_ids, sizeof(char *));
    b->id_bytes_len = dk_calloc((size_t)b->n_ids, sizeof(size_t));
    for (int i = 0; i < b->n_ids; i++)
        if (b->id_str[i]) token_bytes(b->id_str[i], &b->id_bytes[i], &b->id_bytes_len[i]);
    *out = b;
    return DK_OK;
}

void bpe_free(bpe_tokenizer *b) {
    if (!b) return;
    for (int i = 0; i < b->n_ids; i++) {
        free(b->id_str[i]);
        if (b->id_bytes) free(b->id_bytes[i]);
    }
    free(b->id_str);
    free(b->id_bytes);
    free(b->id_bytes_len);
    free(b->id_special);
    str_map_free(&b->vocab);
    str_map_free(&b->added_map);
    free(b->merges.key);
    free(b->merges.rank);
    free(b->merges.merged);
    for (int i = 0; i < b->n_added; i++) free(b->added[i].content);
    free(b->added);
    free(b->added_order);
    for (int i = 0; i < b->n_steps; i++) pcre2_code_free(b->steps[i].re);
    free(b->steps);
    cache_free(&b->cache);
    pthread_mutex_destroy(&b->cache_lock);
    free(b->path);
    free(b);
}

int bpe_vocab_size(const bpe_tokenizer *b) { return b->n_ids; }

int bpe_token_id(const bpe_tokenizer *b, const char *token) {
    size_t n = strlen(token);
    int32_t id = b->added_map.key ? str_map_get(&b->added_map, token, n) : -1;
    return id >= 0 ? id : str_map_get(&b->vocab, token, n);
}

const char *bpe_token_str(const bpe_tokenizer *b, int id) {
    return id >= 0 && id < b->n_ids ? b->id_str[id] : NULL;
}

int bpe_is_special(const bpe_tokenizer *b, int id) { return id >= 0 && id < b->n_ids && b->id_special[id]; }
