/* config.c: loads, checks, prints, saves and documents the run configuration
 * by walking the key table of config_keys.c; no key is handled by name except
 * where keys depend on each other (derived defaults, cross-key checks).
 *
 * Order of resolution: defaults -> ini file -> command-line overrides ->
 * derived values (run.dir, tokenizer.path, the model's implied shape) ->
 * checks. The ini file goes through inih; a line-counting reader gives every
 * error its FILE:LINE and catches [section] headers even when empty. */
#define _POSIX_C_SOURCE 200809L
#include "trainer/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "trainer/config_keys.h"

/* Lines may be this long; strings are shorter (DK_CONFIG_STR). */
#define CONFIG_MAX_LINE 4096

/* ---- the table ---------------------------------------------------------------- */

static void *key_ptr(dk_config *cfg, const config_key *k) { return (char *)cfg + k->offset; }
static const void *key_cptr(const dk_config *cfg, const config_key *k) { return (const char *)cfg + k->offset; }

static const config_section *section_find(const char *name) {
    for (int i = 0; i < config_n_sections; i++)
        if (!strcmp(config_sections[i].name, name)) return &config_sections[i];
    return NULL;
}

static int key_index(const char *section, const char *key) {
    for (int i = 0; i < config_n_keys; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].key, key)) return i;
    return -1;
}

/* Index of s among the key's value names, or -1. */
static int enum_index(const config_key *k, const char *s) {
    for (int i = 0; i < k->n_names; i++)
        if (!strcmp(k->names[i], s)) return i;
    return -1;
}

/* The name of value idx ("?" when out of range). */
static const char *enum_name(const config_key *k, int idx) {
    return idx >= 0 && idx < k->n_names ? k->names[idx] : "?";
}

/* The key's values as "a, b, c" (with `quote` around each). */
static void enum_list(const config_key *k, const char *quote, char *buf, size_t n) {
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < k->n_names && w < n; i++)
        w += (size_t)snprintf(buf + w, n - w, "%s%s%s%s", i ? ", " : "", quote, k->names[i], quote);
}

static const char *range_text(config_range r) {
    switch (r) {
    case CR_ANY: return "";
    case CR_POS: return "> 0";
    case CR_NONNEG: return ">= 0";
    case CR_NONPOS: return "<= 0";
    case CR_ID: return ">= -1";
    case CR_UNIT: return "in [0, 1]";
    case CR_UNIT_LT1: return "in [0, 1)";
    case CR_PROB: return "in (0, 1]";
    }
    return "";
}

static bool range_ok(config_range r, double v) {
    switch (r) {
    case CR_ANY: return true;
    case CR_POS: return v > 0;
    case CR_NONNEG: return v >= 0;
    case CR_NONPOS: return v <= 0;
    case CR_ID: return v >= -1;
    case CR_UNIT: return v >= 0 && v <= 1;
    case CR_UNIT_LT1: return v >= 0 && v < 1;
    case CR_PROB: return v > 0 && v <= 1;
    }
    return false;
}

/* ---- values -------------------------------------------------------------------- */

/* Parses text into the key's field. On failure leaves the field alone and
 * writes what was expected into why. */
