/* test_tasks.c: the task set loader (data/tasks.c) on tests/fixtures/tasks/:
 * a KernelBench-style parent folder (level1/, level2/) and a level folder
 * given directly (ids from the numeric prefix, numeric order, names, sources
 * byte for byte, a task without get_inputs skipped and reported, __init__.py
 * ignored), the level filter, a JSONL file (integer and string ids, defaults,
 * a skipped line named by file:line); and errors that name the file and line:
 * bad JSON, missing or mistyped fields, duplicate ids, empty folders; and
 * that the scorer (env/score.c) lists a folder exactly as the loader does. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "data/task_dir.h"
#include "data/tasks.h"
#include "env/score.h"
#include "tests/check.h"

static char root[4096];

static const char *fx(const char *rel) {
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/tests/fixtures/tasks%s%s", root, *rel ? "/" : "", rel);
    return buf[k];
}

static void expect_task(const task_set *ts, int i, const char *id, const char *name, int level, const char *file) {
    if (i >= ts->n) {
        CHECK(0, "task %d missing (only %d)", i, ts->n);
        return;
    }
    const task_entry *t = &ts->tasks[i];
    CHECK(strcmp(t->id, id) == 0 && strcmp(t->name, name) == 0 && t->level == level,
          "task %d: id '%s' name '%s' level %d, expected '%s' '%s' %d", i, t->id, t->name, t->level, id, name, level);
    if (file) {
        char *src;
        if (dk_read_file(fx(file), &src, NULL) == DK_OK) {
            CHECK(strcmp(src, t->source) == 0, "task %d: source differs from %s", i, file);
            free(src);
        }
        CHECK(strstr(t->origin, file) != NULL, "task %d: origin '%s'", i, t->origin);
    }
}

static void check_folders(void) {
    task_set ts;
    CHECK(task_set_load(fx(""), 0, &ts) == DK_OK, "parent folder: %s", dk_error());
    CHECK(ts.n == 4, "parent folder: %d tasks", ts.n);
    expect_task(&ts, 0, "3", "Tanh", 1, "level1/3_Tanh.py");
    expect_task(&ts, 1, "1", "Linear_ReLU", 2, "level2/1_Linear_ReLU.py");
    expect_task(&ts, 2, "2", "Conv2d_Scale_Clamp", 2, "level2/2_Conv2d_Scale_Clamp.py");
    expect_task(&ts, 3, "10", "Sum_Softplus", 2, "level2/10_Sum_Softplus.py");
    CHECK(ts.n_skipped == 1 && strstr(ts.skipped[0].origin, "5_Missing_Inputs.py") &&
              strstr(ts.skipped[0].reason, "get_inputs"),
          "skipped: %d", ts.n_skipped);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    task_set_print_summary(&ts, "KB", f);
    fclose(f);
    CHECK(strstr(text, "loaded 4 tasks from KB (level 1: 1, level 2: 3)") &&
              strstr(text, "WARNING: skipped 1 task") && strstr(text, "5_Missing_Inputs.py: no module-level `def get_inputs`"),
          "summary:\n%s", text);
    printf("tasks summary:\n%s", text);
    free(text);
    task_set_free(&ts);

    CHECK(task_set_load(fx(""), 2, &ts) == DK_OK && ts.n == 3 && ts.tasks[0].level == 2, "level 2 of the parent");
    task_set_free(&ts);
    CHECK(task_set_load(fx(""), 3, &ts) == DK_ERR_RUNTIME && strstr(dk_error(), "no level3 folder"), "level 3: %s",
          dk_error());
    CHECK(task_set_load(fx("level2"), 0, &ts) == DK_OK && ts.n == 3 && ts.n_skipped == 1, "level folder: %s",
          dk_error());
    expect_task(&ts, 2, "10", "Sum_Softplus", 2, "level2/10_Sum_Softplus.py");
    task_set_free(&ts);
    CHECK(task_set_load(fx("level2"), 1, &ts) == DK_ERR_USAGE && strstr(dk_error(), "level 2 folder"),
          "level folder, wrong level: %s", dk_error());
}

static void check_jsonl(void) {
    task_set ts;
    CHECK(task_set_load(fx("tasks.jsonl"), 0, &ts) == DK_OK, "jsonl: %s", dk_error());
    CHECK(ts.n == 3, "jsonl: %d tasks", ts.n);
    expect_task(&ts, 0, "7", "Scale", 2, NULL);
    expect_task(&ts, 1, "abs-1", "Abs_Scale", 1, NULL);
    expect_task(&ts, 2, "9", "9", 0, NULL);
    CHECK(ts.n && strstr(ts.tasks[0].source, "return x * self.factor\n") && strstr(ts.tasks[2].origin, "tasks.jsonl:5"),
          "jsonl source/origin");
    CHECK(ts.n_skipped == 1 && strstr(ts.skipped[0].origin, "tasks.jsonl:4") && strstr(ts.skipped[0].reason, "Model"),
          "jsonl skipped");
    task_set_free(&ts);
    CHECK(task_set_load(fx("tasks.jsonl"), 2, &ts) == DK_OK && ts.n == 1 && strcmp(ts.tasks[0].id, "7") == 0,
          "jsonl level 2");
    task_set_free(&ts);
}

static const char good[] = "class Model:\\n    pass\\ndef get_inputs():\\n    return []\\ndef get_init_inputs():\\n    return []\\n";

/* Writes text to DIR/name and expects loading it to fail with all of the
 * given fragments in the message. */
