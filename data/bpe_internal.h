/* bpe_internal.h: the byte-level BPE tokenizer's data structures, shared by
 * its two halves: bpe.c (hash maps, encoding, decoding) and bpe_load.c
 * (reading tokenizer.json). Not for use outside data/bpe*.c. */
#ifndef DK_BPE_INTERNAL_H
#define DK_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"

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

size_t bpe_pow2_at_least(size_t n);
void bpe_str_map_init(str_map *m, size_t n);
void bpe_str_map_free(str_map *m);
int32_t bpe_str_map_get(const str_map *m, const char *s, size_t n);
void bpe_str_map_put(str_map *m, const char *s, int32_t id);
void bpe_merge_map_init(merge_map *m, size_t n);
void bpe_merge_map_put(merge_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
void bpe_cache_clear(piece_cache *c);
void bpe_cache_free(piece_cache *c);
size_t bpe_bytes_to_token(const char *p, size_t n, char *out);
void bpe_token_bytes(const char *tok, char **out, size_t *out_len);

#endif