static bool value_parse(dk_config *cfg, const config_key *k, const char *text, char *why, size_t n) {
    void *p = key_ptr(cfg, k);
    char *end;
    switch (k->type) {
    case CK_INT: {
        errno = 0;
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno == ERANGE || v < INT_MIN || v > INT_MAX) {
            snprintf(why, n, "expected an integer");
            return false;
        }
        if (!range_ok(k->range, (double)v)) {
            snprintf(why, n, "must be %s", range_text(k->range));
            return false;
        }
        *(int *)p = (int)v;
        return true;
    }
    case CK_FLOAT: {
        double v = strtod(text, &end);
        if (!*text || *end || !isfinite(v)) {
            snprintf(why, n, "expected a float");
            return false;
        }
        if (!range_ok(k->range, v)) {
            snprintf(why, n, "must be %s", range_text(k->range));
            return false;
        }
        *(double *)p = v;
        return true;
    }
    case CK_BOOL: {
        static const char *const yes[] = {"true", "1", "yes"}, *const no[] = {"false", "0", "no"};
        for (int i = 0; i < 3; i++) {
            if (!strcasecmp(text, yes[i]) || !strcasecmp(text, no[i])) {
                *(bool *)p = !strcasecmp(text, yes[i]);
                return true;
            }
        }
        snprintf(why, n, "expected a bool (true, false, 1, 0, yes, no)");
        return false;
    }
    case CK_STRING: {
        /* One pair of surrounding double quotes is removed, so a value may
         * keep leading or trailing spaces, or be written "" when empty. */
        size_t len = strlen(text);
        if (len >= 2 && text[0] == '"' && text[len - 1] == '"') text++, len -= 2;
        if (len >= DK_CONFIG_STR) {
            snprintf(why, n, "longer than %d characters", DK_CONFIG_STR - 1);
            return false;
        }
        memset(p, 0, DK_CONFIG_STR);
        memcpy(p, text, len);
        return true;
    }
    case CK_ENUM: {
        int i = enum_index(k, text);
        if (i < 0) {
            char list[200];
            enum_list(k, "", list, sizeof list);
            snprintf(why, n, "expected one of %s", list);
            return false;
        }
        *(int *)p = i;
        return true;
    }
    }
    return false;
}

/* Shortest decimal that reads back as exactly v; whole numbers in full
 * (1000000 rather than 1e+06). */
static void format_double(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The value as it is written in an ini file. */
static const char *value_format(const dk_config *cfg, const config_key *k, char *buf, size_t n) {
    const void *p = key_cptr(cfg, k);
    switch (k->type) {
    case CK_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case CK_FLOAT: format_double(*(const double *)p, buf, n); break;
    case CK_BOOL: snprintf(buf, n, "%s", *(const bool *)p ? "true" : "false"); break;
    case CK_ENUM: return enum_name(k, *(const int *)p);
    case CK_STRING: {
        const char *s = p;
        size_t len = strlen(s);
        bool quote = len > 0 && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1]) ||
                                 (s[0] == '"' && s[len - 1] == '"'));
        snprintf(buf, n, quote ? "\"%s\"" : "%s", s);
        break;
    }
    }
    return buf;
}

/* inih would cut a value at a whitespace-preceded ';' or '#', or at a newline. */
static bool string_savable(const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '\n' || *p == '\r') return false;
        if ((*p == ';' || *p == '#') && p > s && isspace((unsigned char)p[-1])) return false;
    }
    return true;
}

/* A value quoted in a message, cut to a readable length. */
static const char *clip_value(const char *v, char *buf, size_t n) {
    if (strlen(v) < 80) return v;
    snprintf(buf, n, "%.72s...", v);
    return buf;
}

/* ---- suggestions ------------------------------------------------------------- */

/* Optimal-string-alignment distance (adjacent swaps cost 1), case-insensitive. */
static int edit_distance(const char *a, const char *b) {
    enum { M = 64 };
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la >= M) la = M - 1;
    if (lb >= M) lb = M - 1;
    int d[M][M];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* A suggestion is shown only when it is plausibly what was meant. */
static bool close_enough(int d, const char *typed) {
    int len = (int)strlen(typed), limit = (len + 1) / 3;
    return d <= (limit > 2 ? limit : 2);
}

/* " (did you mean [train]?)", or the list of sections when nothing is close. */
static void suggest_section(const char *name, char *out, size_t n) {
    int best = INT_MAX;
    const char *pick = NULL;
    for (int i = 0; i < config_n_sections; i++) {
        int d = edit_distance(name, config_sections[i].name);
        if (d < best) best = d, pick = config_sections[i].name;
    }
    if (pick && close_enough(best, name)) {
        snprintf(out, n, " (did you mean [%s]?)", pick);
        return;
    }
    size_t w = (size_t)snprintf(out, n, " (sections:");
    for (int i = 0; i < config_n_sections && w < n; i++)
        w += (size_t)snprintf(out + w, n - w, " [%s]", config_sections[i].name);
    if (w < n) snprintf(out + w, n - w, ")");
}

/* " (did you mean 'lr'?)": the nearest key of the same section, or of another
 * section when that one is strictly nearer; aliases count as their key. */