static void expect_error(const char *dir, const char *name, const char *text, const char *frag1, const char *frag2) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dk_write_file(path, text, strlen(text));
    task_set ts;
    dk_status s = task_set_load(path, 0, &ts);
    CHECK(s != DK_OK && strstr(dk_error(), frag1) && (!frag2 || strstr(dk_error(), frag2)), "%s: %s", name,
          s ? dk_error() : "loaded");
    if (s == DK_OK) task_set_free(&ts);
    unlink(path);
}

static void check_errors(void) {
    char dir[] = "/tmp/dk_tasks_XXXXXX";
    if (!mkdtemp(dir)) return;
    char line[1024];
    snprintf(line, sizeof line, "{\"id\": 1, \"source\": \"%s\"}\n{\"id\": 2, \"source\": \"%s\"\n", good, good);
    expect_error(dir, "bad_json.jsonl", line, "bad_json.jsonl:2", "not a JSON object");
    expect_error(dir, "no_source.jsonl", "\n{\"id\": 1, \"name\": \"x\"}\n", "no_source.jsonl:2", "\"source\"");
    snprintf(line, sizeof line, "{\"id\": 1, \"level\": \"two\", \"source\": \"%s\"}\n", good);
    expect_error(dir, "bad_level.jsonl", line, "bad_level.jsonl:1", "\"level\"");
    snprintf(line, sizeof line, "{\"id\": 1.5, \"source\": \"%s\"}\n", good);
    expect_error(dir, "bad_id.jsonl", line, "bad_id.jsonl:1", "\"id\"");
    snprintf(line, sizeof line, "{\"id\": 4, \"source\": \"%s\"}\n{\"id\": \"4\", \"source\": \"%s\"}\n", good, good);
    expect_error(dir, "dup.jsonl", line, "dup.jsonl:2: task id '4'", "dup.jsonl:1");
    expect_error(dir, "all_skipped.jsonl", "{\"id\": 1, \"source\": \"x = 1\"}\n", "all 1 tasks were skipped",
                 "all_skipped.jsonl:1");
    expect_error(dir, "empty.jsonl", "\n\n", "empty.jsonl: no task", NULL);
    snprintf(line, sizeof line, "{\"id\": 1, \"reference_profile\": \"conv\", \"source\": \"%s\"}\n", good);
    expect_error(dir, "bad_profile.jsonl", line, "bad_profile.jsonl:1", "\"reference_profile\"");
    /* The optional reference profile is kept as compact JSON, on the right
     * task even when a task before it is skipped. */
    char path[4200];
    snprintf(path, sizeof path, "%s/profile.jsonl", dir);
    snprintf(line, sizeof line,
             "{\"id\": 1, \"source\": \"x = 1\", \"reference_profile\": [{\"name\": \"skipped\", \"share\": 1}]}\n"
             "{\"id\": 2, \"source\": \"%s\", \"reference_profile\": [ {\"name\": \"conv\", \"share\": 0.5} ]}\n"
             "{\"id\": 3, \"source\": \"%s\"}\n", good, good);
    dk_write_file(path, line, strlen(line));
    task_set ts;
    CHECK(task_set_load(path, 0, &ts) == DK_OK && ts.n == 2 && ts.tasks[0].reference_profile &&
              !strcmp(ts.tasks[0].reference_profile, "[{\"name\":\"conv\",\"share\":0.5}]") &&
              ts.tasks[1].reference_profile == NULL,
          "reference_profile: %s", ts.n ? ts.tasks[0].reference_profile : dk_error());
    task_set_free(&ts);
    unlink(path);
    CHECK(task_set_load("/nonexistent/tasks", 0, &ts) == DK_ERR_RUNTIME && strstr(dk_error(), "/nonexistent/tasks"),
          "missing path: %s", dk_error());
    CHECK(task_set_load(dir, 0, &ts) == DK_ERR_RUNTIME && strstr(dk_error(), "no task files"), "empty folder: %s",
          dk_error());
    /* Two files sharing an id; and a file without a numeric prefix. */
    char sub[4200], p1[4300], p2[4300];
    snprintf(sub, sizeof sub, "%s/level2", dir);
    dk_mkdirs(sub);
    const char src[] = "class Model:\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n";
    snprintf(p1, sizeof p1, "%s/19_A.py", sub);
    snprintf(p2, sizeof p2, "%s/19_B.py", sub);
    dk_write_file(p1, src, strlen(src));
    dk_write_file(p2, src, strlen(src));
    CHECK(task_set_load(dir, 0, &ts) == DK_ERR_RUNTIME && strstr(dk_error(), "19_B.py: task id '19'") &&
              strstr(dk_error(), "19_A.py"),
          "duplicate ids: %s", dk_error());
    unlink(p2);
    snprintf(p2, sizeof p2, "%s/relu.py", sub);
    dk_write_file(p2, src, strlen(src));
    CHECK(task_set_load(dir, 0, &ts) == DK_OK && ts.n == 2, "no prefix: %s", dk_error());
    expect_task(&ts, 1, "relu", "relu", 2, NULL);
    task_set_free(&ts);
    unlink(p1);
    unlink(p2);
    rmdir(sub);
    rmdir(dir);
    /* The source check looks at module-level lines only. */
    CHECK(task_source_problem("class ModelNew(nn.Module):\ndef get_inputs():\ndef get_init_inputs():\n") != NULL,
          "ModelNew is not Model");
    CHECK(task_source_problem("  class Model:\ndef get_inputs():\ndef get_init_inputs():\n") != NULL,
          "nested class Model");
    CHECK(task_source_problem("class Model :\r\ndef get_inputs ():\r\ndef get_init_inputs():\r\n") == NULL,
          "spaces and CRLF");
}

