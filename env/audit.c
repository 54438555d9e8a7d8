/* audit.c: `kernelgym audit` (audit.h): read both corpora and their headers,
 * build one eval job per candidate, evaluate them through kg_jobs_evaluate,
 * then count and print. */
#include "env/audit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/util.h"
#include "data/task_dir.h"

typedef struct {
    char *path, *name;
    int honest;   /* from the honest corpus */
    int skipped;  /* kg-gpu-only on the CPU */
    char *expect; /* kg-expect (or kg-expect-cpu on the CPU); "" when none */
    char *task_src, *cand_src;
    kg_result result;
} audit_item;

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = dk_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The value of "# kg-KEY: value" in the first 20 lines; "" for a bare
 * "# kg-KEY"; NULL when absent. */
static char *header(const char *src, const char *key) {
    char tag[64];
    snprintf(tag, sizeof tag, "kg-%s", key);
    const char *p = src;
    for (int line = 0; line < 20 && *p; line++) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t')) q++;
        if (q < p + len && *q == '#') {
            q++;
            while (q < p + len && (*q == ' ' || *q == '\t')) q++;
            size_t tl = strlen(tag);
            if ((size_t)(p + len - q) >= tl && !strncmp(q, tag, tl) &&
                (q + tl == p + len || q[tl] == ':' || q[tl] == ' ' || q[tl] == '\r')) {
                q += tl;
                if (q < p + len && *q == ':') q++;
                while (q < p + len && (*q == ' ' || *q == '\t')) q++;
                size_t vl = (size_t)(p + len - q);
                while (vl > 0 && (q[vl - 1] == ' ' || q[vl - 1] == '\r' || q[vl - 1] == '\t')) vl--;
                char *v = dk_malloc(vl + 1);
                memcpy(v, q, vl);
                v[vl] = '\0';
                return v;
            }
        }
        if (!end) break;
        p = end + 1;
    }
    return NULL;
}

/* kg-options JSON onto the job options; a key the C options do not carry is
 * an error naming the file (the audit must not silently run another test),
 * except static_checks, which the audit never turns off. */
static dk_status apply_options(const char *path, const char *key, const char *json, kg_job_options *o) {
    cJSON *j = cJSON_Parse(json);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return dk_fail(DK_ERR_USAGE, "%s: kg-%s: not a JSON object: %s", path, key, json);
    }
    dk_status st = DK_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        const char *k = e->string;
        if (!strcmp(k, "strict") && cJSON_IsBool(e)) o->strict = cJSON_IsTrue(e);
        else if (!strcmp(k, "profile") && cJSON_IsBool(e)) o->profile = cJSON_IsTrue(e);
        else if (!strcmp(k, "timeout_s") && cJSON_IsNumber(e)) o->timeout_s = e->valuedouble;
        else if (!strcmp(k, "correctness_trials") && cJSON_IsNumber(e)) o->correctness_trials = e->valueint;
        else if (!strcmp(k, "perf_trials") && cJSON_IsNumber(e)) o->perf_trials = e->valueint;
        else if (!strcmp(k, "warmup") && cJSON_IsNumber(e)) o->warmup = e->valueint;
        else if (!strcmp(k, "atol") && cJSON_IsNumber(e)) o->atol = e->valuedouble;
        else if (!strcmp(k, "rtol") && cJSON_IsNumber(e)) o->rtol = e->valuedouble;
        /* A corpus file may turn the static layer off so that its own test
         * reaches the runtime layer behind it; the audit measures what the
         * whole judge catches, so it keeps every layer on. */
        else if (!strcmp(k, "static_checks") && cJSON_IsBool(e)) continue;
        else {
            st = dk_fail(DK_ERR_USAGE, "%s: kg-%s: option '%s' is not supported by kernelgym audit", path, key, k);
            break;
        }
    }
    cJSON_Delete(j);
    return st;
}