static void suggest_key(const char *section, const char *name, char *out, size_t n) {
    int best_same = INT_MAX, best_other = INT_MAX;
    const char *same = NULL, *other = NULL, *other_sec = NULL;
    for (int i = 0; i < config_n_keys + config_n_aliases; i++) {
        const char *sec, *key, *spelled;
        if (i < config_n_keys) {
            sec = config_keys[i].section, key = spelled = config_keys[i].key;
        } else {
            const config_alias *a = &config_aliases[i - config_n_keys];
            sec = a->section, key = a->key, spelled = a->alias;
        }
        int d = edit_distance(name, spelled);
        if (!strcmp(sec, section)) {
            if (d < best_same) best_same = d, same = key;
        } else if (d < best_other) {
            best_other = d, other = key, other_sec = sec;
        }
    }
    out[0] = '\0';
    if (same && best_same <= best_other && close_enough(best_same, name))
        snprintf(out, n, " (did you mean '%s'?)", same);
    else if (other && close_enough(best_other, name))
        snprintf(out, n, " (did you mean '%s' in [%s]?)", other, other_sec);
}

/* ---- loading ------------------------------------------------------------------- */

typedef struct {
    dk_config *cfg;
    const char *file; /* NULL when there is no file */
    FILE *f;
    int line;          /* current line of the file */
    int line_len;      /* characters read so far of the current line */
    bool at_line_start;
    int *set;          /* per key: 0 = default, > 0 = line of the file, -1 = command line */
    dk_status status;  /* first error; its message is dk_error() */
} loader;

/* Where a key got its value, for messages. */
static const char *key_where(const loader *L, int i, char *buf, size_t n) {
    if (!L) return "config";
    if (L->set[i] > 0) snprintf(buf, n, "%s:%d", L->file, L->set[i]);
    else if (L->set[i] < 0) snprintf(buf, n, "command line");
    else snprintf(buf, n, "%s", L->file ? L->file : "config");
    return buf;
}

static void trim_into(const char *s, size_t len, char *out, size_t n) {
    while (len && isspace((unsigned char)*s)) s++, len--;
    while (len && isspace((unsigned char)s[len - 1])) len--;
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = '\0';
}

/* A [section] header: checked here because inih only reports keys, so an
 * empty misspelled section would otherwise pass unnoticed. */
static void loader_header(loader *L, const char *buf) {
    const char *p = buf;
    if (L->line == 1 && !strncmp(p, "\xEF\xBB\xBF", 3)) p += 3;
    while (isspace((unsigned char)*p)) p++;
    const char *close = strchr(p, ']');
    if (*p != '[' || !close) return; /* not a header, or a malformed one inih reports */
    char name[128], hint[256];
    trim_into(p + 1, (size_t)(close - p - 1), name, sizeof name);
    if (section_find(name)) return;
    suggest_section(name, hint, sizeof hint);
    L->status = dk_fail(DK_ERR_USAGE, "%s:%d: unknown section [%s]%s", L->file, L->line, name, hint);
}

static char *loader_read(char *buf, int size, void *stream) {
    loader *L = stream;
    if (L->status || size < 2 || !fgets(buf, size, L->f)) return NULL;
    size_t n = strlen(buf);
    if (L->at_line_start) {
        L->line++;
        L->line_len = 0;
        loader_header(L, buf);
    }
    L->line_len += (int)n;
    L->at_line_start = n > 0 && buf[n - 1] == '\n';
    if (!L->at_line_start && !feof(L->f) && L->line_len >= CONFIG_MAX_LINE - 2 && !L->status)
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: line longer than %d characters", L->file, L->line,
                            CONFIG_MAX_LINE - 3);
    return L->status ? NULL : buf;
}

static int loader_key(void *user, const char *section_raw, const char *name, const char *value) {
    loader *L = user;
    if (L->status) return 0;
    char section[128], why[256], hint[256];
    trim_into(section_raw, strlen(section_raw), section, sizeof section);
    if (!section[0]) {
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: key '%s' is outside any [section]", L->file, L->line, name);
        return 0;
    }
    if (!section_find(section)) { /* normally caught at its header */
        suggest_section(section, hint, sizeof hint);
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: unknown section [%s]%s", L->file, L->line, section, hint);
        return 0;
    }
    int i = key_index(section, name);
    if (i < 0) {
        suggest_key(section, name, hint, sizeof hint);
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: unknown key '%s' in [%s]%s", L->file, L->line, name, section, hint);
        return 0;
    }
    if (L->set[i] > 0) {
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: [%s] %s is set twice (first on line %d)", L->file, L->line, section,
                            name, L->set[i]);
        return 0;
    }
    if (!value_parse(L->cfg, &config_keys[i], value, why, sizeof why)) {
        L->status = dk_fail(DK_ERR_USAGE, "%s:%d: [%s] %s = '%s': %s", L->file, L->line, section, name,
                            clip_value(value, hint, sizeof hint), why);
        return 0;
    }
    L->set[i] = L->line;
    return 1;
}

