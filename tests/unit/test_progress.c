/* test_progress.c: the progress bar of trainer/progress.c. progress_format
 * against hand-computed lines (bar fill, floor percent, rate per second and
 * seconds per item, ETA = remaining / rate, h:mm:ss, zero total, done past
 * total, truncation); the plain output into a file (lines at 0/25/50/75/100%
 * only, several marks crossed at once, an early end, no \r or escapes); and
 * the terminal output through a pseudo-terminal (\r redraws, rate limit,
 * lines cut to the terminal width). */
#define _XOPEN_SOURCE 700 /* posix_openpt */
#define _DEFAULT_SOURCE /* cfmakeraw */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/progress.h"
#include "tests/check.h"

static void expect_line(const char *label, long done, long total, double elapsed, const char *extra, int bar,
                        const char *want) {
    char buf[256];
    size_t n = progress_format(buf, sizeof buf, label, done, total, elapsed, extra, bar);
    CHECK(!strcmp(buf, want) && n == strlen(want), "format(%ld/%ld, %.1fs)\n  got  '%s'\n  want '%s'", done, total,
          elapsed, buf, want);
}

static void test_format(void) {
    /* 16/64 in 10 s: 1.6/s, 48 left -> 30 s; 24 * 0.25 = 6 '#'. */
    expect_line("rollout", 16, 64, 10.0, "ok 12 | fail 3", 24,
                "rollout [######------------------] 16/64  25% 0:10 1.6/s ETA 0:30 ok 12 | fail 3");
    /* 3/10 in 45 s: 15 s per item, 7 left -> 105 s = 1:45. */
    expect_line("gym", 3, 10, 45.0, NULL, 10, "gym [###-------] 3/10  30% 0:45 15.0s/it ETA 1:45");
    /* 1/100 in 100 s: 99 left * 100 s = 9900 s = 2:45:00; elapsed 1:40. */
    expect_line("eval", 1, 100, 100.0, "", 0, "eval 1/100   1% 1:40 100.0s/it ETA 2:45:00");
    /* 2/3: 66% (floor), 16 of 24 cells; 4 s elapsed, 0.5/s -> 2 s left. */
    expect_line("x", 2, 3, 4.0, NULL, 24, "x [################--------] 2/3  66% 0:04 2.0s/it ETA 0:02");
    /* 29/100: 29% (29 / 100.0 * 100 is 28.999...); 24 * 0.29 = 6.96 -> 6 cells. */
    expect_line("p", 29, 100, 29.0, NULL, 24, "p [######------------------] 29/100  29% 0:29 1.0/s ETA 1:11");
    /* A bar wider than the formatter's buffer is capped, not overrun. */
    char wide[512];
    progress_format(wide, sizeof wide, "w", 1, 2, 1.0, NULL, 10000);
    CHECK(strlen(wide) > 250 && strlen(wide) < 300 && strstr(wide, "] 1/2  50%"), "capped bar: '%s'", wide);
    /* Nothing done yet: no rate, no ETA. */
    expect_line("gym", 0, 8, 5.0, NULL, 10, "gym [----------] 0/8   0% 0:05 --/s ETA --:--");
    /* Zero total: nothing to do, 100% with a full bar. */
    expect_line("eval", 0, 0, 0.0, NULL, 10, "eval [##########] 0/0 100% 0:00 --/s ETA 0:00");
    expect_line("eval", 0, -3, 0.0, NULL, 0, "eval 0/0 100% 0:00 --/s ETA 0:00");
    /* Finished, and past the total (clamped for bar, percent, rate and ETA). */
    expect_line("r", 10, 10, 4.0, "done", 4, "r [####] 10/10 100% 0:04 2.5/s ETA 0:00 done");
    expect_line("r", 12, 10, 2.0, NULL, 4, "r [####] 12/10 100% 0:02 5.0/s ETA 0:00");
    /* Rounding of durations: 59.6 s -> 1:00, 3599.5 s -> 1:00:00 (h:mm:ss from an hour up). */
    expect_line("t", 5, 10, 59.6, NULL, 0, "t 5/10  50% 1:00 11.9s/it ETA 1:00");
    expect_line("t", 1, 2, 3599.5, NULL, 0, "t 1/2  50% 1:00:00 3599.5s/it ETA 1:00:00");

    /* A short buffer cuts the line and reports what it kept. */
    char buf[12];
    size_t n = progress_format(buf, sizeof buf, "rollout", 16, 64, 10.0, "ok", 24);
    CHECK(n == 11 && !strcmp(buf, "rollout [##"), "truncated: %zu '%s'", n, buf);
    CHECK(progress_format(buf, 1, "rollout", 1, 2, 1.0, NULL, 0) == 0 && buf[0] == 0, "n = 1 gives an empty line");
}

