/* error.c: the thread-local error message behind dk_fail / dk_error. */
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char dk_msg[4096];

dk_status dk_fail(dk_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dk_msg, sizeof dk_msg, fmt, ap);
    va_end(ap);
    return code;
}

dk_status dk_wrap(dk_status code, const char *fmt, ...) {
    char prefix[1024], old[sizeof dk_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, dk_msg, sizeof old);
    size_t np = strlen(prefix);
    if (np >= sizeof dk_msg) np = sizeof dk_msg - 1;
    memcpy(dk_msg, prefix, np);
    snprintf(dk_msg + np, sizeof dk_msg - np, "%.*s", (int)(sizeof dk_msg - np - 1), old);
    return code;
}

const char *dk_error(void) { return dk_msg; }
void dk_error_clear(void) { dk_msg[0] = '\0'; }

void dk_abort_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "fatal: %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