static dk_status loader_file(loader *L, const char *path) {
    L->f = fopen(path, "r");
    if (!L->f) return dk_fail(DK_ERR_USAGE, "%s: cannot open config file: %s", path, strerror(errno));
    /* inih's behaviour is set through library globals (this is its only
     * user): no multi-line values (an indented line is a key, not a silent
     * continuation), ';' and '#' start comments, lines up to
     * CONFIG_MAX_LINE on a growing heap buffer, stop at the first error. */
    static char comment_prefixes[] = ";#";
    ini_allow_multiline = false;
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = comment_prefixes;
    ini_allow_no_value = false;
    ini_stop_on_first_error = true;
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = CONFIG_MAX_LINE;
    L->file = path;
    L->at_line_start = true;
    int rc = ini_parse_stream(loader_read, L, loader_key, L);
    fclose(L->f);
    L->f = NULL;
    if (L->status) return L->status;
    if (rc == -2) return dk_fail(DK_ERR_RUNTIME, "%s: out of memory while parsing", path);
    if (rc != 0)
        return dk_fail(DK_ERR_USAGE, "%s:%d: syntax error: expected '[section]', 'key = value' or a comment", path,
                       rc > 0 ? rc : L->line);
    return DK_OK;
}

static dk_status loader_override(loader *L, const char *arg) {
    const char *eq = strchr(arg, '='), *dot = strchr(arg, '.');
    if (!eq || !dot || dot > eq)
        return dk_fail(DK_ERR_USAGE, "command line: override '%s' is not section.key=value", arg);
    char section[128], key[128], value[DK_CONFIG_STR + 2], why[256], hint[256];
    trim_into(arg, (size_t)(dot - arg), section, sizeof section);
    trim_into(dot + 1, (size_t)(eq - dot - 1), key, sizeof key);
    trim_into(eq + 1, strlen(eq + 1), value, sizeof value);
    if (!section[0] || !key[0])
        return dk_fail(DK_ERR_USAGE, "command line: override '%s' is not section.key=value", arg);
    if (!section_find(section)) {
        suggest_section(section, hint, sizeof hint);
        return dk_fail(DK_ERR_USAGE, "command line: unknown section [%s] in '%s'%s", section, arg, hint);
    }
    int i = key_index(section, key);
    if (i < 0) {
        suggest_key(section, key, hint, sizeof hint);
        return dk_fail(DK_ERR_USAGE, "command line: unknown key '%s' in [%s]%s", key, section, hint);
    }
    if (!value_parse(L->cfg, &config_keys[i], value, why, sizeof why))
        return dk_fail(DK_ERR_USAGE, "command line: [%s] %s = '%s': %s", section, key,
                       clip_value(value, hint, sizeof hint), why);
    L->set[i] = -1; /* a later override of the same key wins */
    return DK_OK;
}

/* ---- derived values and checks --------------------------------------------- */

static int model_key(const char *key) {
    int i = key_index("model", key);
    DK_ASSERT(i >= 0);
    return i;
}

/* The model_config the [model] shape keys describe; 0 in n_kv_heads and
 * head_dim means n_heads and hidden_size / n_heads. Messages name the keys. */
