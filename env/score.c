/* score.c: task/solution matching, Fast@p, the table and the JSON report. */
#define _GNU_SOURCE
#include "env/score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/task_dir.h"

const double kg_fast_p_thresholds[KG_FAST_P_COUNT] = {0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0};

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = dk_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

dk_status kg_score_collect(const char *tasks_dir, const char *solutions_dir, kg_score_report *rep) {
    memset(rep, 0, sizeof *rep);
    task_dir_entry *tasks = NULL, *sols = NULL;
    int nt = 0, ns = 0;
    DK_TRY(task_dir_list(tasks_dir, TASK_DIR_FILES, &tasks, &nt));
    dk_status st = task_dir_list(solutions_dir, TASK_DIR_FILES, &sols, &ns);
    if (st == DK_OK && nt == 0) st = dk_fail(DK_ERR_RUNTIME, "%s: no task files (*.py)", tasks_dir);
    if (st == DK_OK) {
        rep->n = nt;
        rep->items = dk_calloc((size_t)nt, sizeof *rep->items);
        for (int i = 0; i < nt; i++) {
            kg_score_item *it = &rep->items[i];
            it->task_path = join(tasks_dir, tasks[i].name);
            size_t len = strlen(tasks[i].name) - 3;
            it->task_name = dk_malloc(len + 1);
            memcpy(it->task_name, tasks[i].name, len);
            it->task_name[len] = '\0';
            it->id = tasks[i].num;
            kg_result_init(&it->result);
            int exact = -1, by_id = -1, n_id = 0;
            for (int j = 0; j < ns; j++) {
                if (strcmp(sols[j].name, tasks[i].name) == 0) exact = j;
                if (it->id >= 0 && sols[j].num == it->id) {
                    if (by_id < 0) by_id = j;
                    n_id++;
                }
            }
            int pick = exact >= 0 ? exact : by_id;
            char note[160] = "";
            if (exact < 0 && n_id > 1)
                snprintf(note, sizeof note, "%d solutions share id %ld; using %s", n_id, it->id, sols[pick].name);
            it->note = dk_strdup(note);
            if (pick >= 0) {
                it->solution_path = join(solutions_dir, sols[pick].name);
                rep->n_solutions++;
            }
        }
    }
    task_dir_free(tasks, nt);
    task_dir_free(sols, ns);
    return st;
}

int kg_score_is_fast(const kg_result *r, double p) {
    if (!kg_result_passed(r)) return 0;
    if (p <= 0) return 1;
    return r->timing_available && isfinite(r->speedup) && r->speedup > p;
}

void kg_score_compute(kg_score_report *rep) {
    for (int k = 0; k < KG_FAST_P_COUNT; k++) {
        int fast = 0;
        for (int i = 0; i < rep->n; i++) fast += kg_score_is_fast(&rep->items[i].result, kg_fast_p_thresholds[k]);
        rep->fast_p[k] = rep->n > 0 ? (double)fast / rep->n : 0.0;
    }
}

static void fmt_num(char *buf, size_t n, double v, const char *fmt) {
    if (isfinite(v)) snprintf(buf, n, fmt, v);
    else snprintf(buf, n, "-");
}

void kg_score_print(const kg_score_report *rep, FILE *f) {
    int w = 4;
    for (int i = 0; i < rep->n; i++) {
        int l = (int)strlen(rep->items[i].task_name);
        if (l > w) w = l;
    }
    if (w > 48) w = 48;
    fprintf(f, "%-*s  %-13s  %8s  %10s  %10s  %8s\n", w, "task", "status", "speedup", "ms", "ref_ms", "coverage");
    for (int i = 0; i < rep->n; i++) {
        const kg_score_item *it = &rep->items[i];
        const kg_result *r = &it->result;
        char sp[32], ms[32], ref[32], cov[32];
        fmt_num(sp, sizeof sp, r->timing_available ? r->speedup : NAN, "%.2fx");
        fmt_num(ms, sizeof ms, r->runtime.valid ? r->runtime.mean : NAN, "%.4g");
        fmt_num(ref, sizeof ref, r->ref_runtime.valid ? r->ref_runtime.mean : NAN, "%.4g");
        fmt_num(cov, sizeof cov, r->has_profile ? 100 * r->coverage : NAN, "%.0f%%");
        const char *status = it->solution_path ? kg_status_name(r->status) : "missing";
        fprintf(f, "%-*.*s  %-13s  %8s  %10s  %10s  %8s\n", w, w, it->task_name, status, sp, ms, ref, cov);
        if (it->note[0]) fprintf(f, "%*s  note: %s\n", w, "", it->note);
    }
    fprintf(f, "%d tasks, %d with a solution\n", rep->n, rep->n_solutions);
    for (int k = 0; k < KG_FAST_P_COUNT; k++)
        fprintf(f, "fast_%g = %.3f%s", kg_fast_p_thresholds[k], rep->fast_p[k], k + 1 < KG_FAST_P_COUNT ? "  " : "\n");
}

static void add_num(cJSON *o, const char *key, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

cJSON *kg_score_to_json(const kg_score_report *rep, const char *tasks_dir, const char *solutions_dir) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tasks_dir", tasks_dir);
    cJSON_AddStringToObject(o, "solutions_dir", solutions_dir);
    cJSON_AddNumberToObject(o, "n_tasks", rep->n);
    cJSON_AddNumberToObject(o, "n_solutions", rep->n_solutions);
    cJSON *fp = cJSON_AddObjectToObject(o, "fast_p");
    for (int k = 0; k < KG_FAST_P_COUNT; k++) {
        char key[16];
        snprintf(key, sizeof key, "%g", kg_fast_p_thresholds[k]);
        cJSON_AddNumberToObject(fp, key, rep->fast_p[k]);
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "tasks");
    for (int i = 0; i < rep->n; i++) {
        const kg_score_item *it = &rep->items[i];
        const kg_result *r = &it->result;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "task", it->task_name);
        if (it->id >= 0) cJSON_AddNumberToObject(t, "id", (double)it->id);
        else cJSON_AddNullToObject(t, "id");
        cJSON_AddStringToObject(t, "task_path", it->task_path);
        if (it->solution_path) cJSON_AddStringToObject(t, "solution", it->solution_path);
        else cJSON_AddNullToObject(t, "solution");
        cJSON_AddStringToObject(t, "status", it->solution_path ? kg_status_name(r->status) : "missing");
        cJSON_AddBoolToObject(t, "correct", kg_result_passed(r));
        add_num(t, "speedup", r->timing_available ? r->speedup : NAN);
        if (it->note[0]) cJSON_AddStringToObject(t, "note", it->note);
        cJSON *full = r->json ? cJSON_Parse(r->json) : NULL;
        if (full) cJSON_AddItemToObject(t, "result", full);
        else cJSON_AddNullToObject(t, "result");
        cJSON_AddItemToArray(arr, t);
    }
    return o;
}

void kg_score_free(kg_score_report *rep) {
    for (int i = 0; i < rep->n; i++) {
        kg_score_item *it = &rep->items[i];
        free(it->task_path);
        free(it->task_name);
        free(it->solution_path);
        free(it->note);
        kg_result_free(&it->result);
    }
    free(rep->items);
    memset(rep, 0, sizeof *rep);
}
