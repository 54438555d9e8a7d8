/* metrics.c: builds one JSON line per step by hand: keys are our own
 * identifiers and values numbers, so no escaping beyond strings is needed. */
#include "trainer/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

dk_status metrics_open(metrics_log *m, const char *run_dir, int keep_upto) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    char *kept = NULL;
    size_t n_kept = 0;
    if (keep_upto >= 0) {
        FILE *old = fopen(path, "r");
        if (old) {
            char line[sizeof m->line + 64];
            kept = malloc(1);
            while (fgets(line, sizeof line, old)) {
                int step;
                if (sscanf(line, "{\"step\":%d", &step) != 1 || step > keep_upto) continue;
                size_t n = strlen(line);
                kept = realloc(kept, n_kept + n + 1);
                memcpy(kept + n_kept, line, n);
                n_kept += n;
            }
            fclose(old);
        }
    }
    m->f = fopen(path, "w");
    if (!m->f) {
        free(kept);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot open for writing: %s", path, strerror(errno));
    }
    if (n_kept) fwrite(kept, 1, n_kept, m->f);
    free(kept);
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
    char v[1024];
    size_t j = 0;
    v[j++] = '"';
    for (const char *p = value; *p && j < sizeof v - 3; p++) {
        if (*p == '"' || *p == '\\') v[j++] = '\\';
        v[j++] = (*p == '\n') ? ' ' : *p;
    }
    v[j++] = '"';
    v[j] = '\0';
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
