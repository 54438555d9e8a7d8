/* preprocess.c: judging cold-start trajectories by speedup and token length,
 * writing the kept ones as SFT JSONL and reporting every drop (preprocess.h). */
#define _XOPEN_SOURCE 700 /* realpath, getline */
#include "data/preprocess.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "data/chat.h"

void pp_options_default(pp_options *o) {
    o->min_speedup = 1.2;
    o->max_length = 8192;
    o->criterion = PP_BEST;
    o->tok = NULL;
}

static const char *const outcome_names[PP_N_OUTCOMES] = {"kept", "malformed", "no_correct_turn", "below_min_speedup",
                                                         "too_long"};

const char *pp_outcome_name(pp_outcome o) {
    return (unsigned)o < PP_N_OUTCOMES ? outcome_names[o] : "?";
}

const char *pp_criterion_name(pp_criterion c) {
    return c == PP_FINAL ? "final" : "best";
}

dk_status pp_criterion_parse(const char *s, pp_criterion *out) {
    if (strcmp(s, "best") == 0) *out = PP_BEST;
    else if (strcmp(s, "final") == 0) *out = PP_FINAL;
    else return dk_fail(DK_ERR_USAGE, "unknown criterion '%s' (best|final)", s);
    return DK_OK;
}

static pp_outcome malformed(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pp_outcome malformed(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return PP_MALFORMED;
}

/* The trajectory's speedup per the criterion from its "turns" array (one per
 * assistant message); NAN when no turn counts. Returns PP_MALFORMED with why
 * set on a bad entry, PP_KEPT otherwise. */
static pp_outcome turns_speedup(const pp_options *o, const cJSON *turns, int n_assistant, double *speedup, char *why,
                                size_t why_len) {
    if (!cJSON_IsArray(turns)) return malformed(why, why_len, "\"turns\" is missing or not an array");
    int n = cJSON_GetArraySize(turns);
    if (n != n_assistant)
        return malformed(why, why_len, "\"turns\" has %d entries for %d assistant messages", n, n_assistant);
    *speedup = NAN;
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(turns, i);
        const cJSON *c = cJSON_GetObjectItem(t, "correct"), *s = cJSON_GetObjectItem(t, "speedup"),
                    *h = cJSON_GetObjectItem(t, "hack");
        if (!cJSON_IsObject(t)) return malformed(why, why_len, "turns[%d] is not an object", i);
        if (!cJSON_IsBool(c)) return malformed(why, why_len, "turns[%d].correct must be true or false", i);
        if (s && !cJSON_IsNull(s) && !(cJSON_IsNumber(s) && isfinite(s->valuedouble) && s->valuedouble >= 0))
            return malformed(why, why_len, "turns[%d].speedup must be a number >= 0 or null", i);
        if (h && !cJSON_IsBool(h)) return malformed(why, why_len, "turns[%d].hack must be true or false", i);
        int counts = cJSON_IsTrue(c) && !cJSON_IsTrue(h) && cJSON_IsNumber(s);
        double v = counts ? s->valuedouble : NAN;
        if (o->criterion == PP_FINAL) *speedup = v;
        else if (counts && !(v <= *speedup)) *speedup = v; /* max, NAN-aware */
    }
    return PP_KEPT;
}

dk_status pp_judge_line(const pp_options *o, const char *line, pp_outcome *outcome, char **out, int *n_tokens,
                        char *why, size_t why_len) {
    *out = NULL;
    *n_tokens = -1;
    why[0] = 0;
    cJSON *j = cJSON_Parse(line);
    chat_conversation conv = {0};
    dk_status st = DK_OK;
    if (!cJSON_IsObject(j)) {
        *outcome = malformed(why, why_len, "not a JSON object");
        goto done;
    }
    if (chat_parse_messages_json(line, &conv) != DK_OK) {
        *outcome = malformed(why, why_len, "%s", dk_error());
        dk_error_clear();
        goto done;
    }
    int n_assistant = 0;
    for (int i = 0; i < conv.n; i++) n_assistant += strcmp(conv.msgs[i].role, "assistant") == 0;
    if (n_assistant == 0) {
        *outcome = malformed(why, why_len, "no assistant message");
        goto done;
    }
    double speedup = NAN;
    *outcome = turns_speedup(o, cJSON_GetObjectItem(j, "turns"), n_assistant, &speedup, why, why_len);
    if (*outcome != PP_KEPT) goto done;
    if (isnan(speedup)) {
        *outcome = PP_NO_CORRECT;
        goto done;
    }
    if (speedup < o->min_speedup) {
        *outcome = PP_SLOW;
        goto done;
    }
    if (o->tok) {
        int32_t *ids;
        uint8_t *mask;
        st = chat_encode(o->tok, conv.msgs, conv.n, 0, &ids, &mask, n_tokens);
        if (st != DK_OK) goto done;
        free(ids);
        free(mask);
        if (*n_tokens > o->max_length) {
            *outcome = PP_TOO_LONG;
            goto done;
        }
    }
    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "messages"));
    size_t n = strlen(msgs) + 32;
    *out = dk_malloc(n);
    snprintf(*out, n, "{\"messages\": %s}", msgs);
    free(msgs);