/* Reads a whole stream back from the start. */
static char *slurp(FILE *f) {
    fflush(f);
    long len = ftell(f);
    char *s = dk_malloc((size_t)len + 1);
    rewind(f);
    size_t got = fread(s, 1, (size_t)len, f);
    s[got] = 0;
    return s;
}

/* Checks that the plain output has exactly the lines whose "done/total  pct%"
 * parts are listed, with the label first and no terminal control bytes. */
static void expect_plain(const char *out, const char *label, const char **want, int n_want) {
    CHECK(!strchr(out, '\r') && !strchr(out, '\033'), "plain output holds \\r or an escape:\n%s", out);
    int n = 0;
    for (const char *l = out; *l; n++) {
        const char *e = strchr(l, '\n');
        CHECK(e != NULL, "plain output does not end with a newline: '%s'", l);
        if (!e) break;
        if (n < n_want) {
            char head[128];
            snprintf(head, sizeof head, "%s %s ", label, want[n]);
            CHECK(!strncmp(l, head, strlen(head)), "line %d: '%.*s' should start with '%s'", n, (int)(e - l), l, head);
        }
        l = e + 1;
    }
    CHECK(n == n_want, "%d plain lines, expected %d:\n%s", n, n_want, out);
}

static void test_plain(void) {
    progress p;
    FILE *f = tmpfile();
    /* Every item reported: lines at 0, 25, 50, 75 and 100%, and no repeat from progress_end. */
    progress_begin(&p, "rollout", 64, f);
    for (long i = 1; i <= 64; i++) {
        char extra[32];
        snprintf(extra, sizeof extra, "ok %ld | fail 0", i);
        progress_update(&p, i, extra);
    }
    progress_end(&p);
    progress_update(&p, 99, NULL); /* after the end: ignored */
    char *out = slurp(f);
    const char *w1[] = {"0/64   0%", "16/64  25%", "32/64  50%", "48/64  75%", "64/64 100%"};
    expect_plain(out, "rollout", w1, 5);
    CHECK(strstr(out, "ETA 0:00 ok 64 | fail 0\n") != NULL, "last line carries the extra text:\n%s", out);
    free(out);
    fclose(f);

    /* Jumps: 0 -> 2 (20%, no line) -> 6 (60%: 25 and 50 crossed, one line) -> 9 (90%) -> end at 9. */
    f = tmpfile();
    progress_begin(&p, "gym", 10, f);
    progress_update(&p, 2, NULL);
    progress_update(&p, 6, "ok 5");
    progress_update(&p, 7, NULL);
    progress_update(&p, 9, "ok 8");
    progress_end(&p);
    out = slurp(f);
    const char *w2[] = {"0/10   0%", "6/10  60%", "9/10  90%"};
    expect_plain(out, "gym", w2, 3);
    free(out);
    fclose(f);

    /* An end before the last mark prints the final state once. */
    f = tmpfile();
    progress_begin(&p, "eval", 8, f);
    progress_update(&p, 5, NULL);
    progress_update(&p, 7, "stopped");
    progress_end(&p);
    out = slurp(f);
    const char *w3[] = {"0/8   0%", "5/8  62%", "7/8  87%"};
    expect_plain(out, "eval", w3, 3);
    CHECK(strstr(out, "87%") && strstr(out, "stopped\n"), "end line:\n%s", out);
    free(out);
    fclose(f);

    /* Zero total: one line. */
    f = tmpfile();
    progress_begin(&p, "eval", 0, f);
    progress_update(&p, 0, NULL);
    progress_end(&p);
    out = slurp(f);
    const char *w4[] = {"0/0 100%"};
    expect_plain(out, "eval", w4, 1);
    free(out);
    fclose(f);

    /* No stream: every call does nothing. */
    progress_begin(&p, "quiet", 5, NULL);
    progress_update(&p, 3, "x");
    progress_end(&p);
}

static size_t drain(int fd, char *buf, size_t cap) {
    size_t len = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    while (len + 1 < cap && poll(&pfd, 1, 50) > 0) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
    }
    buf[len] = 0;
    return len;
}

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* Splits the terminal output into drawn lines ("\r" LINE "\033[K"); returns
 * how many, the widest, and whether every line holds want (NULL: anything). */
