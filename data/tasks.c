/* tasks.c: loading the RL/eval task set from JSONL or a KernelBench folder
 * (tasks.h): id/name parsing, the source sanity check and the duplicate
 * check; the folder listing is task_dir.c's. */
#define _POSIX_C_SOURCE 200809L
#include "data/tasks.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/task_dir.h"

/* ---- the source check ------------------------------------------------------ */

/* True when some line starts with word, then optional spaces, then one of
 * the characters in after ("class Model(" but not "class ModelNew("). */
static int has_line(const char *src, const char *word, const char *after) {
    size_t n = strlen(word);
    for (const char *p = src; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, word, n) != 0) continue;
        const char *q = p + n;
        while (*q == ' ' || *q == '\t') q++;
        if (*q && strchr(after, *q)) return 1;
    }
    return 0;
}

const char *task_source_problem(const char *src) {
    if (!has_line(src, "class Model", "(:")) return "no module-level `class Model`";
    if (!has_line(src, "def get_inputs", "(")) return "no module-level `def get_inputs`";
    if (!has_line(src, "def get_init_inputs", "(")) return "no module-level `def get_init_inputs`";
    return NULL;
}

/* ---- building the set -------------------------------------------------------- */

/* 1 when the task was added, 0 when it was skipped. */
static int add_task(task_set *ts, int *cap, const char *id, const char *name, int level, char *source,
                    const char *origin) {
    const char *why = task_source_problem(source);
    if (why) {
        ts->skipped = dk_realloc(ts->skipped, (size_t)(ts->n_skipped + 1) * sizeof *ts->skipped);
        ts->skipped[ts->n_skipped++] = (task_skip){dk_strdup(origin), dk_strdup(why)};
        free(source);
        return 0;
    }
    if (ts->n == *cap) {
        *cap = *cap ? 2 * *cap : 32;
        ts->tasks = dk_realloc(ts->tasks, (size_t)*cap * sizeof *ts->tasks);
    }
    ts->tasks[ts->n++] = (task_entry){dk_strdup(id), dk_strdup(name), level, source, dk_strdup(origin), NULL};
    return 1;
}

/* Two tasks with the same (level, id) would make results ambiguous. */
static dk_status check_unique(const task_set *ts) {
    for (int i = 0; i < ts->n; i++)
        for (int j = 0; j < i; j++)
            if (ts->tasks[i].level == ts->tasks[j].level && strcmp(ts->tasks[i].id, ts->tasks[j].id) == 0)
                return dk_fail(DK_ERR_RUNTIME, "%s: task id '%s' (level %d) already used by %s", ts->tasks[i].origin,
                               ts->tasks[i].id, ts->tasks[i].level, ts->tasks[j].origin);
    return DK_OK;
}

/* ---- JSONL --------------------------------------------------------------------- */