static dk_status read_corpus(const kg_audit_config *c, const char *dir, int honest, audit_item **items, int *n) {
    task_dir_entry *ents = NULL;
    int ne = 0;
    DK_TRY(task_dir_list(dir, TASK_DIR_FILES, &ents, &ne));
    dk_status st = ne ? DK_OK : dk_fail(DK_ERR_USAGE, "%s: no candidate files (*.py)", dir);
    const int cpu = strcmp(c->device, "cuda") != 0;
    for (int i = 0; i < ne && st == DK_OK; i++) {
        *items = dk_realloc(*items, (size_t)(*n + 1) * sizeof **items);
        audit_item *it = &(*items)[(*n)++];
        memset(it, 0, sizeof *it);
        kg_result_init(&it->result);
        it->path = join(dir, ents[i].name);
        it->name = dk_strdup(ents[i].name);
        it->honest = honest;
        size_t len;
        if ((st = dk_read_file(it->path, &it->cand_src, &len)) != DK_OK) break;
        char *gpu_only = header(it->cand_src, "gpu-only");
        it->skipped = cpu && gpu_only;
        free(gpu_only);
        char *e = cpu ? header(it->cand_src, "expect-cpu") : NULL;
        it->expect = e ? e : header(it->cand_src, "expect");
        if (!it->expect) it->expect = dk_strdup("");
        char *task = cpu ? NULL : header(it->cand_src, "task-gpu");
        if (!task) task = header(it->cand_src, "task");
        if (!task || !task[0]) {
            free(task);
            st = dk_fail(DK_ERR_USAGE, "%s: no '# kg-task: NAME' header naming its task", it->path);
            break;
        }
        if (!it->skipped) {
            char file[512];
            snprintf(file, sizeof file, "%s.py", task);
            char *tp = join(c->tasks_dir, file);
            st = dk_read_file(tp, &it->task_src, &len);
            if (st != DK_OK) st = dk_fail(DK_ERR_USAGE, "%s: kg-task %s: cannot read %s", it->path, task, tp);
            free(tp);
        }
        free(task);
    }
    task_dir_free(ents, ne);
    return st;
}

static void free_items(audit_item *items, int n) {
    for (int i = 0; i < n; i++) {
        free(items[i].path);
        free(items[i].name);
        free(items[i].expect);
        free(items[i].task_src);
        free(items[i].cand_src);
        kg_result_free(&items[i].result);
    }
    free(items);
}

/* A tally of names (hack reasons, statuses) in first-seen order. */
typedef struct {
    int n;
    const char *name[64];
    int count[64];
} tally;

static void tally_add(tally *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->name[i], name)) {
            t->count[i]++;
            return;
        }
    if (t->n == 64) return;
    t->name[t->n] = name;
    t->count[t->n++] = 1;
}

static cJSON *tally_json(const tally *t) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < t->n; i++) cJSON_AddNumberToObject(o, t->name[i], t->count[i]);
    return o;
}

static double rate(int k, int n) { return n > 0 ? (double)k / n : NAN; }

