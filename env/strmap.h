/* strmap.h: a small string-keyed hash map (separate chaining, grows by
 * doubling) for job ids: which ids a client still waits for, and results
 * that arrived before anyone asked for them. */
#ifndef KG_STRMAP_H
#define KG_STRMAP_H

#include <stddef.h>

typedef struct kg_strmap_entry kg_strmap_entry;

typedef struct {
    kg_strmap_entry **buckets;
    size_t n_buckets, count;
} kg_strmap;

void kg_strmap_init(kg_strmap *m);
/* Frees the map; free_value (may be NULL) is called on every value. */
void kg_strmap_free(kg_strmap *m, void (*free_value)(void *));
/* Sets key -> value (the key is copied); returns the previous value or NULL. */
void *kg_strmap_put(kg_strmap *m, const char *key, void *value);
/* The value, or NULL when the key is absent; *found (may be NULL) tells. */
void *kg_strmap_get(const kg_strmap *m, const char *key, int *found);
/* Removes the key; returns its value (NULL when absent); *found tells. */
void *kg_strmap_remove(kg_strmap *m, const char *key, int *found);
/* Calls fn on every entry, in no particular order; fn must not change the map. */
void kg_strmap_each(const kg_strmap *m, void (*fn)(const char *key, void *value, void *user), void *user);

#endif