static dk_status model_from_keys(const dk_config *cfg, model_config *mc) {
    static const char *const required[] = {"vocab_size", "hidden_size", "intermediate_size", "n_layers", "n_heads"};
    for (int r = 0; r < 5; r++)
        if (*(const int *)key_cptr(cfg, &config_keys[model_key(required[r])]) <= 0)
            return dk_fail(DK_ERR_USAGE,
                           "[model] %s is not set: give the model's shape, or set [model] path to a Hugging Face "
                           "checkpoint",
                           required[r]);
    const int heads = cfg->model.n_heads, hidden = cfg->model.hidden_size;
    if (!cfg->model.head_dim && hidden % heads)
        return dk_fail(DK_ERR_USAGE,
                       "[model] head_dim is not set and hidden_size (%d) is not a multiple of n_heads (%d)",
                       hidden, heads);
    memset(mc, 0, sizeof *mc);
    mc->arch = cfg->model.arch;
    mc->vocab_size = cfg->model.vocab_size;
    mc->hidden_size = hidden;
    mc->intermediate_size = cfg->model.intermediate_size;
    mc->n_layers = cfg->model.n_layers;
    mc->n_heads = heads;
    mc->n_kv_heads = cfg->model.n_kv_heads ? cfg->model.n_kv_heads : heads;
    mc->head_dim = cfg->model.head_dim ? cfg->model.head_dim : hidden / heads;
    mc->max_position = cfg->model.max_position;
    mc->rope_theta = (float)cfg->model.rope_theta;
    mc->rms_eps = (float)cfg->model.rms_eps;
    mc->tie_embeddings = cfg->model.tie_embeddings;
    mc->qkv_bias = cfg->model.qkv_bias;
    mc->o_bias = cfg->model.o_bias;
    mc->qk_norm = cfg->model.qk_norm;
    mc->bos_token_id = cfg->model.bos_token_id;
    mc->eos_token_id = cfg->model.eos_token_id;
    dk_status s = model_config_validate(mc);
    return s ? dk_wrap(s, "[model] ") : DK_OK;
}

/* The bias and norm flags each family can express in a config.json: Qwen2 has
 * q/k/v bias only; Qwen3 and Llama have one attention_bias for q/k/v/o; only
 * Qwen3 has q/k norm. Flags the user did not set follow the arch. */
static void model_flags_derive(dk_config *cfg, const loader *L) {
    const bool set_q = L->set[model_key("qkv_bias")], set_o = L->set[model_key("o_bias")];
    const dk_arch arch = cfg->model.arch;
    bool att = set_q ? cfg->model.qkv_bias : set_o ? cfg->model.o_bias : false;
    if (!set_q) cfg->model.qkv_bias = arch == DK_ARCH_QWEN2 ? true : att;
    if (!set_o) cfg->model.o_bias = arch == DK_ARCH_QWEN2 ? false : att;
    if (!L->set[model_key("qk_norm")]) cfg->model.qk_norm = arch == DK_ARCH_QWEN3;
}

static dk_status model_flags_check(const dk_config *cfg, const loader *L) {
    const dk_arch arch = cfg->model.arch;
    const char *bad = NULL, *why = "";
    if (cfg->model.qk_norm != (arch == DK_ARCH_QWEN3))
        bad = "qk_norm", why = arch == DK_ARCH_QWEN3 ? "Qwen3 always normalises q and k" : "only Qwen3 has q/k norm";
    else if (arch == DK_ARCH_QWEN2 && !cfg->model.qkv_bias)
        bad = "qkv_bias", why = "Qwen2 always has q/k/v bias";
    else if (arch == DK_ARCH_QWEN2 && cfg->model.o_bias)
        bad = "o_bias", why = "Qwen2 has no output-projection bias";
    else if (arch != DK_ARCH_QWEN2 && cfg->model.qkv_bias != cfg->model.o_bias)
        bad = L && L->set[model_key("o_bias")] ? "o_bias" : "qkv_bias",
        why = "config.json's attention_bias sets qkv_bias and o_bias together";
    if (!bad) return DK_OK;
    char w[DK_CONFIG_STR + 32];
    int i = model_key(bad);
    return dk_fail(DK_ERR_USAGE, "%s: [model] %s = %s does not fit arch = %s (%s)", key_where(L, i, w, sizeof w), bad,
                   *(const bool *)key_cptr(cfg, &config_keys[i]) ? "true" : "false", model_arch_name(arch), why);
}

