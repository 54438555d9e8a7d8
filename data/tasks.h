/* tasks.h: the task set that RL rollouts and evals draw from: KernelBench-style
 * PyTorch programs (a `class Model`, `get_inputs()`, `get_init_inputs()`),
 * each to be rewritten as a faster `ModelNew`.
 *
 * Two sources (docs/DESIGN.md §15):
 *  - a JSONL file, one task per line: {"id", "name", "level", "source"}; id
 *    is a string or an integer, source is required, name defaults to the id,
 *    level to 0; other keys are ignored;
 *  - a KernelBench folder: level2/<id>_<Name>.py, id the numeric prefix,
 *    name the rest of the file name, source the file. Give the level folder
 *    itself (its level from its name "levelN", else 0) or its parent holding
 *    level1/, level2/, ... folders. Files starting with '_' or '.' are not
 *    tasks; a file without an `N_` prefix gets its whole stem as id and
 *    name. Folder tasks are sorted by level, then as task_dir.h lists a
 *    folder (leading number, then name).
 *
 * A task whose source lacks a module-level `class Model`, `def get_inputs` or
 * `def get_init_inputs` cannot be evaluated: it is skipped, not fatal, and
 * listed with its reason in `skipped` so the caller can say loudly how many
 * were left out (task_set_print_summary). Everything else that is wrong is an
 * error naming the file and line: bad JSON, a missing or mistyped field, two
 * tasks with the same (level, id), a folder with no task. */
#ifndef DK_DATA_TASKS_H
#define DK_DATA_TASKS_H

#include <stdio.h>

#include "common/error.h"

typedef struct {
    char *id;     /* "19" */
    char *name;   /* "Conv2d_ReLU_BiasAdd" */
    int level;    /* 0 when unknown */
    char *source; /* the reference program */
    char *origin; /* "DIR/level2/19_Conv2d_ReLU_BiasAdd.py" or "FILE.jsonl:7" */
    /* A tasks JSONL line's optional "reference_profile": the reference's
     * time per op, [{"name", "share"}], as KernelGym reports it in
     * docs/DESIGN.md §11; kept as compact JSON text for the first-turn
     * prompt, NULL when absent. */
    char *reference_profile;
} task_entry;

typedef struct {
    char *origin;
    char *reason;
} task_skip;

typedef struct {
    task_entry *tasks;
    int n;
    task_skip *skipped;
    int n_skipped;
} task_set;

/* path: a JSONL file or a folder as above. level > 0 keeps that level only
 * (a level folder of another level is an error); 0 keeps all. */
dk_status task_set_load(const char *path, int level, task_set *out);
void task_set_free(task_set *ts);

/* NULL when the source looks like a task, else why not (a static string). */
const char *task_source_problem(const char *source);

/* "loaded 12 tasks (level 2: 12) from PATH" and, when some were skipped, a
 * "WARNING: skipped 3 tasks" line with one line per skipped task. */
void task_set_print_summary(const task_set *ts, const char *path, FILE *f);

#endif
