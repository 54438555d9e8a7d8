/* bpe_load.c: reads a Hugging Face tokenizer.json into the tokenizer of
 * bpe_internal.h: the vocabulary and merges, the added tokens, the
 * normalizer and the pre-tokenizer steps (with the regex rewrite described
 * at the top of bpe.c); anything it does not support is an error naming the
 * file and the field. */
#define _POSIX_C_SOURCE 200809L
#include "data/bpe_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/unicode.h"

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
        b->cap = bpe_pow2_at_least(b->n + n + 1);
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
    bpe_str_map_init(&b->vocab, (size_t)n_vocab);
    cJSON_ArrayForEach(it, vocab) bpe_str_map_put(&b->vocab, it->string, (int32_t)it->valuedouble);

    b->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(v)) {
        b->unk_id = bpe_str_map_get(&b->vocab, v->valuestring, strlen(v->valuestring));
        if (b->unk_id < 0)
            return dk_fail(DK_ERR_RUNTIME, "%s: model.unk_token '%s' is not in model.vocab", b->path, v->valuestring);
    }
    for (int c = 0; c < 256; c++) {
        char tok[8], byte = (char)c;
        size_t k = bpe_bytes_to_token(&byte, 1, tok);
        b->byte_id[c] = bpe_str_map_get(&b->vocab, tok, k);
    }

    int n_merges = cJSON_GetArraySize(merges);
    bpe_merge_map_init(&b->merges, (size_t)n_merges);
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
        int32_t a = bpe_str_map_get(&b->vocab, l, ll);
        int32_t c = bpe_str_map_get(&b->vocab, r, rl);
        int32_t m = bpe_str_map_get(&b->vocab, joined.v, joined.n);
        if (a < 0 || c < 0 || m < 0) {
            const char *miss = a < 0 ? l : c < 0 ? r : joined.v;
            int miss_len = (int)(a < 0 ? ll : c < 0 ? rl : joined.n);
            dk_status st = dk_fail(DK_ERR_RUNTIME, "%s: model.merges[%d] ('%.*s' + '%.*s'): '%.*s' is not in model.vocab",
                                   b->path, rank, (int)ll, l, (int)rl, r, miss_len, miss);
            free(joined.v);
            return st;
        }
        bpe_merge_map_put(&b->merges, a, c, rank, m);
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
    bpe_cache_clear(&b->cache);
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
    bpe_str_map_init(&b->added_map, (size_t)b->n_added);
    for (int i = 0; i < b->n_added; i++) {
        added_token *a = &b->added[i];
        if (b->id_str[a->id] && strcmp(b->id_str[a->id], a->content) != 0) {
            free(b->id_str[a->id]);
            b->id_str[a->id] = NULL;
        }
        if (!b->id_str[a->id]) b->id_str[a->id] = dk_strdup(a->content);
        b->id_special[a->id] = (uint8_t)a->special;
        bpe_str_map_put(&b->added_map, a->content, a->id);
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
        if (b->id_str[i]) bpe_token_bytes(b->id_str[i], &b->id_bytes[i], &b->id_bytes_len[i]);
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
    bpe_str_map_free(&b->vocab);
    bpe_str_map_free(&b->added_map);
    free(b->merges.key);
    free(b->merges.rank);
    free(b->merges.merged);
    for (int i = 0; i < b->n_added; i++) free(b->added[i].content);
    free(b->added);
    free(b->added_order);
    for (int i = 0; i < b->n_steps; i++) pcre2_code_free(b->steps[i].re);
    free(b->steps);
    bpe_cache_free(&b->cache);
    pthread_mutex_destroy(&b->cache_lock);
    free(b->path);
    free(b);
}

int bpe_vocab_size(const bpe_tokenizer *b) { return b->n_ids; }

int bpe_token_id(const bpe_tokenizer *b, const char *token) {
    size_t n = strlen(token);
    int32_t id = b->added_map.key ? bpe_str_map_get(&b->added_map, token, n) : -1;
    return id >= 0 ? id : bpe_str_map_get(&b->vocab, token, n);
}

const char *bpe_token_str(const bpe_tokenizer *b, int id) {
    return id >= 0 && id < b->n_ids ? b->id_str[id] : NULL;
}

int bpe_is_special(const bpe_tokenizer *b, int id) { return id >= 0 && id < b->n_ids && b->id_special[id]; }
