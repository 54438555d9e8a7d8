/* feedback_hint.c: error classes and their hints, mismatch location and the
 * reference's bottleneck, and the token budget of feedback_hint.h. */
#include "env/feedback_hint.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/util.h"

static void append(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(char **out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t old = *out ? strlen(*out) : 0;
    *out = dk_realloc(*out, old + (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(*out + old, (size_t)n + 1, fmt, ap);
    va_end(ap);
}

/* Case-insensitive substring search (error texts mix "CUDA error" and
 * "cuda error", "OutOfResources" and "out of resources"). */
static int contains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

static int contains_any(const char *hay, const char *const *needles) {
    for (int i = 0; needles[i]; i++)
        if (contains(hay, needles[i])) return 1;
    return 0;
}

/* The texts CUDA, PyTorch and Triton print for each class. */
static const char *const illegal_address[] = {
    "illegal memory access", "illegal address", "misaligned address", "out of bounds",
    "index out of range", "device-side assert", NULL};
static const char *const out_of_resources[] = {
    "outofresources", "out of resources", "shared memory", "too many resources requested",
    "registers", "launch resources", NULL};
static const char *const out_of_memory[] = {"out of memory", "out of host memory", "MemoryError",
                                            "can't allocate memory", NULL};
/* The harness says "output has shape (3,), expected (2,)" (env/harness/compare.py). */
static const char *const shape[] = {"shape mismatch", "output shape", "dtype mismatch", "output dtype",
                                    "has shape", "has dtype", NULL};
static const char *const nan_out[] = {"holds NaN", NULL};

kg_hint_class kg_hint_classify(const kg_result *r) {
    const char *err = r->error ? r->error : "";
    /* Resource and address failures are named by the text whatever status
     * carried them (compile error, crash or error). */
    if (contains_any(err, illegal_address)) return KG_HINT_ILLEGAL_ADDRESS;
    if (contains_any(err, out_of_resources)) return KG_HINT_OUT_OF_RESOURCES;
    if (contains_any(err, out_of_memory)) return KG_HINT_OUT_OF_MEMORY;
    if (r->status == KG_STATUS_TIMEOUT) return KG_HINT_TIMEOUT;
    if (r->status == KG_STATUS_INCORRECT) {
        if (contains_any(err, shape)) return KG_HINT_SHAPE;
        return contains_any(err, nan_out) ? KG_HINT_NAN : KG_HINT_MISMATCH;
    }
    return KG_HINT_NONE;
}

const char *kg_hint_name(kg_hint_class c) {
    switch (c) {
    case KG_HINT_ILLEGAL_ADDRESS: return "illegal_address";
    case KG_HINT_OUT_OF_RESOURCES: return "out_of_resources";
    case KG_HINT_OUT_OF_MEMORY: return "out_of_memory";
    case KG_HINT_MISMATCH: return "mismatch";
    case KG_HINT_SHAPE: return "shape";
    case KG_HINT_NAN: return "nan";
    case KG_HINT_TIMEOUT: return "timeout";
    default: return "none";
    }
}

const char *kg_hint_text(kg_hint_class c) {
    switch (c) {
    case KG_HINT_ILLEGAL_ADDRESS:
        return "Hint: a kernel read or wrote outside its tensor. Check that every tl.load and tl.store has a "
               "mask covering the last partial block (offs < n), that offsets use the right strides, and that "
               "the grid does not launch more programs than the data needs.";
    case KG_HINT_OUT_OF_RESOURCES:
        return "Hint: a kernel asked for more shared memory or registers than the GPU has. Use smaller BLOCK "
               "sizes, fewer pipeline stages (num_stages) or fewer warps.";
    case KG_HINT_OUT_OF_MEMORY:
        return "Hint: an allocation failed. Allocate only the output and small scratch buffers, reuse them, and "
               "do not materialise large intermediates (fuse the steps into one kernel instead).";
    case KG_HINT_NAN:
        return "Hint: the output holds NaN where the reference does not. Give masked loads a neutral other= (0 for "
               "sums, -inf only where a max follows), guard divisions and logs, and write every output element "
               "(torch.empty is uninitialised).";
    case KG_HINT_MISMATCH:
        return "Hint: the output is wrong. Compare against the reference step by step: accumulate in fp32, "
               "check the reduction axis, the masked-out values (other=0 for sums, -inf for max) and any "
               "broadcasts.";
    case KG_HINT_SHAPE:
        return "Hint: the output's shape or dtype differs from the reference's. Allocate the output with the "
               "reference's shape and dtype.";
    case KG_HINT_TIMEOUT:
        return "Hint: the kernel did not finish. Check loop bounds and that the grid is not far larger than "
               "needed.";
    default: return "";
    }
}

static const cJSON *field_of(const kg_result *r, const char *key, cJSON **root) {
    *root = r->json && r->json[0] ? cJSON_Parse(r->json) : NULL;
    return *root ? cJSON_GetObjectItemCaseSensitive(*root, key) : NULL;
}

static double num_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The values at the first bad element, as the harness wrote them: a number,
 * or a string for inf and NaN. */
static void append_value(char **out, const char *label, const cJSON *v) {
    if (cJSON_IsNumber(v)) append(out, "%s %.6g", label, v->valuedouble);
    else if (cJSON_IsString(v)) append(out, "%s %s", label, v->valuestring);
}

void kg_hint_mismatch(const kg_result *r, char **out) {
    cJSON *root;
    const cJSON *m = field_of(r, "mismatch", &root);
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(root);
        return;
    }
    double n_bad = num_of(m, "n_bad"), numel = num_of(m, "numel");
    double diff = num_of(m, "max_abs_diff"), atol = num_of(m, "atol"), rtol = num_of(m, "rtol");
    double ratio = num_of(m, "max_ratio"), budget = num_of(m, "budget_ratio"), k = num_of(m, "k");
    double trial = num_of(m, "trial");
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(m, "first_index");
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(m, "pattern");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(m, "mode");
    const char *outside = isfinite(budget) ? "the tolerance and the fp64 error budget" : "the tolerance";
    append(out, "Mismatch");
    if (cJSON_IsString(mode) && isfinite(trial)) append(out, " (%s mode, trial %.0f)", mode->valuestring, trial);
    append(out, ":");
    if (isfinite(n_bad) && isfinite(numel) && numel > 0)
        append(out, " %.0f of %.0f elements (%.3g%%) are outside %s", n_bad, numel, 100.0 * n_bad / numel, outside);
    else if (isfinite(n_bad)) append(out, " %.0f elements are outside %s", n_bad, outside);
    if (cJSON_IsArray(idx) && cJSON_GetArraySize(idx) > 0) {
        append(out, "; the first at index [");
        int n = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, idx) append(out, "%s%.0f", n++ ? ", " : "", cJSON_IsNumber(e) ? e->valuedouble : 0.0);
        append(out, "]");
        const cJSON *yours = cJSON_GetObjectItemCaseSensitive(m, "candidate");
        if (cJSON_IsNumber(yours) || cJSON_IsString(yours)) {
            append_value(out, ":", yours);
            append_value(out, " yours, reference", cJSON_GetObjectItemCaseSensitive(m, "reference"));
            append_value(out, ", exact (fp64)", cJSON_GetObjectItemCaseSensitive(m, "fp64"));
        }
    }
    if (cJSON_IsString(pattern) && pattern->valuestring[0]) append(out, "; pattern: %s", pattern->valuestring);
    append(out, ".");
    if (isfinite(diff)) {
        append(out, " Largest error %.3g", diff);
        if (isfinite(atol) && isfinite(rtol)) append(out, " against atol %.3g, rtol %.3g", atol, rtol);
        /* Against fp64 a precision problem (bf16 or fp16 arithmetic, a
         * sloppier summation) lands within a few thousand budgets; a logic
         * error (a wrong index, a missing term) far beyond. Without fp64,
         * within 10x the tolerance. */
        int precision = isfinite(budget) ? budget < 1e4 : (isfinite(ratio) && ratio < 10);
        if (isfinite(ratio)) append(out, " (%.3gx the tolerance", ratio);
        if (isfinite(budget)) {
            append(out, "%s%.3gx the fp64 error budget", isfinite(ratio) ? "; " : " (", budget);
            if (isfinite(k)) append(out, ", %g times the reference's own error plus the tolerance", k);
        }
        if (isfinite(ratio) || isfinite(budget))
            append(out, "%s)", precision ? ": a precision problem, keep fp32 inputs and accumulate in fp32"
                                         : ": a logic error");
        append(out, ".");
    }
    append(out, "\n");
    cJSON_Delete(root);
}

typedef struct {
    const char *name;
    double share;
} op_share;

static int by_share_desc(const void *a, const void *b) {
    const op_share *x = a, *y = b;
    if (x->share != y->share) return x->share < y->share ? 1 : -1;
    return strcmp(x->name, y->name);
}

static void bottleneck_of(const cJSON *list, int top_n, char **out) {
    if (!cJSON_IsArray(list) || top_n <= 0) return;
    int n = cJSON_GetArraySize(list), k = 0;
    if (n == 0) return;
    op_share *ops = dk_calloc((size_t)n, sizeof *ops);
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        double s = num_of(e, "share");
        if (!cJSON_IsString(nm) || !isfinite(s) || s < 0) continue; /* a malformed entry is skipped */
        ops[k].name = nm->valuestring;
        ops[k++].share = s;
    }
    /* A stable order for equal shares: qsort is not stable, so the name breaks ties. */
    qsort(ops, (size_t)k, sizeof *ops, by_share_desc);
    if (k > 0) {
        append(out, "Reference time by op:");
        int shown = k < top_n ? k : top_n;
        for (int i = 0; i < shown; i++) append(out, "%s %s %.0f%%", i ? "," : "", ops[i].name, 100.0 * ops[i].share);
        if (k > shown) append(out, " (%d more)", k - shown);
        append(out, ". Target the largest first.\n");
    }
    free(ops);
}

