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

/* Where a default comes from. Most are this project's choice; those the Dr.
 * Kernel recipe sets follow one of three sources, and configs/README.md says
 * which: the product brief (PPO clip 0.2 on both sides), the recipe write-up,
 * or the public training script of the 14B model. */
typedef enum { CS_OURS = 0, CS_BRIEF, CS_WRITEUP, CS_SCRIPT } config_source;

typedef struct {
    const char *section, *key;
    config_key_type type;
    size_t offset;      /* offsetof into dk_config */
    const char *def;    /* default, written as it would be in the ini */
    const char *const *names; /* enum: the value names, indexed by the C enum (its layer's table) */
    int n_names;
    config_range range;
    int flags;
    const char *doc;
    config_source source;
    const char *script; /* the public 14B script's value where the default differs from it, else NULL */
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
