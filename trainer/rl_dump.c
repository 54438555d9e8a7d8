/* rl_dump.c: appends a step's rollouts to RUN_DIR/rollouts.jsonl. Text from
 * the model (and the feedback that quotes it) is made valid UTF-8 first: a
 * turn cut mid-character is common, and one bad byte makes the whole line
 * unreadable to a JSON reader. The step's lines go out in one write. */
#define _GNU_SOURCE
#include "trainer/rl_dump.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/util.h"

static void add_text(cJSON *o, const char *k, const char *text, size_t n) {
    char *clean = dk_utf8_sanitize(text, n, NULL);
    cJSON_AddStringToObject(o, k, clean);
    free(clean);
}

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

dk_status rl_dump_rollouts(const char *run_dir, int step, const rl_rollout *ro, int n, const rl_task *tasks,
                           tokenizer *tok) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rollouts.jsonl", run_dir);
    char *buf = NULL;
    size_t len_buf = 0;
    FILE *f = open_memstream(&buf, &len_buf);
    if (!f) DK_ABORT("open_memstream: out of memory");
    for (int i = 0; i < n; i++) {
        const rl_rollout *r = &ro[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", step);
        const char *name = tasks[r->task].name ? tasks[r->task].name : "";
        add_text(o, "task", name, strlen(name));
        cJSON_AddNumberToObject(o, "sample", r->sample);
        cJSON *turns = cJSON_AddArrayToObject(o, "turns");
        for (int t = 0; t < r->n_turns; t++) {
            cJSON *tj = cJSON_CreateObject();
            char *text = NULL;
            size_t len = 0;
            if (tokenizer_decode(tok, r->seq->tokens + r->turn_start[t], r->turn_end[t] - r->turn_start[t], 0, &text,
                                 &len) == DK_OK) {
                add_text(tj, "response", text, len);
                free(text);
            }
            cJSON_AddStringToObject(tj, "stop", gen_stop_name(r->stop[t]));
            cJSON_AddStringToObject(tj, "outcome", rl_outcome_name(r->res[t].outcome));
            add_num(tj, "reward", r->res[t].reward);
            add_num(tj, "speedup", r->res[t].speedup);
            add_num(tj, "coverage", r->res[t].coverage);
            const char *fb = r->res[t].feedback ? r->res[t].feedback : "";
            add_text(tj, "feedback", fb, strlen(fb));
            cJSON_AddItemToArray(turns, tj);
        }
        char *line = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(o);
    }
    if (fclose(f) != 0) DK_ABORT("open_memstream: out of memory");
    FILE *out = fopen(path, "a");
    if (!out) {
        free(buf);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot open for appending: %s", path, strerror(errno));
    }
    /* One buffer, so the step's lines reach the file in one write. */
    setvbuf(out, NULL, _IONBF, 0);
    int bad = fwrite(buf, 1, len_buf, out) != len_buf;
    bad |= fclose(out) != 0;
    free(buf);
    return bad ? dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", path, strerror(errno)) : DK_OK;
}
