/* error.h: how host code reports failure. A function that can fail returns a
 * dk_status (0 = ok) and leaves a message naming the culprit (file, key,
 * tensor, line) in a thread-local buffer; only the command-line front end
 * decides to print it and exit. Exit codes follow the CLI contract: 2 for
 * usage and configuration errors, 1 for runtime errors. */
#ifndef DK_ERROR_H
#define DK_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DK_OK = 0,
    DK_ERR_RUNTIME = 1, /* bad data file, I/O failure, numerical trouble */
    DK_ERR_USAGE = 2,   /* bad command line, config key or value */
} dk_status;

/* Sets the message and returns code, so callers write
 *   return dk_fail(DK_ERR_USAGE, "%s:%d: unknown key '%s'", file, line, key); */
dk_status dk_fail(dk_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context ("loading model: ") to the current message; returns code. */
dk_status dk_wrap(dk_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *dk_error(void);
void dk_error_clear(void);

/* Aborts with file:line for programming errors and library failures that
 * cannot be reported upward (allocation failure, impossible state). */
void dk_abort_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define DK_ABORT(...) dk_abort_at(__FILE__, __LINE__, __VA_ARGS__)
#define DK_ASSERT(cond)                                                                   \
    do {                                                                                  \
        if (!(cond)) dk_abort_at(__FILE__, __LINE__, "assertion failed: %s", #cond);      \
    } while (0)
/* Propagates a failing status unchanged. */
#define DK_TRY(expr)                                                                      \
    do {                                                                                  \
        dk_status dk_try_s_ = (expr);                                                     \
        if (dk_try_s_ != DK_OK) return dk_try_s_;                                         \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