done:
    chat_conversation_free(&conv);
    cJSON_Delete(j);
    return st;
}

/* ---- the folder ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static dk_status list_jsonl(const char *dir, char ***names, int *n) {
    DIR *d = opendir(dir);
    if (!d) return dk_fail(DK_ERR_RUNTIME, "%s: cannot read input folder: %s", dir, strerror(errno));
    *names = NULL;
    *n = 0;
    struct dirent *e;
    char full[PATH_MAX + 256];
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || len < 7 || strcmp(e->d_name + len - 6, ".jsonl") != 0 || !dk_file_exists(full))
            continue;
        *names = dk_realloc(*names, (size_t)(*n + 1) * sizeof **names);
        (*names)[(*n)++] = dk_strdup(e->d_name);
    }
    closedir(d);
    qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return DK_OK;
}

static dk_status run_file(const pp_options *o, const char *in, const char *out, pp_file_report *fr) {
    FILE *f = fopen(in, "r");
    if (!f) return dk_fail(DK_ERR_RUNTIME, "%s: cannot open: %s", in, strerror(errno));
    FILE *w = fopen(out, "w");
    if (!w) {
        fclose(f);
        return dk_fail(DK_ERR_RUNTIME, "%s: cannot write: %s", out, strerror(errno));
    }
    char *line = NULL, why[512];
    size_t cap = 0;
    int lineno = 0;
    dk_status st = DK_OK;
    while (st == DK_OK && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        pp_outcome oc;
        char *rec;
        int n_tok;
        st = pp_judge_line(o, line, &oc, &rec, &n_tok, why, sizeof why);
        if (st != DK_OK) {
            dk_wrap(st, "%s:%d: ", in, lineno);
            break;
        }
        fr->count[oc]++;
        if (oc == PP_KEPT) {
            fprintf(w, "%s\n", rec);
            if (n_tok > 0) fr->kept_tokens += n_tok;
            free(rec);
        } else if (oc == PP_MALFORMED && fr->n_examples < PP_MAX_EXAMPLES) {
            size_t n = strlen(in) + strlen(why) + 32;
            fr->examples[fr->n_examples] = dk_malloc(n);
            snprintf(fr->examples[fr->n_examples++], n, "%s:%d: %s", in, lineno, why);
        }
    }
    free(line);
    fclose(f);
    if (fclose(w) != 0 && st == DK_OK) st = dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", out, strerror(errno));
    return st;
}

dk_status pp_run(const pp_options *o, const char *input_dir, const char *output_dir, pp_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (!dk_dir_exists(input_dir)) return dk_fail(DK_ERR_RUNTIME, "%s: no such input folder", input_dir);
    DK_TRY(dk_mkdirs(output_dir));
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(input_dir, a) && realpath(output_dir, b) && strcmp(a, b) == 0)
        return dk_fail(DK_ERR_USAGE, "%s: the output folder is the input folder; the inputs would be overwritten",
                       output_dir);
    char **names = NULL;
    int n = 0;
    DK_TRY(list_jsonl(input_dir, &names, &n));
    dk_status st = n == 0 ? dk_fail(DK_ERR_RUNTIME, "%s: no *.jsonl files", input_dir) : DK_OK;
    if (st == DK_OK) rep->files = dk_calloc((size_t)n, sizeof *rep->files);
    char in[PATH_MAX + 256], out[PATH_MAX + 256];
    for (int i = 0; i < n && st == DK_OK; i++) {
        pp_file_report *fr = &rep->files[rep->n_files++];
        fr->name = dk_strdup(names[i]);
        snprintf(in, sizeof in, "%s/%s", input_dir, names[i]);
        snprintf(out, sizeof out, "%s/%s", output_dir, names[i]);
        st = run_file(o, in, out, fr);
        for (int k = 0; k < PP_N_OUTCOMES; k++) rep->total[k] += fr->count[k];
        rep->kept_tokens += fr->kept_tokens;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st != DK_OK) pp_report_free(rep);
    return st;
}

void pp_report_free(pp_report *rep) {
    for (int i = 0; i < rep->n_files; i++) {
        free(rep->files[i].name);
        for (int k = 0; k < rep->files[i].n_examples; k++) free(rep->files[i].examples[k]);
    }
    free(rep->files);
    memset(rep, 0, sizeof *rep);
}

/* ---- the report ------------------------------------------------------------------ */

