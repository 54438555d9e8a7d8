/* cli_args.c: see cli_args.h. */
#include "env/cli_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kg_arg_value(kg_args *a, const char *name, const char **value, dk_status *st) {
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0;
    if (a->i + 1 >= a->argc) {
        *st = dk_fail(DK_ERR_USAGE, "%s needs a value", name);
        return -1;
    }
    *value = a->argv[++a->i];
    return 1;
}

int kg_arg_switch(kg_args *a, const char *name) { return strcmp(a->argv[a->i], name) == 0; }

dk_status kg_arg_double(const kg_args *a, const char *name, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return dk_fail(DK_ERR_USAGE, "%s: expected a number, got '%s'", name, s);
    if (v < lo || v > hi) return dk_fail(DK_ERR_USAGE, "%s: %g is outside [%g, %g]", name, v, lo, hi);
    *out = v;
    return DK_OK;
}

dk_status kg_arg_int(const kg_args *a, const char *name, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0)
        return dk_fail(DK_ERR_USAGE, "%s: expected an integer, got '%s'", name, s);
    if (v < lo || v > hi) return dk_fail(DK_ERR_USAGE, "%s: %ld is outside [%ld, %ld]", name, v, lo, hi);
    *out = (int)v;
    return DK_OK;
}

dk_status kg_arg_int_list(const kg_args *a, const char *name, const char *s, int *out, int max, int *n) {
    *n = 0;
    const char *p = s;
    if (!*p) return dk_fail(DK_ERR_USAGE, "%s: empty list", name);
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p)) return dk_fail(DK_ERR_USAGE, "%s: bad list '%s' (expected e.g. 0,1 or 0-3)", name, s);
        long lo = strtol(p, &end, 10), hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p)) return dk_fail(DK_ERR_USAGE, "%s: bad range in '%s'", name, s);
            hi = strtol(p, &end, 10);
            p = end;
        }
        if (hi < lo || hi > 4095) return dk_fail(DK_ERR_USAGE, "%s: bad range in '%s'", name, s);
        for (long v = lo; v <= hi; v++) {
            if (*n >= max) return dk_fail(DK_ERR_USAGE, "%s: more than %d entries", name, max);
            for (int k = 0; k < *n; k++)
                if (out[k] == v) return dk_fail(DK_ERR_USAGE, "%s: %ld is listed twice", name, v);
            out[(*n)++] = (int)v;
        }
        if (*p == ',') {
            p++;
            if (!*p) return dk_fail(DK_ERR_USAGE, "%s: trailing ',' in '%s'", name, s);
        } else if (*p) {
            return dk_fail(DK_ERR_USAGE, "%s: bad list '%s' (expected e.g. 0,1 or 0-3)", name, s);
        }
    }
    return DK_OK;
}

dk_status kg_arg_enum(const kg_args *a, const char *name, const char *s, const char *const *names, int n, int *out) {
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return DK_OK;
        }
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", names[i]);
    }
    return dk_fail(DK_ERR_USAGE, "%s: expected one of %s, got '%s'", name, list, s);
}

dk_status kg_arg_choice(const kg_args *a, const char *name, const char *s, const char *const *choices) {
    int n = 0, which;
    while (choices[n]) n++;
    return kg_arg_enum(a, name, s, choices, n, &which);
}