/* One folder, two readers: the task set (data/tasks.c) and KernelGym's
 * scorer (env/score.c) both list it through data/task_dir.c, so they see the
 * same files in the same order, by leading number ("7.py" and "3-b.py" are
 * numbered, "x.py" is not), without _-, .-prefixed, non-.py files or
 * folders. The expected order is written out by hand. */
static void check_one_listing(void) {
    char dir[] = "/tmp/dk_tasks_XXXXXX";
    if (!mkdtemp(dir)) return;
    const char src[] = "class Model:\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n";
    static const char *const files[] = {"10_A.py", "2_B.py", "x.py", "7.py", "3-b.py", "1_C.py",
                                        "_init.py", ".hidden.py", "notes.txt", "12x.py"};
    static const char *const want[] = {"1_C.py", "2_B.py", "3-b.py", "7.py", "10_A.py", "12x.py", "x.py"};
    static const char *const want_id[] = {"1", "2", "3-b", "7", "10", "12x", "x"};
    static const long want_num[] = {1, 2, 3, 7, 10, -1, -1};
    const int nw = 7;
    char p[4300];
    for (int i = 0; i < 10; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        dk_write_file(p, src, strlen(src));
    }
    snprintf(p, sizeof p, "%s/9_folder.py", dir);
    dk_mkdirs(p);

    task_dir_entry *e;
    int n;
    CHECK(task_dir_list(dir, TASK_DIR_FILES, &e, &n) == DK_OK && n == nw, "task_dir_list: %d entries (%s)", n,
          dk_error());
    for (int i = 0; i < n && i < nw; i++)
        CHECK(!strcmp(e[i].name, want[i]) && e[i].num == want_num[i], "entry %d: %s %ld, expected %s %ld", i,
              e[i].name, e[i].num, want[i], want_num[i]);
    task_dir_free(e, n);

    task_set ts;
    CHECK(task_set_load(dir, 0, &ts) == DK_OK && ts.n == nw, "task set: %d tasks (%s)", ts.n, dk_error());
    kg_score_report rep;
    CHECK(kg_score_collect(dir, dir, &rep) == DK_OK && rep.n == nw, "scorer: %d tasks (%s)", rep.n, dk_error());
    for (int i = 0; i < nw && i < ts.n && i < rep.n; i++) {
        char stem[64];
        snprintf(stem, sizeof stem, "%.*s", (int)strlen(want[i]) - 3, want[i]);
        CHECK(!strcmp(ts.tasks[i].id, want_id[i]) && strstr(ts.tasks[i].origin, want[i]),
              "task %d: id '%s' from %s, expected '%s' from %s", i, ts.tasks[i].id, ts.tasks[i].origin, want_id[i],
              want[i]);
        CHECK(!strcmp(rep.items[i].task_name, stem) && rep.items[i].id == want_num[i] &&
                  rep.items[i].solution_path && strstr(rep.items[i].solution_path, want[i]),
              "scorer item %d: %s id %ld, expected %s id %ld", i, rep.items[i].task_name, rep.items[i].id, stem,
              want_num[i]);
    }
    task_set_free(&ts);
    kg_score_free(&rep);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

int main(void) {
    const char *s = getenv("DK_SOURCE");
    snprintf(root, sizeof root, "%s", s ? s : ".");
    check_folders();
    check_jsonl();
    check_errors();
    check_one_listing();
    if (failures) fprintf(stderr, "%d failures\n", failures);
    else printf("tasks: folders, levels, JSONL and error messages as expected\n");
    return failures ? 1 : 0;
}