dk_status kg_audit_run(const kg_audit_config *c, const volatile sig_atomic_t *stop, int *passed) {
    *passed = 0;
    audit_item *items = NULL;
    int n = 0;
    dk_status st = read_corpus(c, c->hacks_dir, 0, &items, &n);
    if (st == DK_OK) st = read_corpus(c, c->honest_dir, 1, &items, &n);
    kg_job *jobs = dk_calloc((size_t)(n ? n : 1), sizeof *jobs);
    int *idx = dk_calloc((size_t)(n ? n : 1), sizeof *idx);
    int nj = 0;
    const int cpu = strcmp(c->device, "cuda") != 0;
    for (int i = 0; i < n && st == DK_OK; i++) {
        if (items[i].skipped) continue;
        kg_job_init(&jobs[nj]);
        jobs[nj].task_source = items[i].task_src;
        jobs[nj].candidate_source = items[i].cand_src;
        jobs[nj].task_name = items[i].name;
        jobs[nj].device = c->device;
        jobs[nj].opt = c->opt;
        char *o = header(items[i].cand_src, "options");
        if (o && o[0]) st = apply_options(items[i].path, "options", o, &jobs[nj].opt);
        free(o);
        o = cpu ? header(items[i].cand_src, "options-cpu") : NULL;
        if (st == DK_OK && o && o[0]) st = apply_options(items[i].path, "options-cpu", o, &jobs[nj].opt);
        free(o);
        idx[nj++] = i;
    }
    kg_result *res = dk_calloc((size_t)(nj ? nj : 1), sizeof *res);
    int n_done = 0;
    if (st == DK_OK) st = kg_jobs_evaluate(&c->where, jobs, nj, res, c->wait_s, stop, "kernelgym audit", &n_done);
    if (st == DK_OK) {
        for (int k = 0; k < nj; k++) {
            items[idx[k]].result = res[k];
            kg_result_init(&res[k]);
        }
        int hacks = 0, caught = 0, honest = 0, rejected = 0, skipped = 0, expected_hit = 0;
        tally reasons = {0}, missed = {0}, honest_status = {0};
        printf("%-48s %-7s %-14s %s\n", "candidate", "corpus", "verdict", "reasons (expected)");
        for (int i = 0; i < n; i++) {
            audit_item *it = &items[i];
            kg_result *r = &it->result;
            if (it->skipped) {
                skipped++;
                printf("%-48s %-7s %-14s\n", it->name, it->honest ? "honest" : "hacks", "skipped (gpu)");
                continue;
            }
            const char *verdict = r->hack ? "hack" : kg_status_name(r->status);
            printf("%-48s %-7s %-14s", it->name, it->honest ? "honest" : "hacks", verdict);
            for (int k = 0; k < r->n_hack_reasons; k++) printf("%s%s", k ? ", " : "", r->hack_reasons[k]);
            if (it->expect[0]) printf(" (%s)", it->expect);
            printf("\n");
            if (it->honest) {
                honest++;
                if (!kg_result_passed(r)) {
                    rejected++;
                    tally_add(&honest_status, verdict);
                }
            } else {
                hacks++;
                if (r->hack) {
                    caught++;
                    for (int k = 0; k < r->n_hack_reasons; k++) {
                        tally_add(&reasons, r->hack_reasons[k]);
                        if (it->expect[0] && !strcmp(r->hack_reasons[k], it->expect)) expected_hit++;
                    }
                } else tally_add(&missed, verdict);
            }
        }
        double catch_rate = rate(caught, hacks), fp_rate = rate(rejected, honest);
        printf("\nhacks caught:     %d/%d = %.1f%% (recipe: %.1f%%), %d for the expected reason\n", caught, hacks,
               100.0 * catch_rate, 100.0 * KG_AUDIT_RECIPE_CATCH, expected_hit);
        printf("false positives:  %d/%d = %.1f%% of honest candidates rejected (recipe: under %.1f%%)\n", rejected,
               honest, 100.0 * fp_rate, 100.0 * KG_AUDIT_RECIPE_FP);
        if (skipped) printf("skipped:          %d (kg-gpu-only, device %s)\n", skipped, c->device);
        printf("caught by reason:");
        for (int i = 0; i < reasons.n; i++) printf(" %s=%d", reasons.name[i], reasons.count[i]);
        printf("\n");
        if (missed.n) {
            printf("hacks not caught, by verdict:");
            for (int i = 0; i < missed.n; i++) printf(" %s=%d", missed.name[i], missed.count[i]);
            printf("\n");
        }
        if (honest_status.n) {
            printf("honest rejected, by verdict:");
            for (int i = 0; i < honest_status.n; i++) printf(" %s=%d", honest_status.name[i], honest_status.count[i]);
            printf("\n");
        }
        /* An empty corpus proves nothing: it fails the thresholds. */
        *passed = hacks > 0 && honest > 0 && catch_rate >= c->min_catch && fp_rate <= c->max_fp;
        printf("audit: %s (--min-catch %g, --max-fp %g)\n", *passed ? "PASS" : "FAIL", c->min_catch, c->max_fp);
        fflush(stdout);
        if (c->json_out) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "device", c->device);
            cJSON_AddNumberToObject(j, "hacks", hacks);
            cJSON_AddNumberToObject(j, "caught", caught);
            cJSON_AddNumberToObject(j, "caught_expected_reason", expected_hit);
            cJSON_AddNumberToObject(j, "honest", honest);
            cJSON_AddNumberToObject(j, "honest_rejected", rejected);
            cJSON_AddNumberToObject(j, "skipped", skipped);
            cJSON_AddNumberToObject(j, "catch_rate", isfinite(catch_rate) ? catch_rate : 0);
            cJSON_AddNumberToObject(j, "false_positive_rate", isfinite(fp_rate) ? fp_rate : 1);
            cJSON_AddNumberToObject(j, "recipe_catch_rate", KG_AUDIT_RECIPE_CATCH);
            cJSON_AddNumberToObject(j, "recipe_false_positive_rate", KG_AUDIT_RECIPE_FP);
            cJSON_AddItemToObject(j, "caught_by_reason", tally_json(&reasons));
            cJSON_AddItemToObject(j, "missed_by_verdict", tally_json(&missed));
            cJSON_AddItemToObject(j, "honest_rejected_by_verdict", tally_json(&honest_status));
            cJSON_AddBoolToObject(j, "passed", *passed);
            char *s = cJSON_Print(j);
            st = dk_write_file(c->json_out, s, strlen(s));
            free(s);
            cJSON_Delete(j);
        }
    }
    for (int k = 0; k < nj; k++) kg_result_free(&res[k]);
    free(res);
    free(jobs);
    free(idx);
    free_items(items, n);
    return st;
}
