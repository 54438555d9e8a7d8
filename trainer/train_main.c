/* train_main.c: the `train` program: train CONFIG.ini [section.key=value ...].
 * Loads and prints the resolved config, saves it to the run directory, and
 * runs the configured mode. Exit codes: 0 ok, 2 usage or config error, 1
 * runtime error; every error message names its culprit.
 *
 * `mpirun -np N ./train CONFIG` runs N ranks of one job (a plain ./train is
 * world 1). Only rank 0 prints, writes the config snapshot and the metrics;
 * the other ranks' standard output goes to /dev/null (their errors still
 * reach stderr). A runtime error on any rank ends every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm.h"
#include "trainer/config.h"
#include "trainer/eval_run.h"
#include "trainer/rl_run.h"
#include "trainer/sft.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: train CONFIG.ini [section.key=value ...]\n"
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
    comm_launch(&argc, &argv);
    const comm_place at = comm_where();
    if (at.rank != 0 && !freopen("/dev/null", "w", stdout)) return config_error(DK_ERR_RUNTIME, at);
    static dk_config cfg;
    dk_status st = config_load(&cfg, argv[1], argc - 2, argv + 2);
    if (st != DK_OK) return config_error(st, at);
    if (at.world > 1 && cfg.run.mode == DK_MODE_EVAL)
        return config_error(dk_fail(DK_ERR_USAGE,
                                    "[run] mode = eval runs on one rank only (it is not data-parallel yet), but this "
                                    "job has %d ranks: start it without mpirun",
                                    at.world),
                            at);
    if (at.rank == 0) {
        config_print(&cfg, stdout);
        char path[DK_CONFIG_STR + 32];
        st = dk_mkdirs(cfg.run.dir);
        snprintf(path, sizeof path, "%s/config.ini", cfg.run.dir);
        if (st == DK_OK) st = config_save(&cfg, path);
        if (st != DK_OK) runtime_error(st, at);
    }
    switch (cfg.run.mode) {
    case DK_MODE_SFT: st = sft_run(&cfg); break;
    case DK_MODE_RL: st = rl_run(&cfg); break;
    case DK_MODE_EVAL: st = eval_run(&cfg); break;
    }
    if (st != DK_OK) runtime_error(st, at);
    comm_finish();
    return 0;
}
