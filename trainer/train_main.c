/* train_main.c: the `train` program: train CONFIG.ini [section.key=value ...].
 * Loads and prints the resolved config, takes the run directory's lock
 * (run_lock.h) and runs the configured mode; SFT and RL save the config to
 * the run directory once they know where they start (run_begin.h).
 * `train --plan CONFIG` prints the per-GPU memory plan instead
 * (trainer/mem_plan.h) and exits 0 when it fits, 1 when not. Exit codes: 0
 * ok, 2 usage or config error, 1 runtime error; every error message names
 * its culprit. */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
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
    const int plan = !strcmp(argv[1], "--plan");
    if (plan && argc < 3) {
        usage(stderr);
        return DK_ERR_USAGE;
    }
    static dk_config cfg;
    dk_status st = config_load(&cfg, argv[1 + plan], argc - 2 - plan, argv + 2 + plan);
    if (st != DK_OK) {
        fprintf(stderr, "train: %s\n", dk_error());
        return st;
    }
    if (plan) return mem_plan_command(&cfg, stdout);
    config_print(&cfg, stdout);
    run_lock lock;
    st = run_lock_acquire(cfg.run.dir, &lock);
    if (st != DK_OK) {
        fprintf(stderr, "train: %s\n", dk_error());
        return st;
    }
    char path[DK_CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.ini", cfg.run.dir);
    switch (cfg.run.mode) {
    case DK_MODE_SFT: st = sft_run(&cfg); break;
    case DK_MODE_RL: st = rl_run(&cfg); break;
    case DK_MODE_EVAL:
        st = config_save(&cfg, path);
        if (st == DK_OK) st = eval_run(&cfg);
        break;
    }
    run_lock_release(&lock);
    if (st != DK_OK) {
        fprintf(stderr, "train: %s\n", dk_error());
        return st;
    }
    return 0;
}
