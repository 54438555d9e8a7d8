/* preprocess.h: filtering cold-start trajectories into SFT data (the
 * `preprocess` program). The recipe (docs/DESIGN.md §9) keeps trajectories that
 * reach speedup >= 1.2 and fit in 8192 tokens.
 *
 * Input: every *.jsonl file of a folder (not recursive), one trajectory per
 * line:
 *   {"messages": [{"role": "system|user|assistant|tool", "content": "..."}, ...],
 *    "turns": [{"correct": true, "speedup": 1.4, "hack": false}, ...]}
 * "turns" holds one entry per assistant message, in order: the evaluation of
 * the kernel that message wrote.
 *   correct  (bool, required) compiled and matched the reference;
 *   speedup  (number >= 0, or null / absent when not measured) reference
 *            eager time over the kernel's time;
 *   hack     (bool, optional, false) a turn flagged as a hack never counts.
 * Other keys, in the record and in a turn, are ignored.
 *
 * A turn counts when it is correct, not a hack and has a measured speedup.
 * The trajectory's speedup is, with criterion
 *   best  (default) the largest over its counting turns: the trajectory shows
 *         the path to a kernel that fast, and later turns that tried for more
 *         still teach the feedback loop;
 *   final the last turn's, which must count: only trajectories that end on
 *         their fast kernel.
 * Each line gets the first outcome that applies, in this order:
 *   malformed          bad JSON, bad messages, "turns" missing or not one
 *                      per assistant message, a field of the wrong type;
 *   no_correct_turn    no counting turn (final: the last turn does not count);
 *   below_min_speedup  speedup < min_speedup;
 *   too_long           more than max_length tokens in the ChatML rendering
 *                      (the length data/sft_data.c measures); checked only
 *                      with a tokenizer;
 *   kept.
 * Kept lines are written as {"messages": [...]} to the output folder under
 * the input file's name; the report counts every outcome per file and keeps
 * the first malformed lines' messages (FILE:LINE: why). */
#ifndef DK_DATA_PREPROCESS_H
#define DK_DATA_PREPROCESS_H

#include <stdio.h>

#include "common/error.h"
#include "data/tokenizer.h"

typedef enum { PP_BEST = 0, PP_FINAL = 1 } pp_criterion;

typedef enum { PP_KEPT = 0, PP_MALFORMED, PP_NO_CORRECT, PP_SLOW, PP_TOO_LONG, PP_N_OUTCOMES } pp_outcome;

typedef struct {
    double min_speedup;     /* 1.2 */
    int max_length;         /* 8192 */
    pp_criterion criterion; /* best */
    tokenizer *tok;         /* NULL: no length filter */
} pp_options;

#define PP_MAX_EXAMPLES 3 /* malformed lines quoted per file */

typedef struct {
    char *name; /* file name within the input folder */
    long count[PP_N_OUTCOMES];
    long kept_tokens; /* tokens in the kept lines (0 without a tokenizer) */
    int n_examples;
    char *examples[PP_MAX_EXAMPLES]; /* "FILE:LINE: why" */
} pp_file_report;

typedef struct {
    int n_files;
    pp_file_report *files;
    long total[PP_N_OUTCOMES];
    long kept_tokens;
} pp_report;

void pp_options_default(pp_options *o);
const char *pp_outcome_name(pp_outcome o);
const char *pp_criterion_name(pp_criterion c);
dk_status pp_criterion_parse(const char *s, pp_criterion *out);

/* One line. When kept, *out (malloc'ed) is the SFT record without newline;
 * when malformed, why gets the reason. *n_tokens is the length when it was
 * measured, else -1. A tokenizer failure is returned as an error. */
dk_status pp_judge_line(const pp_options *o, const char *line, pp_outcome *outcome, char **out, int *n_tokens,
                        char *why, size_t why_len);

/* The whole folder: fails (naming the path) when a folder or file cannot be
 * read or written, when there is no *.jsonl input, or when input and output
 * are the same folder. */
dk_status pp_run(const pp_options *o, const char *input_dir, const char *output_dir, pp_report *rep);
void pp_report_print(const pp_report *rep, const pp_options *o, FILE *f);
dk_status pp_report_write_json(const pp_report *rep, const pp_options *o, const char *path);
void pp_report_free(pp_report *rep);

#endif