static int tty_lines(const char *out, int *widest, const char *want, int *all_have) {
    int n = 0;
    *widest = 0;
    *all_have = 1;
    for (const char *l = strchr(out, '\r'); l; l = strchr(l + 1, '\r'), n++) {
        const char *e = strstr(l, "\033[K");
        CHECK(e != NULL, "line without erase: '%s'", l + 1);
        if (!e) break;
        int w = (int)(e - l - 1);
        if (w > *widest) *widest = w;
        char line[512];
        snprintf(line, sizeof line, "%.*s", w, l + 1);
        if (want && !strstr(line, want)) *all_have = 0;
    }
    return n;
}

static void set_columns(int fd, int cols) {
    struct winsize ws = {.ws_row = 24, .ws_col = (unsigned short)cols};
    ioctl(fd, TIOCSWINSZ, &ws);
}

static void test_tty(void) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master)) {
        printf("progress: no pseudo-terminal here, terminal output not checked\n");
        if (master >= 0) close(master);
        return;
    }
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    struct termios tio;
    tcgetattr(slave, &tio);
    cfmakeraw(&tio); /* no \n -> \r\n translation, so every \r seen is ours */
    tcsetattr(slave, TCSANOW, &tio);
    FILE *f = fdopen(slave, "w");
    static char out[1 << 16];
    int widest, all;

    /* A burst of updates inside the 0.1 s redraw interval draws the begin line,
     * the line that reaches the total, and the end line; nothing else. */
    set_columns(slave, 70);
    progress p;
    double t0 = dk_now();
    progress_begin(&p, "roll", 1000, f);
    for (long i = 1; i <= 1000; i++) progress_update(&p, i, "ok");
    double burst = dk_now() - t0;
    progress_end(&p);
    drain(master, out, sizeof out);
    int draws = tty_lines(out, &widest, "/1000 ", &all);
    if (burst < 0.1) CHECK(draws == 3, "%d redraws of a %.3f s burst, expected 3:\n%s", draws, burst, out);
    else CHECK(draws <= 3 + (int)(burst / 0.1), "%d redraws in %.3f s", draws, burst);
    CHECK(out[0] == '\r' && out[strlen(out) - 1] == '\n' && count_char(out, '\n') == 1,
          "terminal output must be \\r redraws ending in one newline: '%s'", out);
    CHECK(widest <= 69 && all, "lines up to %d columns on a 70-column terminal, counts shown in all: %d", widest, all);
    CHECK(strstr(out, "\rroll [#") && strstr(out, "] 1000/1000 100%"), "final state not shown with a bar:\n%s", out);
    int wide_draws = draws, wide = widest;

    /* On a narrow terminal the bar shrinks, then goes, and the line is cut to fit. */
    set_columns(slave, 50);
    progress_begin(&p, "roll", 10, f);
    progress_end(&p);
    drain(master, out, sizeof out);
    tty_lines(out, &widest, "roll [", &all);
    CHECK(widest == 49 && all, "50 columns: widest %d, bar kept %d:\n%s", widest, all, out);
    set_columns(slave, 20);
    progress_begin(&p, "roll", 10, f);
    progress_end(&p);
    drain(master, out, sizeof out);
    tty_lines(out, &widest, "roll 0/10", &all);
    CHECK(widest == 19 && all, "20 columns: widest %d, bar dropped %d:\n%s", widest, all, out);

    /* Slow updates (every 0.15 s) are each drawn. */
    set_columns(slave, 100);
    progress_begin(&p, "gym", 3, f);
    for (long i = 1; i <= 2; i++) {
        usleep(150000);
        progress_update(&p, i, NULL);
    }
    progress_end(&p);
    drain(master, out, sizeof out);
    draws = tty_lines(out, &widest, NULL, &all);
    CHECK(draws == 4, "%d redraws of slow updates, expected 4:\n%s", draws, out);
    CHECK(strstr(out, "2/3  66%") != NULL, "slow update not shown:\n%s", out);
    printf("progress: terminal: %d redraws for a burst of 1000 updates in %.4f s, widest line %d of 70 columns\n",
           wide_draws, burst, wide);
    fclose(f);
    close(master);
}

int main(void) {
    test_format();
    test_plain();
    test_tty();
    printf("progress: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