void kg_hint_bottleneck_json(const char *reference_profile_json, int top_n, char **out) {
    cJSON *list = reference_profile_json ? cJSON_Parse(reference_profile_json) : NULL;
    bottleneck_of(list, top_n, out);
    cJSON_Delete(list);
}

void kg_hint_bottleneck(const kg_result *r, int top_n, char **out) {
    cJSON *root;
    const cJSON *list = field_of(r, "reference_profile", &root);
    bottleneck_of(list, top_n, out);
    cJSON_Delete(root);
}

size_t kg_feedback_tokens(const char *s) { return (strlen(s) + 3) / 4; }

char *kg_feedback_fit(const char *s, int max_tokens) {
    if (max_tokens <= 0 || kg_feedback_tokens(s) <= (size_t)max_tokens) return dk_strdup(s);
    size_t n = strlen(s), limit = (size_t)max_tokens * 4;
    /* The marker's length depends on the count; 48 bytes cover it. */
    size_t keep = limit > 48 ? limit - 48 : 0;
    /* Prefer a line boundary in the last quarter of what is kept. */
    size_t cut = keep;
    for (size_t i = keep; i > keep - keep / 4 && i > 0; i--)
        if (s[i - 1] == '\n') {
            cut = i;
            break;
        }
    while (cut > 0 && (s[cut] & 0xC0) == 0x80) cut--;
    char marker[64];
    snprintf(marker, sizeof marker, "%s[feedback truncated: %zu bytes omitted]", cut && s[cut - 1] != '\n' ? "\n" : "",
             n - cut);
    if (cut + strlen(marker) > limit) { /* a budget too small for the marker keeps only what fits */
        cut = limit;
        while (cut > 0 && (s[cut] & 0xC0) == 0x80) cut--;
        marker[0] = '\0';
    }
    char *o = dk_malloc(cut + strlen(marker) + 1);
    memcpy(o, s, cut);
    strcpy(o + cut, marker);
    return o;
}
