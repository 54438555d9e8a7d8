/* task_dir.h: the entries of a KernelBench-style folder, sorted the way
 * tasks are numbered: the *.py task files of a level folder
 * (level2/19_Conv2d_ReLU_BiasAdd.py), or the levelN folders of a benchmark
 * folder. One listing for the task-set loader (tasks.c) and KernelGym's
 * scorer (env/score.c), so both see the same files in the same order.
 *
 * Names starting with '.' or '_' are never listed (__init__.py, editor
 * files). A file's leading number is the run of digits it starts with when a
 * '_', '.' or '-' follows ("19_Gemm.py", "19.py", "19-mine.py": 19; "v2.py",
 * "19x.py": none). Entries with a number come first, by number, then the
 * others; ties go by name. */
#ifndef DK_DATA_TASK_DIR_H
#define DK_DATA_TASK_DIR_H

#include "common/error.h"

typedef enum {
    TASK_DIR_FILES = 0, /* regular *.py files */
    TASK_DIR_LEVELS = 1 /* folders named levelN; num = N */
} task_dir_kind;

typedef struct {
    char *name; /* the entry's name, without the folder */
    long num;   /* the leading number (TASK_DIR_LEVELS: N), -1 when none */
} task_dir_entry;

/* Lists dir; *out gets *n entries (free with task_dir_free). Fails when the
 * folder cannot be read, naming it. */
dk_status task_dir_list(const char *dir, task_dir_kind kind, task_dir_entry **out, int *n);
void task_dir_free(task_dir_entry *e, int n);

/* The leading number of a file name as above, -1 when none. */
long task_dir_number(const char *name);
/* N of a folder named levelN ("level2" -> 2), -1 for any other name. */
long task_dir_level(const char *name);

#endif
