/* expect_abort.h: runs a piece of code that must abort (a precondition the
 * library enforces with DK_ABORT) in a forked child with its stderr
 * captured, and checks that it died of SIGABRT saying `want`. For the C
 * tests of programming errors that end the process by design. */
#ifndef DK_TESTS_EXPECT_ABORT_H
#define DK_TESTS_EXPECT_ABORT_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"

/* Calls fn(arg) in a child; true when the child was ended by SIGABRT and
 * its stderr contains want. Prints "what: ok|FAIL  <stderr>". */
static bool expect_abort(const char *what, void (*fn)(void *), void *arg, const char *want) {
    int fds[2];
    if (pipe(fds) != 0) DK_ABORT("pipe failed");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) DK_ABORT("fork failed");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    char msg[1024] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, want) != NULL;
    printf("%s: %s  %s", what, ok ? "ok" : "FAIL", msg);
    if (!strchr(msg, '\n')) putchar('\n');
    return ok;
}

#endif
