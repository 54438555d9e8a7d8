/* config_keys.h: the one table of run-config keys (config_keys.c), shared by
 * the loader, printer and describer in config.c. Internal to trainer/. */
#ifndef DK_TRAINER_CONFIG_KEYS_H
#define DK_TRAINER_CONFIG_KEYS_H

#include <stddef.h>

typedef enum { CK_INT, CK_FLOAT, CK_BOOL, CK_STRING, CK_ENUM } config_key_type;

/* Allowed numeric range, checked on every assignment. */
typedef enum {
    CR_ANY,
    CR_POS,      /* > 0 */
    CR_NONNEG,   /* >= 0 */
    CR_NONPOS,   /* <= 0 */
    CR_ID,       /* >= -1 (-1 = none) */
    CR_UNIT,     /* in [0, 1] */
    CR_UNIT_LT1, /* in [0, 1) */
    CR_PROB,     /* in (0, 1] */
} config_range;

enum { CF_ARCH_DEFAULT = 1 }; /* default follows [model] arch when not set */

typedef struct {
    const char *section, *key;
    config_key_type type;
    size_t offset;      /* offsetof into dk_config */
    const char *def;    /* default, written as it would be in the ini */
    const char *values; /* enum: allowed values "a|b|c", in the C enum's order */
    config_range range;
    int flags;
    const char *doc;
} config_key;

typedef struct {
    const char *name, *doc;
} config_section;

/* Names people carry over from other trainers or from config.json; used only
 * to suggest the right key, never accepted. */
typedef struct {
    const char *alias, *section, *key;
} config_alias;

extern const config_key config_keys[];
extern const int config_n_keys;
extern const config_section config_sections[];
extern const int config_n_sections;
extern const config_alias config_aliases[];
extern const int config_n_aliases;

#endif
