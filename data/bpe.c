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
#include "data/bpe_internal.h"

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

size_t bpe_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

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

void bpe_str_map_init(str_map *m, size_t n) {
    size_t cap = bpe_pow2_at_least(2 * n + 1);
    m->key = dk_calloc(cap, sizeof(char *));
    m->len = dk_malloc(cap * sizeof(uint32_t));
    m->id = dk_malloc(cap * sizeof(int32_t));
    m->mask = cap - 1;
}

void bpe_str_map_free(str_map *m) {
    if (m->key)
        for (size_t i = 0; i <= m->mask; i++) free(m->key[i]);
    free(m->key);
    free(m->len);
    free(m->id);
}

int32_t bpe_str_map_get(const str_map *m, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        if (!m->key[i]) return -1;
        if (m->len[i] == n && memcmp(m->key[i], s, n) == 0) return m->id[i];
    }
}

/* Sets s -> id; a repeated string keeps its last id, as a JSON object does. */
void bpe_str_map_put(str_map *m, const char *s, int32_t id) {
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

void bpe_merge_map_init(merge_map *m, size_t n) {
    size_t cap = bpe_pow2_at_least(2 * n + 1);
    m->key = dk_malloc(cap * sizeof(uint64_t));
    m->rank = dk_malloc(cap * sizeof(int32_t));
    m->merged = dk_malloc(cap * sizeof(int32_t));
    for (size_t i = 0; i < cap; i++) m->key[i] = EMPTY_KEY;
    m->mask = cap - 1;
}

/* A later duplicate of a pair replaces the earlier one, as in HF's map. */
void bpe_merge_map_put(merge_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
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

void bpe_cache_clear(piece_cache *c) {
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

void bpe_cache_free(piece_cache *c) {
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
        bpe_cache_clear(c);
    if (c->keys_len + n > c->keys_cap) {
        c->keys_cap = bpe_pow2_at_least(c->keys_len + n + 4096);
        c->keys = dk_realloc(c->keys, c->keys_cap);
    }
    if (c->ids_len + (size_t)n_ids > c->ids_cap) {
        c->ids_cap = bpe_pow2_at_least(c->ids_len + (size_t)n_ids + 1024);
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
        s->buf_cap = bpe_pow2_at_least(s->buf_len + n + 1);
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
size_t bpe_bytes_to_token(const char *p, size_t n, char *out) {
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
            fb[k] = bpe_str_map_get(&b->vocab, name, strlen(name));
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
        size_t k = bpe_bytes_to_token(p, n, tok);
        int32_t id = bpe_str_map_get(&b->vocab, tok, k);
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
            s->buf_cap = bpe_pow2_at_least(s->buf_len + pc->len + 1);
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
void bpe_token_bytes(const char *tok, char **out, size_t *out_len) {
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
