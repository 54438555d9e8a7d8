/* progress.c: one formatting function shared by both outputs, and the policy
 * of when to draw: a terminal gets at most ~10 redraws a second (with \r and
 * an erase-to-end-of-line, cut to the terminal width so it never wraps);
 * anything else gets a handful of whole lines. */
#define _DEFAULT_SOURCE
#include "trainer/progress.h"

#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/util.h"

#define PROGRESS_BAR_WIDTH 24
#define PROGRESS_REDRAW_S 0.1

/* m:ss, or h:mm:ss from an hour up. */
static void format_duration(char *buf, size_t n, double s) {
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

size_t progress_format(char *buf, size_t n, const char *label, long done, long total, double elapsed,
                       const char *extra, int bar_width) {
    if (n == 0) return 0;
    long d = done < 0 ? 0 : total > 0 && done > total ? total : done; /* clamped for bar, % and ETA */
    /* Integer shares: 29 / 100.0 * 100 would floor to 28. */
    int pct = total > 0 ? (int)(100 * (long long)d / total) : 100;
    char bar[256] = "", rate[32] = "--/s", eta[32] = "--:--", el[32];
    if (bar_width > 0) {
        int w = bar_width < (int)sizeof bar - 4 ? bar_width : (int)sizeof bar - 4;
        int fill = total > 0 ? (int)((long long)d * w / total) : w;
        bar[0] = '[';
        for (int i = 0; i < w; i++) bar[1 + i] = i < fill ? '#' : '-';
        bar[w + 1] = ']';
        bar[w + 2] = ' ';
        bar[w + 3] = 0;
    }
    format_duration(el, sizeof el, elapsed);
    if (total <= 0 || d >= total) strcpy(eta, "0:00");
    if (d > 0 && elapsed >= 0.01) { /* a rate over a few ms of clock is noise */
        double r = (double)d / elapsed;
        if (r >= 1) snprintf(rate, sizeof rate, "%.1f/s", r);
        else snprintf(rate, sizeof rate, "%.1fs/it", 1 / r);
        if (d < total) format_duration(eta, sizeof eta, (double)(total - d) / r);
    }
    int len = snprintf(buf, n, "%s %s%ld/%ld %3d%% %s %s ETA %s%s%s", label, bar, done, total > 0 ? total : 0,
                       pct, el, rate, eta, extra && *extra ? " " : "", extra ? extra : "");
    if (len < 0) len = 0;
    return (size_t)len < n ? (size_t)len : n - 1;
}

static void draw(progress *p, int final) {
    double now = dk_now();
    char line[512];
    if (p->tty) {
        size_t n = sizeof line;
        struct winsize ws;
        /* One column short of the width: writing the last column wraps on some terminals. */
        if (ioctl(fileno(p->f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && ws.ws_col < n) n = ws.ws_col;
        /* The bar gives way first on a narrow terminal, so the numbers stay visible. */
        size_t bare = progress_format(line, sizeof line, p->label, p->done, p->total, now - p->t0, p->extra, 0);
        int bar = bare + 3 + PROGRESS_BAR_WIDTH < n ? PROGRESS_BAR_WIDTH : (int)n - 1 - (int)bare - 3;
        progress_format(line, n, p->label, p->done, p->total, now - p->t0, p->extra, bar >= 5 ? bar : 0);
        fprintf(p->f, "\r%s\033[K%s", line, final ? "\n" : "");
    } else {
        progress_format(line, sizeof line, p->label, p->done, p->total, now - p->t0, p->extra, 0);
        fprintf(p->f, "%s\n", line);
        p->printed = p->done;
    }
    fflush(p->f);
    p->last_draw = now;
}

void progress_begin(progress *p, const char *label, long total, FILE *f) {
    memset(p, 0, sizeof *p);
    p->f = f;
    if (!f) return;
    p->tty = isatty(fileno(f));
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total > 0 ? total : 0;
    p->printed = -1;
    p->quarter = p->total > 0 ? 0 : 4; /* nothing to do: the first line already says 100% */
    p->t0 = dk_now();
    draw(p, 0);
}

void progress_update(progress *p, long done, const char *extra) {
    if (!p->f) return;
    int finished_now = done >= p->total && p->done < p->total;
    p->done = done;
    snprintf(p->extra, sizeof p->extra, "%s", extra ? extra : "");
    if (p->tty) {
        /* Reaching the total always shows, so the last state is never skipped by the rate limit. */
        if (finished_now || dk_now() - p->last_draw >= PROGRESS_REDRAW_S) draw(p, 0);
        return;
    }
    /* The highest 25% mark reached; several marks crossed at once give one line. */
    int q = p->total > 0 ? (int)(4 * (done < p->total ? done : p->total) / p->total) : 4;
    if (q > p->quarter) {
        p->quarter = q;
        draw(p, 0);
    }
}

void progress_end(progress *p) {
    if (!p->f) return;
    /* Plain output whose last line already shows this state needs no repeat. */
    if (p->tty || p->printed != p->done) draw(p, 1);
    p->f = NULL;
}
