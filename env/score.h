/* score.h: Fast@p over a folder of tasks and a folder of existing solutions
 * (`kernelgym score`). Tasks are the *.py files of the task folder
 * (KernelBench layout: level2/<id>_<Name>.py), listed and numbered as
 * data/task_dir.h lists a folder, the same listing the trainer's task set
 * uses. A solution is the file of the same name in the solutions folder,
 * else the one whose leading number equals the task's id ("19.py",
 * "19_mine.py"). Every task counts, so a missing or failing solution is
 * simply not fast:
 *
 *   fast_p = #{tasks whose solution is correct (compiled, correct, no hack)
 *              and has speedup > p} / #tasks
 *
 * For p = 0 a correct solution counts even when timing is unavailable (CPU
 * mode): fast_0 is the correctness rate, as in KernelBench. For p > 0 the
 * speedup must have been measured. */
#ifndef KG_SCORE_H
#define KG_SCORE_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "env/result.h"

#define KG_FAST_P_COUNT 7
extern const double kg_fast_p_thresholds[KG_FAST_P_COUNT]; /* 0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0 */

typedef struct {
    char *task_path;
    char *task_name; /* file name without ".py" */
    long id;         /* leading number of the name, -1 when none */
    char *solution_path; /* NULL: no solution found */
    char *note;          /* why the match is doubtful ("2 solutions share id 19"), or "" */
    kg_result result;    /* KG_STATUS_PENDING when not evaluated */
} kg_score_item;

typedef struct {
    int n;
    kg_score_item *items;
    int n_solutions; /* tasks with a solution */
    double fast_p[KG_FAST_P_COUNT];
} kg_score_report;

/* Lists the tasks (sorted by id, then name) and matches their solutions.
 * Fails when a folder cannot be read or holds no task. */
dk_status kg_score_collect(const char *tasks_dir, const char *solutions_dir, kg_score_report *rep);
void kg_score_compute(kg_score_report *rep);
/* 1 when item i counts for threshold p. */
int kg_score_is_fast(const kg_result *r, double p);
void kg_score_print(const kg_score_report *rep, FILE *f);
cJSON *kg_score_to_json(const kg_score_report *rep, const char *tasks_dir, const char *solutions_dir);
void kg_score_free(kg_score_report *rep);

#endif
