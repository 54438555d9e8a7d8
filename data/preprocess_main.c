/* preprocess_main.c: the `preprocess` program. Filters a folder of cold-start
 * trajectories (JSONL with per-turn speedup metadata, see data/preprocess.h)
 * by speedup and token length, writes the kept ones as SFT JSONL and reports
 * what it dropped and why, on stdout and in OUTPUT_DIR/preprocess_report.json.
 * Exit codes: 0 done, 1 runtime error or nothing kept, 2 usage error. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/preprocess.h"
#include "data/tokenizer.h"

static const char usage[] =
    "usage: preprocess --input_dir DIR --output_dir DIR [--min_speedup 1.2] [--max_length 8192]\n"
    "                  [--tokenizer PATH] [--criterion best|final]\n"
    "  --input_dir    folder of *.jsonl trajectories: {\"messages\": [...], \"turns\": [{\"correct\", \"speedup\"}, ...]}\n"
    "  --output_dir   where the kept trajectories go, as {\"messages\": [...]} under the same file names\n"
    "  --min_speedup  keep a trajectory whose speedup (see --criterion) is >= this (1.2)\n"
    "  --max_length   keep a trajectory of at most this many tokens in the chat template (8192)\n"
    "  --tokenizer    tokenizer.json, tokenizer.model or a checkpoint folder; without it the\n"
    "                 length is not checked\n"
    "  --criterion    best: the fastest correct turn (default); final: the last turn, which must be correct\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "preprocess: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == 0;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *tok_path = NULL;
    pp_options o;
    pp_options_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("'%s' needs a value", a);
        const char *v = argv[++i];
        double d;
        if (strcmp(a, "--input_dir") == 0) in = v;
        else if (strcmp(a, "--output_dir") == 0) out = v;
        else if (strcmp(a, "--tokenizer") == 0) tok_path = v;
        else if (strcmp(a, "--min_speedup") == 0) {
            if (!parse_double(v, &o.min_speedup) || !(o.min_speedup >= 0))
                return usage_error("--min_speedup '%s' is not a number >= 0", v);
        } else if (strcmp(a, "--max_length") == 0) {
            if (!parse_double(v, &d) || d != (int)d || d < 1 || d > INT_MAX)
                return usage_error("--max_length '%s' is not a positive integer", v);
            o.max_length = (int)d;
        } else if (strcmp(a, "--criterion") == 0) {
            if (pp_criterion_parse(v, &o.criterion) != DK_OK) return usage_error("%s", dk_error());
        } else return usage_error("unknown option '%s'", a);
    }
    if (!in || !out) return usage_error("%s", "--input_dir and --output_dir are required");

    if (tok_path && tokenizer_load(tok_path, &o.tok) != DK_OK) {
        fprintf(stderr, "preprocess: %s\n", dk_error());
        return 1;
    }
    pp_report rep;
    dk_status st = pp_run(&o, in, out, &rep);
    if (st != DK_OK) {
        fprintf(stderr, "preprocess: %s\n", dk_error());
        if (o.tok) tokenizer_free(o.tok);
        return st == DK_ERR_USAGE ? 2 : 1;
    }
    pp_report_print(&rep, &o, stdout);
    size_t np = strlen(out) + 32;
    char *path = malloc(np);
    snprintf(path, np, "%s/preprocess_report.json", out);
    st = pp_report_write_json(&rep, &o, path);
    int rc = 0;
    if (st != DK_OK) {
        fprintf(stderr, "preprocess: %s\n", dk_error());
        rc = 1;
    } else {
        printf("wrote the kept trajectories to %s/ and the report to %s\n", out, path);
    }
    if (rc == 0 && rep.total[PP_KEPT] == 0) {
        fprintf(stderr, "preprocess: no trajectory was kept; check --min_speedup, --max_length and the input format\n");
        rc = 1;
    }
    free(path);
    pp_report_free(&rep);
    if (o.tok) tokenizer_free(o.tok);
    return rc;
}