static long records_of(const long *count) {
    long n = 0;
    for (int k = 0; k < PP_N_OUTCOMES; k++) n += count[k];
    return n;
}

void pp_report_print(const pp_report *rep, const pp_options *o, FILE *f) {
    long n = records_of(rep->total);
    fprintf(f, "preprocess: %d file%s, %ld trajectories: kept %ld, dropped %ld\n", rep->n_files,
            rep->n_files == 1 ? "" : "s", n, rep->total[PP_KEPT], n - rep->total[PP_KEPT]);
    char slow[96], long_[96];
    snprintf(slow, sizeof slow, "%s speedup < %g", pp_criterion_name(o->criterion), o->min_speedup);
    if (o->tok) snprintf(long_, sizeof long_, "> %d tokens", o->max_length);
    else snprintf(long_, sizeof long_, "not checked: no --tokenizer");
    const char *what[PP_N_OUTCOMES] = {"", "bad record, see below", o->criterion == PP_FINAL ? "final turn not correct" : "no correct turn", slow, long_};
    for (int k = 1; k < PP_N_OUTCOMES; k++)
        fprintf(f, "  dropped %-18s %6ld  (%s)\n", pp_outcome_name((pp_outcome)k), rep->total[k], what[k]);
    if (o->tok && rep->total[PP_KEPT])
        fprintf(f, "  kept tokens %ld (mean %.0f per trajectory)\n", rep->kept_tokens,
                (double)rep->kept_tokens / rep->total[PP_KEPT]);
    fprintf(f, "  %-28s %8s %7s %9s %10s %7s %8s\n", "file", "records", "kept", "malformed", "no_correct", "slow",
            "too_long");
    for (int i = 0; i < rep->n_files; i++) {
        const pp_file_report *r = &rep->files[i];
        fprintf(f, "  %-28s %8ld %7ld %9ld %10ld %7ld %8ld\n", r->name, records_of(r->count), r->count[PP_KEPT],
                r->count[PP_MALFORMED], r->count[PP_NO_CORRECT], r->count[PP_SLOW], r->count[PP_TOO_LONG]);
    }
    for (int i = 0; i < rep->n_files; i++)
        for (int k = 0; k < rep->files[i].n_examples; k++) fprintf(f, "  malformed: %s\n", rep->files[i].examples[k]);
}

static cJSON *counts_json(const long *count) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "records", (double)records_of(count));
    for (int k = 0; k < PP_N_OUTCOMES; k++) cJSON_AddNumberToObject(c, pp_outcome_name((pp_outcome)k), (double)count[k]);
    return c;
}

dk_status pp_report_write_json(const pp_report *rep, const pp_options *o, const char *path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "min_speedup", o->min_speedup);
    cJSON_AddNumberToObject(j, "max_length", o->max_length);
    cJSON_AddBoolToObject(j, "length_checked", o->tok != NULL);
    cJSON_AddStringToObject(j, "criterion", pp_criterion_name(o->criterion));
    cJSON_AddItemToObject(j, "total", counts_json(rep->total));
    cJSON_AddNumberToObject(j, "kept_tokens", (double)rep->kept_tokens);
    cJSON *files = cJSON_AddObjectToObject(j, "files");
    for (int i = 0; i < rep->n_files; i++) {
        cJSON *c = counts_json(rep->files[i].count);
        cJSON *ex = cJSON_AddArrayToObject(c, "malformed_examples");
        for (int k = 0; k < rep->files[i].n_examples; k++)
            cJSON_AddItemToArray(ex, cJSON_CreateString(rep->files[i].examples[k]));
        cJSON_AddItemToObject(files, rep->files[i].name, c);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    size_t n = strlen(text);
    text = dk_realloc(text, n + 2);
    text[n++] = '\n';
    dk_status st = dk_write_file(path, text, n);
    free(text);
    return st;
}
