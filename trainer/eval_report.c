/* eval_report.c: the Fast@p arithmetic and its reports. */
#include "trainer/eval_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const double eval_p[EVAL_N_P] = {1.0, 1.2, 1.5, 2.0};

/* Speedup of a passing turn, or NAN when the turn does not count. */
static double counted_speedup(const rl_turn_result *r) {
    return r->correct && r->outcome == RL_OUT_OK ? r->speedup : NAN;
}

/* The best turn of a rollout: the fastest correct one (the first correct
 * untimed one when none is timed), or -1. */
static int best_turn(const rl_rollout *r) {
    int best = -1;
    for (int t = 0; t < r->n_turns; t++) {
        if (!r->res[t].correct || r->res[t].outcome != RL_OUT_OK) continue;
        double s = r->res[t].speedup;
        if (best < 0 || (isfinite(s) && (!isfinite(r->res[best].speedup) || s > r->res[best].speedup))) best = t;
    }
    return best;
}

void eval_summarise(eval_summary *s, const rl_rollout *ro, int n, int max_turns) {
    memset(s, 0, sizeof *s);
    s->n_tasks = n;
    s->max_turns = max_turns;
    double sum = 0, logsum = 0;
    for (int i = 0; i < n; i++) {
        const rl_rollout *r = &ro[i];
        for (int t = 0; t < max_turns; t++) {
            if (t >= r->n_turns) continue;
            double sp = counted_speedup(&r->res[t]);
            s->correct_rate[t] += r->res[t].outcome == RL_OUT_OK;
            s->hack_rate[t] += r->res[t].outcome == RL_OUT_HACK;
            for (int k = 0; k < EVAL_N_P; k++) s->fast[t][k] += isfinite(sp) && sp > eval_p[k];
        }
        int any_hack = 0;
        for (int t = 0; t < r->n_turns; t++) any_hack |= r->res[t].outcome == RL_OUT_HACK;
        s->hack_rate[max_turns] += any_hack;
        int b = best_turn(r);
        if (b >= 0) {
            s->correct_rate[max_turns] += 1;
            double sp = r->res[b].speedup;
            for (int k = 0; k < EVAL_N_P; k++) s->fast[max_turns][k] += isfinite(sp) && sp > eval_p[k];
            if (isfinite(sp) && sp > 0) {
                sum += sp;
                logsum += log(sp);
                s->n_speedups++;
            }
        }
    }
    const double d = n > 0 ? n : 1;
    for (int t = 0; t <= max_turns; t++) {
        s->correct_rate[t] /= d;
        s->hack_rate[t] /= d;
        for (int k = 0; k < EVAL_N_P; k++) s->fast[t][k] /= d;
    }
    s->speedup_mean = s->n_speedups ? sum / s->n_speedups : NAN;
    s->speedup_geomean = s->n_speedups ? exp(logsum / s->n_speedups) : NAN;
}

void eval_print(FILE *f, const eval_summary *s, const rl_rollout *ro, const rl_task *tasks, int n) {
    fprintf(f, "\n%-32s", "task");
    for (int t = 0; t < s->max_turns; t++) fprintf(f, "  turn %d           ", t + 1);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%-32.32s", tasks[i].name);
        for (int t = 0; t < s->max_turns; t++) {
            if (t >= ro[i].n_turns) {
                fprintf(f, "  %-17s", "-");
                continue;
            }
            const rl_turn_result *r = &ro[i].res[t];
            char cell[32];
            if (isfinite(r->speedup) && r->outcome == RL_OUT_OK) snprintf(cell, sizeof cell, "ok %.2fx", r->speedup);
            else snprintf(cell, sizeof cell, "%s", rl_outcome_name(r->outcome));
            fprintf(f, "  %-17s", cell);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n%-10s", "");
    for (int k = 0; k < EVAL_N_P; k++) fprintf(f, " fast@%-4.1f", eval_p[k]);
    fprintf(f, "  correct   hack\n");
    for (int t = 0; t <= s->max_turns; t++) {
        char label[16];
        if (t < s->max_turns) snprintf(label, sizeof label, "turn %d", t + 1);
        else snprintf(label, sizeof label, "best");
        fprintf(f, "%-10s", label);
        for (int k = 0; k < EVAL_N_P; k++) fprintf(f, " %-9.3f", s->fast[t][k]);
        fprintf(f, "  %-8.3f  %.3f\n", s->correct_rate[t], s->hack_rate[t]);
    }
    fprintf(f, "speedup of correct kernels (best turn, %d timed): mean %.3f, geometric mean %.3f\n", s->n_speedups,
            s->speedup_mean, s->speedup_geomean);
    fprintf(f, "Fast@1 = %.3f over %d tasks\n", s->fast[s->max_turns][0], s->n_tasks);
}

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

dk_status eval_write_json(const char *path, const eval_summary *s, const rl_rollout *ro, const rl_task *tasks, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "n_tasks", s->n_tasks);
    cJSON *turns = cJSON_AddArrayToObject(root, "turns");
    for (int t = 0; t <= s->max_turns; t++) {
        cJSON *o = cJSON_CreateObject();
        if (t < s->max_turns) cJSON_AddNumberToObject(o, "turn", t + 1);
        else cJSON_AddStringToObject(o, "turn", "best");
        for (int k = 0; k < EVAL_N_P; k++) {
            char key[32];
            snprintf(key, sizeof key, "fast_%.1f", eval_p[k]);
            add_num(o, key, s->fast[t][k]);
        }
        add_num(o, "correct_rate", s->correct_rate[t]);
        add_num(o, "hack_rate", s->hack_rate[t]);
        cJSON_AddItemToArray(turns, o);
    }
    add_num(root, "speedup_mean", s->speedup_mean);
    add_num(root, "speedup_geomean", s->speedup_geomean);
    cJSON *tasks_j = cJSON_AddArrayToObject(root, "tasks");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", tasks[i].id ? tasks[i].id : "");
        cJSON_AddStringToObject(o, "name", tasks[i].name ? tasks[i].name : "");
        cJSON *tt = cJSON_AddArrayToObject(o, "turns");
        for (int t = 0; t < ro[i].n_turns; t++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "outcome", rl_outcome_name(ro[i].res[t].outcome));
            add_num(r, "speedup", ro[i].res[t].speedup);
            add_num(r, "coverage", ro[i].res[t].coverage);
            add_num(r, "reward", ro[i].res[t].reward);
            cJSON_AddItemToArray(tt, r);
        }
        cJSON_AddItemToArray(tasks_j, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = fopen(path, "w");
    dk_status st = DK_OK;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) st = dk_fail(DK_ERR_RUNTIME, "%s: cannot write", path);
    if (f && fclose(f) != 0 && st == DK_OK) st = dk_fail(DK_ERR_RUNTIME, "%s: cannot write", path);
    free(text);
    return st;
}
