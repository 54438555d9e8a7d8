/* check.h: the assertion of the C tests. CHECK(cond, fmt, ...) counts every
 * check and, when cond is false, counts a failure and prints file:line, the
 * condition and the message; a test ends with `return failures != 0` (or
 * check_report()). One definition here instead of one per test file. */
#ifndef DK_TESTS_CHECK_H
#define DK_TESTS_CHECK_H

#include <stdio.h>

static int failures, checks;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        checks++;                                                              \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* Prints "N passed, M failed" and returns the exit code. */
static inline int check_report(void) {
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}

#endif
