/* strmap.c: FNV-1a hashed buckets of singly linked entries. */
#include "env/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct kg_strmap_entry {
    kg_strmap_entry *next;
    void *value;
    char key[];
};

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void kg_strmap_init(kg_strmap *m) {
    m->n_buckets = 64;
    m->count = 0;
    m->buckets = dk_calloc(m->n_buckets, sizeof *m->buckets);
}

void kg_strmap_free(kg_strmap *m, void (*free_value)(void *)) {
    for (size_t i = 0; i < m->n_buckets; i++) {
        kg_strmap_entry *e = m->buckets[i];
        while (e) {
            kg_strmap_entry *next = e->next;
            if (free_value) free_value(e->value);
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = NULL;
    m->n_buckets = m->count = 0;
}

static void grow(kg_strmap *m) {
    size_t nb = m->n_buckets * 2;
    kg_strmap_entry **b = dk_calloc(nb, sizeof *b);
    for (size_t i = 0; i < m->n_buckets; i++) {
        kg_strmap_entry *e = m->buckets[i];
        while (e) {
            kg_strmap_entry *next = e->next;
            size_t k = hash(e->key) & (nb - 1);
            e->next = b[k];
            b[k] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->n_buckets = nb;
}

void *kg_strmap_put(kg_strmap *m, const char *key, void *value) {
    size_t k = hash(key) & (m->n_buckets - 1);
    for (kg_strmap_entry *e = m->buckets[k]; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            void *old = e->value;
            e->value = value;
            return old;
        }
    size_t n = strlen(key) + 1;
    kg_strmap_entry *e = dk_malloc(sizeof *e + n);
    memcpy(e->key, key, n);
    e->value = value;
    e->next = m->buckets[k];
    m->buckets[k] = e;
    if (++m->count > m->n_buckets) grow(m);
    return NULL;
}

void *kg_strmap_get(const kg_strmap *m, const char *key, int *found) {
    size_t k = hash(key) & (m->n_buckets - 1);
    for (kg_strmap_entry *e = m->buckets[k]; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            if (found) *found = 1;
            return e->value;
        }
    if (found) *found = 0;
    return NULL;
}

void *kg_strmap_remove(kg_strmap *m, const char *key, int *found) {
    size_t k = hash(key) & (m->n_buckets - 1);
    for (kg_strmap_entry **p = &m->buckets[k]; *p; p = &(*p)->next)
        if (strcmp((*p)->key, key) == 0) {
            kg_strmap_entry *e = *p;
            void *v = e->value;
            *p = e->next;
            free(e);
            m->count--;
            if (found) *found = 1;
            return v;
        }
    if (found) *found = 0;
    return NULL;
}

void kg_strmap_each(const kg_strmap *m, void (*fn)(const char *key, void *value, void *user), void *user) {
    for (size_t b = 0; b < m->n_buckets; b++)
        for (kg_strmap_entry *e = m->buckets[b]; e; e = e->next) fn(e->key, e->value, user);
}
