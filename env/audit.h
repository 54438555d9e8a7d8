/* audit.h: `kernelgym audit`, the catch-rate report (docs/DESIGN.md §11):
 * every candidate of a hack corpus and an honest corpus goes through the
 * normal evaluation path, and the report gives the share of hacks caught
 * (flagged as hacks), the share of honest candidates rejected (false
 * positives: any verdict but passed), and counts per hack reason and per
 * status. Candidates are paired with tasks the way tests/kernelgym/corpus.py
 * does: each file's header names its task,
 *
 *   # kg-task: NAME          tasks_dir/NAME.py
 *   # kg-task-gpu: NAME      on --device cuda, when it differs
 *   # kg-gpu-only            skipped (and counted as skipped) on the CPU
 *   # kg-options: {...}      job options (JSON); kg-options-cpu: extra on the CPU
 *   # kg-expect: REASON      the reason a hack should be caught for (shown)
 *
 * and the run fails (exit 1) when the catch rate is below min_catch or the
 * false-positive rate above max_fp. */
#ifndef KG_AUDIT_H
#define KG_AUDIT_H

#include <signal.h>

#include "common/error.h"
#include "env/score_cmd.h"

typedef struct {
    const char *hacks_dir, *honest_dir;
    const char *tasks_dir; /* NULL: the folder "tasks" next to hacks_dir */
    const char *device;    /* "cpu" | "cuda": picks kg-task-gpu, kg-gpu-only, kg-options-cpu */
    kg_jobs_where where;
    kg_job_options opt; /* every job's options before its header's */
    double wait_s;
    double min_catch, max_fp; /* thresholds in [0, 1] */
    const char *json_out;     /* also write the report as JSON (NULL: no file) */
} kg_audit_config;

/* The recipe's published numbers, printed next to ours for reference. */
#define KG_AUDIT_RECIPE_CATCH 0.987
#define KG_AUDIT_RECIPE_FP 0.003

/* Runs the audit and prints the report on stdout. *passed is 1 when both
 * thresholds hold. Fails (naming the file and header key) on an unreadable
 * corpus, a candidate without kg-task, a missing task or bad kg-options. */
dk_status kg_audit_run(const kg_audit_config *c, const volatile sig_atomic_t *stop, int *passed);

#endif