static dk_status config_check(const dk_config *cfg, const loader *L) {
    char w[DK_CONFIG_STR + 32], w2[DK_CONFIG_STR + 32];
    if (cfg->train.min_lr > cfg->train.lr)
        return dk_fail(DK_ERR_USAGE, "%s: [train] min_lr = %g exceeds [train] lr = %g",
                       key_where(L, key_index("train", "min_lr"), w, sizeof w), cfg->train.min_lr, cfg->train.lr);
    if (cfg->train.batch_size % cfg->train.grad_accum)
        return dk_fail(DK_ERR_USAGE, "%s: [train] grad_accum = %d does not divide [train] batch_size = %d",
                       key_where(L, key_index("train", "grad_accum"), w, sizeof w), cfg->train.grad_accum,
                       cfg->train.batch_size);
    if (cfg->train.micro_batch_tokens > 0 && cfg->train.grad_accum != 1)
        return dk_fail(DK_ERR_USAGE, "%s: [train] micro_batch_tokens = %d decides the micro-batches: leave grad_accum at 1",
                       key_where(L, key_index("train", "micro_batch_tokens"), w, sizeof w), cfg->train.micro_batch_tokens);
    if (cfg->train.micro_batch_tokens > 0 && cfg->train.micro_batch_tokens < cfg->data.max_length)
        return dk_fail(DK_ERR_USAGE, "%s: [train] micro_batch_tokens = %d is below [data] max_length = %d",
                       key_where(L, key_index("train", "micro_batch_tokens"), w, sizeof w),
                       cfg->train.micro_batch_tokens, cfg->data.max_length);
    if (cfg->rl.dual_clip != 0 && cfg->rl.dual_clip <= 1)
        return dk_fail(DK_ERR_USAGE, "%s: [rl] dual_clip = %g must be > 1 (or 0 to turn it off)",
                       key_where(L, key_index("rl", "dual_clip"), w, sizeof w), cfg->rl.dual_clip);
    if (cfg->model.path[0]) {
        /* The checkpoint's config.json defines the model; it is checked when read. */
        const int ip = model_key("path");
        for (int i = 0; L && i < config_n_keys; i++)
            if (i != ip && !strcmp(config_keys[i].section, "model") && L->set[i])
                return dk_fail(DK_ERR_USAGE,
                               "%s: [model] %s cannot be set together with [model] path (%s): the checkpoint's "
                               "config.json defines the model",
                               key_where(L, i, w, sizeof w), config_keys[i].key, key_where(L, ip, w2, sizeof w2));
        return DK_OK;
    }
    model_config mc;
    dk_status s = model_from_keys(cfg, &mc);
    if (s) return dk_wrap(s, "%s: ", L ? (L->file ? L->file : "command line") : "config");
    DK_TRY(model_flags_check(cfg, L));
    if (cfg->data.max_length > mc.max_position)
        return dk_fail(DK_ERR_USAGE, "%s: [data] max_length = %d exceeds [model] max_position = %d",
                       key_where(L, key_index("data", "max_length"), w, sizeof w), cfg->data.max_length,
                       mc.max_position);
    return DK_OK;
}

/* Fills the values that default to other keys, so the snapshot states them. */
static dk_status config_resolve(dk_config *cfg, loader *L) {
    if (!cfg->run.dir[0]) {
        /* runs/<stem>: the file name without its directory and extension */
        const char *base = L->file ? strrchr(L->file, '/') : NULL;
        base = base ? base + 1 : L->file ? L->file : "default";
        const char *dot = strrchr(base, '.');
        size_t len = dot && dot > base ? (size_t)(dot - base) : strlen(base);
        snprintf(cfg->run.dir, DK_CONFIG_STR, "runs/%.*s", (int)len, base);
    }
    if (cfg->model.path[0]) {
        /* A checkpoint given on the command line replaces the file's model:
         * the file's shape keys are dropped. Within one source, a path and a
         * shape key contradict each other (config_check reports it). */
        const int ip = model_key("path");
        char why[256];
        for (int i = 0; i < config_n_keys && L->set[ip] < 0; i++)
            if (i != ip && !strcmp(config_keys[i].section, "model") && L->set[i] > 0) {
                value_parse(cfg, &config_keys[i], config_keys[i].def, why, sizeof why);
                L->set[i] = 0;
            }
        if (!cfg->tokenizer.path[0] &&
            snprintf(cfg->tokenizer.path, DK_CONFIG_STR, "%s/tokenizer.json", cfg->model.path) >= DK_CONFIG_STR)
            return dk_fail(DK_ERR_USAGE, "[model] path is too long to derive [tokenizer] path from it");
        return DK_OK;
    }
    model_config mc;
    if (model_from_keys(cfg, &mc) == DK_OK) { /* else config_check reports it */
        cfg->model.n_kv_heads = mc.n_kv_heads;
        cfg->model.head_dim = mc.head_dim;
    }
    model_flags_derive(cfg, L);
    return DK_OK;
}