static dk_status load_jsonl(const char *path, int level, task_set *ts) {
    FILE *f = fopen(path, "r");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open tasks: %s", path, strerror(errno));
    char *line = NULL, origin[4200], idbuf[32];
    size_t cap_line = 0;
    int lineno = 0, cap = 0;
    dk_status st = DK_OK;
    while (st == DK_OK && getline(&line, &cap_line, f) >= 0) {
        lineno++;
        const char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) continue;
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        cJSON *j = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItem(j, "id"), *name = cJSON_GetObjectItem(j, "name"),
                    *lv = cJSON_GetObjectItem(j, "level"), *src = cJSON_GetObjectItem(j, "source");
        const cJSON *rp = cJSON_GetObjectItem(j, "reference_profile");
        const char *ids = NULL;
        if (!cJSON_IsObject(j)) st = dk_fail(DK_ERR_RUNTIME, "%s: not a JSON object", origin);
        else if (!cJSON_IsString(src)) st = dk_fail(DK_ERR_RUNTIME, "%s: \"source\" must be a string", origin);
        else if (cJSON_IsString(id) && id->valuestring[0]) ids = id->valuestring;
        else if (cJSON_IsNumber(id) && fabs(id->valuedouble) < 1e15 && id->valuedouble == (long)id->valuedouble) {
            snprintf(idbuf, sizeof idbuf, "%ld", (long)id->valuedouble);
            ids = idbuf;
        } else st = dk_fail(DK_ERR_RUNTIME, "%s: \"id\" must be a non-empty string or an integer", origin);
        if (st == DK_OK && name && !cJSON_IsString(name))
            st = dk_fail(DK_ERR_RUNTIME, "%s: \"name\" must be a string", origin);
        if (st == DK_OK && lv &&
            !(cJSON_IsNumber(lv) && lv->valuedouble >= 0 && lv->valuedouble <= 1e6 && lv->valuedouble == lv->valueint))
            st = dk_fail(DK_ERR_RUNTIME, "%s: \"level\" must be a non-negative integer", origin);
        if (st == DK_OK && rp && !cJSON_IsArray(rp) && !cJSON_IsNull(rp))
            st = dk_fail(DK_ERR_RUNTIME, "%s: \"reference_profile\" must be a list of {\"name\", \"share\"}", origin);
        if (st == DK_OK) {
            int l = lv ? lv->valueint : 0;
            if (level <= 0 || l == level) {
                if (add_task(ts, &cap, ids, name ? name->valuestring : ids, l, dk_strdup(src->valuestring), origin) &&
                    cJSON_IsArray(rp)) ts->tasks[ts->n - 1].reference_profile = cJSON_PrintUnformatted(rp);
            }
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    return st;
}

/* ---- folders ------------------------------------------------------------------ */

static dk_status load_level_dir(const char *dir, int level, task_set *ts, int *cap) {
    task_dir_entry *it;
    int n;
    DK_TRY(task_dir_list(dir, TASK_DIR_FILES, &it, &n));
    dk_status st = DK_OK;
    char path[4200], id[64], name[4096];
    for (int i = 0; i < n && st == DK_OK; i++) {
        const char *file = it[i].name;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        size_t stem = strlen(file) - 3;
        /* "19_Name.py": id 19, name Name; any other file is named by its stem. */
        const char *sep = file + strspn(file, "0123456789");
        if (it[i].num >= 0 && *sep == '_') {
            snprintf(id, sizeof id, "%ld", it[i].num);
            const char *rest = sep + 1;
            snprintf(name, sizeof name, "%.*s", (int)(stem - (size_t)(rest - file)), rest);
        } else {
            snprintf(id, sizeof id, "%.*s", (int)(stem < sizeof id - 1 ? stem : sizeof id - 1), file);
            snprintf(name, sizeof name, "%.*s", (int)stem, file);
        }
        char *src;
        st = dk_read_file(path, &src, NULL);
        if (st == DK_OK) add_task(ts, cap, id, name, level, src, path);
    }
    task_dir_free(it, n);
    return st;
}

static dk_status load_folder(const char *dir, int level, task_set *ts) {
    task_dir_entry *py, *lv;
    int n_py, n_lv, cap = 0;
    DK_TRY(task_dir_list(dir, TASK_DIR_FILES, &py, &n_py));
    task_dir_free(py, n_py);
    if (n_py > 0) { /* a level folder itself */
        const char *base = strrchr(dir, '/');
        base = base && base[1] ? base + 1 : dir;
        int own = (int)task_dir_level(base);
        if (own > 0 && level > 0 && own != level)
            return dk_fail(DK_ERR_USAGE, "%s: a level %d folder, but level %d was asked for", dir, own, level);
        return load_level_dir(dir, own > 0 ? own : level > 0 ? level : 0, ts, &cap);
    }
    DK_TRY(task_dir_list(dir, TASK_DIR_LEVELS, &lv, &n_lv));
    dk_status st = DK_OK;
    int used = 0;
    char sub[4200];
    for (int i = 0; i < n_lv && st == DK_OK; i++) {
        if (level > 0 && lv[i].num != level) continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, lv[i].name);
        st = load_level_dir(sub, (int)lv[i].num, ts, &cap);
        used++;
    }
    task_dir_free(lv, n_lv);
    if (st == DK_OK && used == 0) {
        if (level > 0) return dk_fail(DK_ERR_RUNTIME, "%s: no level%d folder", dir, level);
        return dk_fail(DK_ERR_RUNTIME, "%s: no task files (*.py) and no level folders (level1/, level2/, ...)", dir);
    }
    return st;
}

dk_status task_set_load(const char *path, int level, task_set *ts) {
    memset(ts, 0, sizeof *ts);
    if (!dk_file_exists(path) && !dk_dir_exists(path))
        return dk_fail(DK_ERR_RUNTIME, "%s: no such task file or folder", path);
    dk_status st = dk_dir_exists(path) ? load_folder(path, level, ts) : load_jsonl(path, level, ts);
    if (st == DK_OK) st = check_unique(ts);
    if (st == DK_OK && ts->n == 0) {
        if (ts->n_skipped)
            st = dk_fail(DK_ERR_RUNTIME, "%s: all %d tasks were skipped (first: %s: %s)", path, ts->n_skipped,
                         ts->skipped[0].origin, ts->skipped[0].reason);
        else if (level > 0)
            st = dk_fail(DK_ERR_RUNTIME, "%s: no task of level %d", path, level);
        else
            st = dk_fail(DK_ERR_RUNTIME, "%s: no task", path);
    }
    if (st != DK_OK) task_set_free(ts);
    return st;
}

void task_set_free(task_set *ts) {
    for (int i = 0; i < ts->n; i++) {
        task_entry *t = &ts->tasks[i];
        free(t->id);
        free(t->name);
        free(t->source);
        free(t->origin);
        free(t->reference_profile);
    }
    for (int i = 0; i < ts->n_skipped; i++) {
        free(ts->skipped[i].origin);
        free(ts->skipped[i].reason);
    }
    free(ts->tasks);
    free(ts->skipped);
    memset(ts, 0, sizeof *ts);
}

void task_set_print_summary(const task_set *ts, const char *path, FILE *f) {
    fprintf(f, "loaded %d task%s from %s", ts->n, ts->n == 1 ? "" : "s", path);
    /* Per level counts, levels in order of first appearance. */
    int shown[64], n_shown = 0;
    for (int i = 0; i < ts->n; i++) {
        int l = ts->tasks[i].level, seen = 0;
        for (int k = 0; k < n_shown; k++) seen |= shown[k] == l;
        if (seen || n_shown == 64) continue;
        shown[n_shown++] = l;
        int c = 0;
        for (int j = 0; j < ts->n; j++) c += ts->tasks[j].level == l;
        fprintf(f, "%slevel %d: %d", n_shown == 1 ? " (" : ", ", l, c);
    }
    fprintf(f, "%s\n", n_shown ? ")" : "");
    if (ts->n_skipped) {
        fprintf(f, "WARNING: skipped %d task%s that cannot be evaluated:\n", ts->n_skipped,
                ts->n_skipped == 1 ? "" : "s");
        for (int i = 0; i < ts->n_skipped; i++) fprintf(f, "  %s: %s\n", ts->skipped[i].origin, ts->skipped[i].reason);
    }
}
