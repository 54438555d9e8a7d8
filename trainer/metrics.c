/* metrics.c: builds one JSON line per step by hand: keys are our own
 * identifiers and values numbers or short strings (escaped as JSON). */
#include "trainer/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

dk_status metrics_open(metrics_log *m, const char *run_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    m->f = fopen(path, "a");
    if (!m->f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open for appending: %s", path, strerror(errno));
    m->len = 0;
    snprintf(path, sizeof path, "%s/tb", run_dir);
    dk_status st = tb_open(&m->tb, path);
    if (st != DK_OK) {
        fclose(m->f);
        m->f = NULL;
        return st;
    }
    m->have_tb = 1;
    return DK_OK;
}

static void put(metrics_log *m, const char *fmt, const char *key, const char *val) {
    int room = (int)sizeof m->line - m->len;
    int n = snprintf(m->line + m->len, room, fmt, m->len > 1 ? "," : "", key, val);
    if (n > 0 && n < room) m->len += n;
}

void metrics_begin(metrics_log *m, int step) {
    m->step = step;
    m->len = snprintf(m->line, sizeof m->line, "{\"step\":%d", step);
}

void metrics_add(metrics_log *m, const char *key, double value) {
    char v[64];
    if (isfinite(value)) snprintf(v, sizeof v, "%.9g", value);
    else snprintf(v, sizeof v, "null"); /* JSON has no NaN */
    put(m, "%s\"%s\":%s", key, v);
    if (m->have_tb) tb_scalar(&m->tb, key, m->step, value);
}

void metrics_add_str(metrics_log *m, const char *key, const char *value) {
    char *clean = dk_utf8_sanitize(value, strlen(value), NULL);
    char v[1024];
    size_t j = 0;
    v[j++] = '"';
    const unsigned char *p = (const unsigned char *)clean;
    for (; *p && j < sizeof v - 8; p++) {
        if (*p == '"' || *p == '\\') {
            v[j++] = '\\';
            v[j++] = (char)*p;
        } else if (*p < 0x20) {
            j += (size_t)snprintf(v + j, sizeof v - j, "\\u%04x", *p);
        } else {
            v[j++] = (char)*p;
        }
    }
    if ((*p & 0xC0) == 0x80) { /* cut inside a character: drop its first bytes too */
        while (j > 1 && ((unsigned char)v[j - 1] & 0xC0) == 0x80) j--;
        if (j > 1) j--;
    }
    v[j++] = '"';
    v[j] = '\0';
    free(clean);
    put(m, "%s\"%s\":%s", key, v);
}

void metrics_end(metrics_log *m) {
    if (!m->f) return;
    fprintf(m->f, "%s}\n", m->line);
    fflush(m->f);
    if (m->have_tb) tb_flush(&m->tb);
}

void metrics_close(metrics_log *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
    if (m->have_tb) tb_close(&m->tb);
    m->have_tb = 0;
}