/* ---- public API ------------------------------------------------------------------ */

void config_defaults(dk_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    char why[256];
    for (int i = 0; i < config_n_keys; i++)
        if (!value_parse(cfg, &config_keys[i], config_keys[i].def, why, sizeof why))
            DK_ABORT("config_keys.c: default of [%s] %s = '%s': %s", config_keys[i].section, config_keys[i].key,
                     config_keys[i].def, why);
}

dk_status config_load(dk_config *cfg, const char *path, int n_overrides, char **overrides) {
    config_defaults(cfg);
    loader L = {.cfg = cfg, .set = dk_calloc((size_t)config_n_keys, sizeof(int))};
    dk_status s = path ? loader_file(&L, path) : DK_OK;
    for (int i = 0; i < n_overrides && !s; i++) s = loader_override(&L, overrides[i]);
    if (!s) s = config_resolve(cfg, &L);
    if (!s) s = config_check(cfg, &L);
    free(L.set);
    return s;
}

dk_status config_validate(const dk_config *cfg) { return config_check(cfg, NULL); }

void config_print(const dk_config *cfg, FILE *f) {
    char buf[DK_CONFIG_STR + 8];
    fprintf(f, "# drkernel run configuration, resolved: every key with its value, defaults included.\n"
               "# Keys are described in configs/README.md.\n");
    for (int s = 0; s < config_n_sections; s++) {
        const char *sec = config_sections[s].name;
        fprintf(f, "\n[%s]\n", sec);
        bool from_checkpoint = !strcmp(sec, "model") && cfg->model.path[0];
        for (int i = 0; i < config_n_keys; i++) {
            const config_key *k = &config_keys[i];
            if (strcmp(k->section, sec)) continue;
            if (from_checkpoint && strcmp(k->key, "path")) continue;
            const char *v = value_format(cfg, k, buf, sizeof buf);
            fprintf(f, "%s =%s%s\n", k->key, v[0] ? " " : "", v);
        }
        if (from_checkpoint) fprintf(f, "# the model's shape is the one in %s/config.json\n", cfg->model.path);
    }
}

dk_status config_save(const dk_config *cfg, const char *path) {
    for (int i = 0; i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        if (k->type == CK_STRING && !string_savable(key_cptr(cfg, k)))
            return dk_fail(DK_ERR_USAGE, "%s: cannot save [%s] %s = '%s': a newline, or ';' or '#' after a space, "
                           "would be read back as a comment", path, k->section, k->key, (const char *)key_cptr(cfg, k));
    }
    FILE *f = fopen(path, "w");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    config_print(cfg, f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno));
    return DK_OK;
}

bool config_equal(const dk_config *a, const dk_config *b) {
    for (int i = 0; i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        const void *pa = key_cptr(a, k), *pb = key_cptr(b, k);
        bool same = k->type == CK_FLOAT    ? *(const double *)pa == *(const double *)pb
                    : k->type == CK_BOOL   ? *(const bool *)pa == *(const bool *)pb
                    : k->type == CK_STRING ? !strcmp(pa, pb)
                                           : *(const int *)pa == *(const int *)pb;
        if (!same) return false;
    }
    return true;
}

dk_status config_model(const dk_config *cfg, model_config *out) {
    if (cfg->model.path[0]) return model_config_from_hf(cfg->model.path, out);
    return model_from_keys(cfg, out);
}

/* Markdown table cells: '|' would end the cell. */
static void md_cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static const char *const source_names[] = {[CS_OURS] = "", [CS_BRIEF] = "brief", [CS_WRITEUP] = "write-up",
                                            [CS_SCRIPT] = "script"};

/* The section on where the recipe's defaults come from, and the public
 * script's values where they differ. */
