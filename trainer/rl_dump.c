/* rl_dump.c: appends a step's rollouts to RUN_DIR/rollouts.jsonl. */
#include "trainer/rl_dump.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

dk_status rl_dump_rollouts(const char *run_dir, int step, const rl_rollout *ro, int n, const rl_task *tasks,
                           tokenizer *tok) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rollouts.jsonl", run_dir);
    FILE *f = fopen(path, "a");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open for appending: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) {
        const rl_rollout *r = &ro[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", step);
        cJSON_AddStringToObject(o, "task", tasks[r->task].name ? tasks[r->task].name : "");
        cJSON_AddNumberToObject(o, "sample", r->sample);
        cJSON *turns = cJSON_AddArrayToObject(o, "turns");
        for (int t = 0; t < r->n_turns; t++) {
            cJSON *tj = cJSON_CreateObject();
            char *text = NULL;
            size_t len = 0;
            if (tokenizer_decode(tok, r->seq->tokens + r->turn_start[t], r->turn_end[t] - r->turn_start[t], 0, &text,
                                 &len) == DK_OK) {
                cJSON_AddStringToObject(tj, "response", text);
                free(text);
            }
            cJSON_AddStringToObject(tj, "stop", gen_stop_name(r->stop[t]));
            cJSON_AddStringToObject(tj, "outcome", rl_outcome_name(r->res[t].outcome));
            add_num(tj, "reward", r->res[t].reward);
            add_num(tj, "speedup", r->res[t].speedup);
            add_num(tj, "coverage", r->res[t].coverage);
            cJSON_AddStringToObject(tj, "feedback", r->res[t].feedback ? r->res[t].feedback : "");
            cJSON_AddItemToArray(turns, tj);
        }
        char *line = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(o);
    }
    int bad = fclose(f) != 0;
    return bad ? dk_fail(DK_ERR_RUNTIME, "%s: write failed", path) : DK_OK;
}
