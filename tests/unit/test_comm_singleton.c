/* test_comm_singleton.c: many runs started without a launcher at once (what
 * ctest -j does with the trainer's tests) all get through MPI_Init. Each
 * singleton keeps its MPI session files under a base of its own,
 * <TMPDIR>/drkernel-mpi.<uid>/<pid>, gone when it finishes; a base left by a
 * process killed with -9 is swept by the next singleton to start. Without
 * the private base, singletons share one session directory and one
 * finishing removes it under another starting (a failed MPI_Init). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include "common/util.h"
#include "dist/comm.h"
#include "tests/check.h"

enum { WORKERS = 8, ROUNDS = 25 };

static char root[512];

static void base_of(pid_t pid, char *out, size_t n) { snprintf(out, n, "%s/%ld", root, (long)pid); }

/* Open MPI 4 (ORTE) writes its session tree under the base; 5 keeps none there. */
static int holds_session(const char *base) {
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
    DIR *d = opendir(base);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) found |= !strncmp(e->d_name, "ompi.", 5);
    closedir(d);
    return found;
#else
    return dk_dir_exists(base);
#endif
}

/* One singleton: launch, check its world and its base, finish. Exit codes
 * name what went wrong (MPI_Init failing exits on its own). */
static int child_run(int hold_fd) {
    comm_launch(NULL, NULL);
    comm_place at = comm_where();
    if (at.world != 1 || at.rank != 0) return 10;
    char base[600];
    base_of(getpid(), base, sizeof base);
    if (!holds_session(base)) return 11;
    if (hold_fd >= 0) { /* tell the parent we are up, then wait for kill -9 */
        if (write(hold_fd, "u", 1) != 1) return 12;
        pause();
    }
    comm_finish();
    if (dk_dir_exists(base)) return 13;
    return 0;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

int main(void) {
    char tmpl[] = "/tmp/dk_singleton_XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("TMPDIR", tmpl, 1);
    const char *launch_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD",
                                 "OMPI_MCA_orte_tmpdir_base"};
    for (size_t i = 0; i < sizeof launch_vars / sizeof launch_vars[0]; i++) unsetenv(launch_vars[i]);
    snprintf(root, sizeof root, "%s/drkernel-mpi.%u", tmpl, (unsigned)getuid());

    /* A base left by a process that is gone: a child that exited at once. */
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    char stale[600], stale_file[700];
    base_of(gone, stale, sizeof stale);
    CHECK(dk_mkdirs(stale) == DK_OK, "mkdir %s", stale);
    snprintf(stale_file, sizeof stale_file, "%s/left", stale);
    CHECK(dk_write_file(stale_file, "x", 1) == DK_OK, "write %s", stale_file);

    /* WORKERS at once, each starting ROUNDS singletons one after another. */
    int bad[16] = {0};
    pid_t workers[WORKERS];
    int pipes[WORKERS][2];
    for (int w = 0; w < WORKERS; w++) {
        if (pipe(pipes[w]) != 0) return 1;
        workers[w] = fork();
        if (workers[w] == 0) {
            close(pipes[w][0]);
            unsigned char codes[ROUNDS];
            for (int r = 0; r < ROUNDS; r++) {
                pid_t c = fork();
                if (c == 0) _exit(child_run(-1));
                int st = 0;
                waitpid(c, &st, 0);
                codes[r] = WIFEXITED(st) ? (unsigned char)WEXITSTATUS(st) : 255;
            }
            _exit(write(pipes[w][1], codes, sizeof codes) == (ssize_t)sizeof codes ? 0 : 1);
        }
        close(pipes[w][1]);
    }
    int runs = 0;
    for (int w = 0; w < WORKERS; w++) {
        unsigned char codes[ROUNDS];
        ssize_t got = read(pipes[w][0], codes, sizeof codes);
        close(pipes[w][0]);
        waitpid(workers[w], NULL, 0);
        CHECK(got == (ssize_t)sizeof codes, "worker %d reported %zd codes", w, got);
        for (ssize_t r = 0; r < got; r++) {
            runs++;
            if (codes[r]) bad[codes[r] < 16 ? codes[r] : 15]++;
        }
    }
    int failed = 0;
    for (int k = 0; k < 16; k++) failed += bad[k];
    CHECK(failed == 0, "%d of %d singleton runs failed (code 10 world, 11 no private base, 13 base left, "
                       "other: MPI_Init): 10:%d 11:%d 13:%d other:%d", failed, runs, bad[10], bad[11], bad[13],
          failed - bad[10] - bad[11] - bad[13]);
    CHECK(!dk_dir_exists(stale), "the base of a dead process, %s, was not swept", stale);

    /* kill -9 after launch leaves the base; the next singleton sweeps it. */
    int up[2];
    if (pipe(up) != 0) return 1;
    pid_t victim = fork();
    if (victim == 0) {
        close(up[0]);
        _exit(child_run(up[1]));
    }
    close(up[1]);
    char c = 0;
    CHECK(read(up[0], &c, 1) == 1, "the held singleton never came up");
    close(up[0]);
    char vbase[600];
    base_of(victim, vbase, sizeof vbase);
    CHECK(dk_dir_exists(vbase), "a live singleton's base %s is missing", vbase);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    CHECK(dk_dir_exists(vbase), "the killed singleton's base %s should outlive it", vbase);
    pid_t next = fork();
    if (next == 0) _exit(child_run(-1));
    int st = 0;
    waitpid(next, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the singleton after the kill failed (status %d)", st);
    CHECK(!dk_dir_exists(vbase), "the killed singleton's base %s was not swept", vbase);
    CHECK(count_entries(root) == 0, "%d bases left under %s", count_entries(root), root);
    if (!failures) printf("%d singleton runs, %d at a time: all launched; dead bases swept\n", runs + 1, WORKERS);

    dk_remove_tree(tmpl);
    return check_report();
}