static void describe_sources(FILE *f) {
    fprintf(f,
            "\n## Where the recipe's defaults come from\n"
            "\n"
            "Defaults marked in the tables above follow the Dr. Kernel recipe; the mark says which\n"
            "source each one follows:\n"
            "\n"
            "- **brief**: the product brief, which asks for PPO clipping at 0.2 on both sides (no dual clip).\n"
            "- **write-up**: the recipe write-up (TRLOO with gamma 1 over 3 turns, the profiling reward\n"
            "  with alpha 0.7, a cosine schedule, and hard PRS that drops correct turns whose kernel\n"
            "  coverage is under 0.3).\n"
            "- **script**: the public training script of the 14B model.\n"
            "\n"
            "The other defaults are this project's own choices.\n"
            "\n"
            "The public script differs from these defaults on the keys below. `configs/drkernel14b.ini`\n"
            "and `configs/drkernel8b.ini` carry its values as a commented block: uncomment it to\n"
            "reproduce the public training run of the 14B model; keep the defaults to train as the\n"
            "product brief and the write-up describe.\n"
            "\n"
            "| key | default | public script |\n| --- | --- | --- |\n");
    for (int i = 0; i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        if (k->script) fprintf(f, "| `%s.%s` | `%s` | `%s` |\n", k->section, k->key, k->def, k->script);
    }
}

void config_describe(FILE *f) {
    fprintf(f,
            "# Run configuration\n"
            "\n"
            "<!-- Generated from trainer/config_keys.c by config_describe(); do not edit by hand.\n"
            "     After changing a key, run: build/tests/unit_test_config_readme --write -->\n"
            "\n"
            "A run is one ini file plus optional `section.key=value` overrides, applied after the file:\n"
            "\n"
            "    ./train configs/tiny.ini train.lr=1e-3 run.steps=20\n"
            "\n"
            "- Every key is optional and has the default listed below. `#` and `;` start comments, also\n"
            "  after a value (preceded by a space). Strings may be wrapped in double quotes.\n"
            "- Bools are `true`/`false`, `yes`/`no` or `1`/`0`. Enums take one of the listed values.\n"
            "- An unknown section or key, a key set twice, a malformed or out-of-range value, or keys\n"
            "  that contradict each other stop the run with `FILE:LINE:` (or `command line:`) and the\n"
            "  key's name; misspelled names get a suggestion.\n"
            "- The resolved configuration, defaults included, is saved as `<run.dir>/config.ini`;\n"
            "  `./train <run.dir>/config.ini` runs the same configuration again.\n"
            "- The model comes either from `[model] path`, a Hugging Face checkpoint directory whose\n"
            "  `config.json` defines the shape, or from the other `[model]` keys with random initial\n"
            "  weights. A file or a command line that sets both is an error; a `model.path=DIR`\n"
            "  override replaces the model a file describes (its shape keys are then ignored).\n"
            "- `./train --plan CONFIG [overrides]` prints the per-GPU memory plan of the run at\n"
            "  `dist.world` ranks and exits 0 when it fits, 1 when not (README.md, \"Memory plan\").\n");
    for (int s = 0; s < config_n_sections; s++) {
        const char *sec = config_sections[s].name;
        fprintf(f, "\n## [%s]: %s\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n", sec,
                config_sections[s].doc);
        for (int i = 0; i < config_n_keys; i++) {
            const config_key *k = &config_keys[i];
            if (strcmp(k->section, sec)) continue;
            char type[256];
            static const char *const names[] = {"int", "float", "bool", "string", ""};
            if (k->type == CK_ENUM) enum_list(k, "`", type, sizeof type);
            else if (k->range != CR_ANY) snprintf(type, sizeof type, "%s, %s", names[k->type], range_text(k->range));
            else snprintf(type, sizeof type, "%s", names[k->type]);
            fprintf(f, "| `%s` | ", k->key);
            md_cell(f, type);
            if (k->flags & CF_ARCH_DEFAULT) fprintf(f, " | by `arch` | ");
            else if (!k->def[0]) fprintf(f, " | (empty) | ");
            else if (k->source != CS_OURS) fprintf(f, " | `%s` (%s) | ", k->def, source_names[k->source]);
            else fprintf(f, " | `%s` | ", k->def);
            md_cell(f, k->doc);
            fprintf(f, " |\n");
        }
    }
    describe_sources(f);
}
