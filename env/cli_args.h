/* cli_args.h: the flag reader of the kernelgym program: "--flag value" and
 * "--flag=value", numbers checked against a range, and usage errors that name
 * the flag ("--timeout: expected a number, got 'x'"; the program puts the
 * subcommand in front). Errors are returned as DK_ERR_USAGE with the message
 * set. */
#ifndef KG_CLI_ARGS_H
#define KG_CLI_ARGS_H

#include "common/error.h"

typedef struct {
    int argc;
    char **argv;
    int i;           /* the argument being read */
    const char *cmd; /* "kernelgym eval" */
} kg_args;

/* 1 when argv[i] is --name (its value in *value, i advanced past it), 0 when
 * it is another flag; a missing value is a usage error. */
int kg_arg_value(kg_args *a, const char *name, const char **value, dk_status *st);
/* 1 when argv[i] is the boolean flag --name (no value). */
int kg_arg_switch(kg_args *a, const char *name);

dk_status kg_arg_double(const kg_args *a, const char *name, const char *s, double lo, double hi, double *out);
dk_status kg_arg_int(const kg_args *a, const char *name, const char *s, long lo, long hi, int *out);
/* "0,1,3" or "0-3" or a mix ("0-1,4"); at most max entries. */
dk_status kg_arg_int_list(const kg_args *a, const char *name, const char *s, int *out, int max, int *n);
/* One of the words in choices (NULL-terminated). */
dk_status kg_arg_choice(const kg_args *a, const char *name, const char *s, const char *const *choices);
/* One of the n names of an enum's name table; *out gets its index. */
dk_status kg_arg_enum(const kg_args *a, const char *name, const char *s, const char *const *names, int n, int *out);

#endif
