/* train_main.c: the `train` program: train CONFIG.ini [section.key=value ...].
 * Loads and prints the resolved config, takes the run directory's lock
 * (run_lock.h) and runs the configured mode; SFT and RL save the config to
 * the run directory once they know where they start (run_begin.h).
 * `train --plan CONFIG` prints the per-GPU memory plan instead
 * (trainer/mem_plan.h) and exits 0 when it fits, 1 when not; it starts no
 * MPI and needs no GPU. Exit codes: 0 ok, 2 usage or config error, 1 runtime
 * error; every error message names its culprit.
 *
 * `mpirun -np N ./train CONFIG` runs N ranks of one job (a plain ./train is
 * world 1). Only rank 0 prints, holds the run directory's lock and writes the
 * config snapshot and the metrics; the other ranks' standard output goes to
 * /dev/null (their errors still reach stderr). A runtime error on any rank
 * ends every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm.h"
#include "trainer/config.h"
#include "trainer/eval_run.h"
#include "trainer/mem_plan.h"
#include "trainer/rl_run.h"
#include "trainer/run_lock.h"
#include "trainer/sft.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: train CONFIG.ini [section.key=value ...]\n"
            "       train --plan CONFIG.ini [section.key=value ...]   (per-GPU memory plan at dist.world)\n"
            "       train --describe-config   (every key, as Markdown)\n"
            "Runs SFT, RL or eval as [run] mode says; see configs/README.md.\n");
}

/* An error every rank meets alike (the config): rank 0 says it, every rank
 * leaves with its code. */
static int config_error(dk_status st, comm_place at) {
    if (at.rank == 0) fprintf(stderr, "train: %s\n", dk_error());
    comm_finish();
    return st;
}

/* An error of this rank alone: the whole job ends. */
static void runtime_error(dk_status st, comm_place at) {
    char msg[4200];
    snprintf(msg, sizeof msg, "train: %s", dk_error());
    if (at.world == 1) {
        fprintf(stderr, "%s\n", msg);
        comm_finish();
        exit(st);
    }
    comm_abort_job(st, msg);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return DK_ERR_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--describe-config")) {
        config_describe(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--plan")) {
        if (argc < 3) {
            usage(stderr);
            return DK_ERR_USAGE;
        }
        static dk_config plan_cfg;
        dk_status st = config_load(&plan_cfg, argv[2], argc - 3, argv + 3);
        if (st != DK_OK) {
            fprintf(stderr, "train: %s\n", dk_error());
            return st;
        }
        return mem_plan_command(&plan_cfg, stdout);
    }
    comm_launch(&argc, &argv);
    const comm_place at = comm_where();
    if (at.rank != 0 && !freopen("/dev/null", "w", stdout)) return config_error(DK_ERR_RUNTIME, at);
    static dk_config cfg;
    dk_status st = config_load(&cfg, argv[1], argc - 2, argv + 2);
    if (st != DK_OK) return config_error(st, at);
    run_lock lock;
    if (at.rank == 0) {
        config_print(&cfg, stdout);
        /* dist.world is what `--plan` plans for (a recipe's GPU count); the
         * run's own world is the launcher's. Say so when they differ, so a
         * plan read earlier is not taken for this run's. */
        if (cfg.dist.world > 0 && cfg.dist.world != at.world)
            printf("note: dist.world = %d is the world `train --plan` plans for; this run has %d rank(s), and the "
                   "memory check at start plans for %d\n",
                   cfg.dist.world, at.world, at.world);
        st = run_lock_acquire(cfg.run.dir, &lock);
        if (st != DK_OK) runtime_error(st, at);
    }
    char path[DK_CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.ini", cfg.run.dir);
    switch (cfg.run.mode) {
    case DK_MODE_SFT: st = sft_run(&cfg); break;
    case DK_MODE_RL: st = rl_run(&cfg); break;
    case DK_MODE_EVAL:
        st = at.rank == 0 ? config_save(&cfg, path) : DK_OK; /* rank 0 writes the run's files */
        if (st == DK_OK) st = eval_run(&cfg);
        break;
    }
    if (at.rank == 0) run_lock_release(&lock);
    if (st != DK_OK) runtime_error(st, at);
    comm_finish();
    return 0;
}
