/* kernelgym_main.c: the kernelgym program (docs/DESIGN.md §1, §10): evaluate one
 * candidate in-process (eval), run the static checks (check), serve a Redis
 * queue as a worker (worker) or as a local fleet (serve), send a job from the
 * command line (submit) and score a folder of solutions (score, whose
 * pipeline is env/score_cmd.c). This file reads the flags and dispatches;
 * library code reports errors, and this file alone decides what to print and
 * how to exit: 0 done (eval: whatever the verdict), 1 runtime failure, 2
 * usage error. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "env/audit.h"
#include "env/cli_args.h"
#include "env/client.h"
#include "env/fleet.h"
#include "env/proc_util.h"
#include "env/redis_conn.h"
#include "env/score_cmd.h"
#include "env/worker.h"

static const char *usage_text =
    "usage: kernelgym <command> [flags]\n"
    "\n"
    "commands:\n"
    "  eval    --task T.py --candidate C.py   evaluate one candidate here, no Redis;\n"
    "          prints the result JSON (exit 0 whatever the verdict)\n"
    "  check   --candidate C.py               static anti-hack checks only; prints JSON\n"
    "  worker  --redis URL [--name NAME] [--heartbeat S] [--lazy] [--result-ttl S]\n"
    "          one worker: takes jobs from the queue until SIGINT/SIGTERM; exits 1\n"
    "          when the gpu_check after a crash finds its GPU broken\n"
    "  serve   [--gpus LIST | --workers N] [--redis URL|auto]\n"
    "          Redis (auto: private, on a unix socket) plus one worker per GPU;\n"
    "          prints the Redis URL on stdout; SIGINT/SIGTERM stops everything\n"
    "  submit  --redis URL --task T.py --candidate C.py [--wait S]\n"
    "          [--kind eval|echo|sleep] [--payload TEXT] [--sleep S]\n"
    "          queues one job, waits for it, prints the result JSON; echo and sleep\n"
    "          jobs are done by the worker itself (queue tests, fleet health checks)\n"
    "  score   --tasks DIR --solutions DIR [--redis URL|auto] [--gpus LIST | --workers N]\n"
    "          [--json OUT] [--wait S]   Fast@p of a folder of solutions\n"
    "  audit   --hacks DIR --honest DIR [--tasks DIR] [--json OUT] [--wait S]\n"
    "          [--min-catch X] [--max-fp X]   catch rate over a hack corpus and\n"
    "          false-positive rate over an honest one; exit 1 past the thresholds\n"
    "\n"
    "job flags (eval, submit, score):\n"
    "  --timeout S  --trials N (timed trials)  --correct-trials N  --warmup N\n"
    "  --atol X  --rtol X  --reference eager|compile  --no-profile  --strict\n"
    "  --max-source-bytes N  --memory-gb G  --cpu-time S\n"
    "evaluation flags (eval, worker, serve, score):\n"
    "  --device auto|cpu|cuda  --gpu N  --reward profile|public  --alpha A  --cap C\n"
    "  --hack-penalty P  --unprofiled-coverage X  --max-error-chars N  --top-kernels N\n"
    "  --margin S (slack over --timeout before the server is killed)  --verbose\n"
    "\n"
    "Redis URLs: redis://[:password@]host:port[/db], unix:///path/to/sock?password=P,\n"
    "or auto. worker and submit read $KERNELGYM_REDIS when --redis is absent.\n"
    "A non-loopback redis:// URL without a password is refused unless --insecure\n"
    "(worker, serve, submit, score) is given.\n"
    "The harness times the eager reference beside each candidate; it caches\n"
    "compiled-reference timings per GPU model, and each candidate source's\n"
    "Triton kernels, under $DK_KG_CACHE.\n"
    "exit codes: 0 done, 1 runtime failure, 2 usage error\n";

static volatile sig_atomic_t g_stop = 0;
static void on_stop_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* No SA_RESTART: a poll() or sleep wakes up and the loops notice g_stop. */
static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int fail(dk_status st, const char *cmd) {
    fprintf(stderr, "%s: %s\n", cmd, dk_error());
    return st == DK_ERR_USAGE ? 2 : 1;
}

static int unknown_flag(const kg_args *a) {
    fprintf(stderr, "%s: unknown flag '%s' (kernelgym --help lists the flags)\n", a->cmd, a->argv[a->i]);
    return 2;
}

/* ---- flags shared by several commands ------------------------------------ */

typedef struct {
    kg_evaluator_config ev;
    kg_reward_formula formula;
    double alpha, cap, penalty, unprofiled;
    int alpha_set, cap_set, penalty_set, unprofiled_set;
} eval_flags;

static void eval_flags_init(eval_flags *f) {
    memset(f, 0, sizeof *f);
    kg_evaluator_config_default(&f->ev);
    f->formula = KG_REWARD_PROFILE;
}

/* 1: consumed, 0: not an evaluation flag, -1: error in *st. */
static int eval_flag(kg_args *a, eval_flags *f, dk_status *st) {
    const char *v;
    int m;
    *st = DK_OK;
    if ((m = kg_arg_value(a, "--device", &v, st))) {
        int d;
        if (m > 0 && (*st = kg_arg_enum(a, "--device", v, kg_device_names, KG_N_DEVICES, &d)) == DK_OK)
            snprintf(f->ev.device, sizeof f->ev.device, "%s", kg_device_names[d]);
    } else if ((m = kg_arg_value(a, "--gpu", &v, st))) {
        if (m > 0) *st = kg_arg_int(a, "--gpu", v, 0, 4095, &f->ev.gpu);
    } else if ((m = kg_arg_value(a, "--reward", &v, st))) {
        int r;
        if (m > 0 && (*st = kg_arg_enum(a, "--reward", v, kg_reward_formula_names, KG_N_REWARD_FORMULAS, &r)) == DK_OK)
            f->formula = (kg_reward_formula)r;
    } else if ((m = kg_arg_value(a, "--alpha", &v, st))) {
        if (m > 0) {
            *st = kg_arg_double(a, "--alpha", v, 0, 1, &f->alpha);
            f->alpha_set = 1;
        }
    } else if ((m = kg_arg_value(a, "--cap", &v, st))) {
        if (m > 0) {
            *st = kg_arg_double(a, "--cap", v, 1e-6, 1e9, &f->cap);
            f->cap_set = 1;
        }
    } else if ((m = kg_arg_value(a, "--hack-penalty", &v, st))) {
        if (m > 0) {
            *st = kg_arg_double(a, "--hack-penalty", v, -1e9, 1e9, &f->penalty);
            f->penalty_set = 1;
        }
    } else if ((m = kg_arg_value(a, "--unprofiled-coverage", &v, st))) {
        if (m > 0) {
            *st = kg_arg_double(a, "--unprofiled-coverage", v, 0, 1, &f->unprofiled);
            f->unprofiled_set = 1;
        }
    } else if ((m = kg_arg_value(a, "--max-error-chars", &v, st))) {
        if (m > 0) *st = kg_arg_int(a, "--max-error-chars", v, 100, 1000000, &f->ev.feedback.max_error_chars);
    } else if ((m = kg_arg_value(a, "--top-kernels", &v, st))) {
        if (m > 0) *st = kg_arg_int(a, "--top-kernels", v, 0, 100, &f->ev.feedback.top_kernels);
    } else if ((m = kg_arg_value(a, "--margin", &v, st))) {
        if (m > 0) *st = kg_arg_double(a, "--margin", v, 1, 86400, &f->ev.margin_s);
    } else if (kg_arg_switch(a, "--verbose")) {
        f->ev.verbose = 1;
        m = 1;
    }
    if (*st != DK_OK) return -1;
    return m;
}

static void eval_flags_finish(eval_flags *f) {
    kg_reward_config_default(&f->ev.reward, f->formula);
    if (f->alpha_set) f->ev.reward.alpha = f->alpha;
    if (f->cap_set) f->ev.reward.speedup_cap = f->cap;
    if (f->penalty_set) f->ev.reward.hack_penalty = f->penalty;
    if (f->unprofiled_set) f->ev.reward.unprofiled_coverage = f->unprofiled;
}

/* A job option's flag, checked against the option's range in env/job.c. */
static dk_status job_double(const kg_args *a, const char *flag, const char *v, const char *option, double *out) {
    const kg_job_option_range *r = kg_job_option_range_of(option);
    return kg_arg_double(a, flag, v, r->lo, r->hi, out);
}
static dk_status job_int(const kg_args *a, const char *flag, const char *v, const char *option, int *out) {
    const kg_job_option_range *r = kg_job_option_range_of(option);
    return kg_arg_int(a, flag, v, (long)r->lo, (long)r->hi, out);
}

static int job_flag(kg_args *a, kg_job_options *o, dk_status *st) {
    static const char *modes[] = {"eager", "compile", NULL};
    const char *v;
    int m;
    double d;
    *st = DK_OK;
    if ((m = kg_arg_value(a, "--timeout", &v, st))) {
        if (m > 0) *st = job_double(a, "--timeout", v, "timeout_s", &o->timeout_s);
    } else if ((m = kg_arg_value(a, "--trials", &v, st))) {
        if (m > 0) *st = job_int(a, "--trials", v, "perf_trials", &o->perf_trials);
    } else if ((m = kg_arg_value(a, "--correct-trials", &v, st))) {
        if (m > 0) *st = job_int(a, "--correct-trials", v, "correctness_trials", &o->correctness_trials);
    } else if ((m = kg_arg_value(a, "--warmup", &v, st))) {
        if (m > 0) *st = job_int(a, "--warmup", v, "warmup", &o->warmup);
    } else if ((m = kg_arg_value(a, "--atol", &v, st))) {
        if (m > 0) *st = kg_arg_double(a, "--atol", v, 0, 1e9, &o->atol);
    } else if ((m = kg_arg_value(a, "--rtol", &v, st))) {
        if (m > 0) *st = kg_arg_double(a, "--rtol", v, 0, 1e9, &o->rtol);
    } else if ((m = kg_arg_value(a, "--reference", &v, st))) {
        if (m > 0 && (*st = kg_arg_choice(a, "--reference", v, modes)) == DK_OK)
            snprintf(o->reference_mode, sizeof o->reference_mode, "%s", v);
    } else if ((m = kg_arg_value(a, "--max-source-bytes", &v, st))) {
        if (m > 0 && (*st = job_double(a, "--max-source-bytes", v, "max_source_bytes", &d)) == DK_OK)
            o->max_source_bytes = (long)d;
    } else if ((m = kg_arg_value(a, "--memory-gb", &v, st))) {
        if (m > 0) *st = job_double(a, "--memory-gb", v, "memory_limit_gb", &o->memory_limit_gb);
    } else if ((m = kg_arg_value(a, "--cpu-time", &v, st))) {
        if (m > 0) *st = job_double(a, "--cpu-time", v, "cpu_time_s", &o->cpu_time_s);
    } else if (kg_arg_switch(a, "--no-profile")) {
        o->profile = 0;
        m = 1;
    } else if (kg_arg_switch(a, "--strict")) {
        o->strict = 1;
        m = 1;
    }
    if (*st != DK_OK) return -1;
    return m;
}

/* Reads a file named by a flag; a missing file is a usage error naming it. */
static dk_status read_flag_file(const char *flag, const char *path, char **text, size_t *len) {
    if (!dk_file_exists(path)) return dk_fail(DK_ERR_USAGE, "%s: %s: no such file", flag, path);
    dk_status st = dk_read_file(path, text, len);
    if (st != DK_OK) dk_wrap(st, "%s: ", flag);
    return st;
}

/* "19_Gemm_ReLU" from ".../19_Gemm_ReLU.py". */
static void stem(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, n, "%s", b);
    size_t l = strlen(out);
    if (l > 3 && strcmp(out + l - 3, ".py") == 0) out[l - 3] = '\0';
}

static void print_json(const char *json) {
    cJSON *o = isatty(1) ? cJSON_Parse(json) : NULL;
    char *pretty = o ? cJSON_Print(o) : NULL;
    printf("%s\n", pretty ? pretty : json);
    free(pretty);
    cJSON_Delete(o);
    fflush(stdout);
}

static const char *redis_from_env(const char *given) {
    if (given) return given;
    const char *e = getenv("KERNELGYM_REDIS");
    return e && *e ? e : NULL;
}

/* GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN. */
static int count_gpus(void) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        if (!*vis) return 0;
        int n = 1;
        for (const char *p = vis; *p; p++) n += *p == ',';
        return n;
    }
    int n = 0;
    DIR *d = opendir("/dev");
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *s = de->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
        int digits = 1;
        for (const char *p = s + 6; *p; p++) digits &= *p >= '0' && *p <= '9';
        n += digits;
    }
    closedir(d);
    return n;
}

/* ---- eval ------------------------------------------------------------------ */

static int cmd_eval(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym eval"};
    eval_flags ef;
    eval_flags_init(&ef);
    kg_job job;
    kg_job_init(&job);
    const char *task = NULL, *cand = NULL;
    dk_status st = DK_OK;
    for (; a.i < argc; a.i++) {
        int m;
        if ((m = kg_arg_value(&a, "--task", &task, &st)) || (m = kg_arg_value(&a, "--candidate", &cand, &st)) ||
            (m = eval_flag(&a, &ef, &st)) || (m = job_flag(&a, &job.opt, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        return unknown_flag(&a);
    }
    if (!task) return fail(dk_fail(DK_ERR_USAGE, "--task is required"), a.cmd);
    if (!cand) return fail(dk_fail(DK_ERR_USAGE, "--candidate is required"), a.cmd);
    eval_flags_finish(&ef);
    char *task_src = NULL, *cand_src = NULL;
    size_t task_len = 0, cand_len = 0;
    if ((st = read_flag_file("--task", task, &task_src, &task_len)) != DK_OK ||
        (st = read_flag_file("--candidate", cand, &cand_src, &cand_len)) != DK_OK) {
        free(task_src);
        return fail(st, a.cmd);
    }
    char name[256];
    stem(task, name, sizeof name);
    int rc = 0;
    if (strlen(cand_src) != cand_len || strlen(task_src) != task_len) {
        /* A C string cannot carry the source past a NUL byte: judge it here. */
        cJSON *r = kg_result_make_error("eval", KG_STATUS_ERROR,
                                        strlen(cand_src) != cand_len ? "candidate_source contains a NUL byte"
                                                                     : "task_source contains a NUL byte");
        kg_evaluator_decorate(&ef.ev, r, 0);
        char *s = cJSON_PrintUnformatted(r);
        print_json(s);
        free(s);
        cJSON_Delete(r);
    } else {
        job.task_source = task_src;
        job.candidate_source = cand_src;
        job.task_name = name;
        kg_client *c = kg_client_local(&ef.ev, &st);
        kg_result res;
        int n_done = 0;
        if (c) st = kg_client_run(c, &job, 1, INFINITY, &res, &n_done);
        if (st != DK_OK) rc = fail(st, a.cmd);
        else print_json(res.json);
        if (c && st == DK_OK) kg_result_free(&res);
        kg_client_close(c);
    }
    free(task_src);
    free(cand_src);
    return rc;
}

/* ---- check ----------------------------------------------------------------- */

static int cmd_check(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym check"};
    const char *cand = NULL;
    dk_status st = DK_OK;
    for (; a.i < argc; a.i++) {
        int m;
        if ((m = kg_arg_value(&a, "--candidate", &cand, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        return unknown_flag(&a);
    }
    if (!cand) return fail(dk_fail(DK_ERR_USAGE, "--candidate is required"), a.cmd);
    char abs[PATH_MAX];
    if (!dk_file_exists(cand) || !realpath(cand, abs))
        return fail(dk_fail(DK_ERR_USAGE, "--candidate: %s: no such file", cand), a.cmd);
    kg_server_config sc;
    kg_server_config_default(&sc);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return fail(dk_fail(DK_ERR_RUNTIME, "pipe: %s", strerror(errno)), a.cmd);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return fail(dk_fail(DK_ERR_RUNTIME, "fork: %s", strerror(errno)), a.cmd);
    if (pid == 0) {
        kg_child_setup(parent, SIGKILL);
        dup2(out[1], 1);
        if (chdir(sc.source_root) != 0) _exit(126);
        setenv("PYTHONPATH", sc.source_root, 1);
        execl(sc.python, sc.python, "-m", "env.harness.static_checks", abs, (char *)NULL);
        fprintf(stderr, "kernelgym check: cannot run %s: %s\n", sc.python, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    size_t len = 0, cap = 65536;
    char *buf = dk_malloc(cap);
    double deadline = dk_now() + 120.0;
    for (;;) {
        if (len + 4096 > cap) buf = dk_realloc(buf, cap *= 2);
        ssize_t got = read(out[0], buf + len, cap - len - 1);
        if (got > 0) len += (size_t)got;
        else if (got == 0 || (errno != EINTR) || dk_now() > deadline) break;
    }
    buf[len] = '\0';
    close(out[0]);
    int ws = -1;
    if (!kg_wait_exit(pid, 120.0, &ws)) ws = kg_terminate(pid, 1, 1.0);
    cJSON *o = cJSON_Parse(buf);
    int rc = 0;
    if (!cJSON_IsObject(o) || !cJSON_GetObjectItemCaseSensitive(o, "hack")) {
        char how[160];
        kg_describe_exit(ws, how, sizeof how);
        fprintf(stderr, "%s: the static checker (%s -m env.harness.static_checks) gave no JSON result (%s)\n", a.cmd,
                sc.python, how);
        rc = 1;
    } else {
        char *s = cJSON_PrintUnformatted(o);
        print_json(s);
        free(s);
    }
    cJSON_Delete(o);
    free(buf);
    return rc;
}

/* ---- worker ---------------------------------------------------------------- */

/* Flags a worker takes besides the evaluation ones (also passed by serve). */
static int worker_flag(kg_args *a, kg_worker_config *w, dk_status *st) {
    const char *v;
    int m;
    *st = DK_OK;
    if ((m = kg_arg_value(a, "--name", &v, st))) {
        if (m > 0) {
            if (!*v || strlen(v) >= sizeof w->name || strpbrk(v, " \t\n"))
                *st = dk_fail(DK_ERR_USAGE, "--name: expected a word of at most %zu characters", sizeof w->name - 1);
            else
                snprintf(w->name, sizeof w->name, "%s", v);
        }
    } else if ((m = kg_arg_value(a, "--heartbeat", &v, st))) {
        if (m > 0) *st = kg_arg_double(a, "--heartbeat", v, 0.5, 3600, &w->heartbeat_ttl_s);
    } else if ((m = kg_arg_value(a, "--result-ttl", &v, st))) {
        if (m > 0) *st = kg_arg_double(a, "--result-ttl", v, 1, 365 * 86400.0, &w->result_ttl_s);
    } else if (kg_arg_switch(a, "--lazy")) {
        w->lazy_server = 1;
        m = 1;
    }
    if (*st != DK_OK) return -1;
    return m;
}

static int cmd_worker(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym worker"};
    eval_flags ef;
    eval_flags_init(&ef);
    kg_worker_config wc;
    kg_worker_config_default(&wc);
    const char *url = NULL;
    dk_status st = DK_OK;
    int insecure = 0;
    for (; a.i < argc; a.i++) {
        int m;
        if (kg_arg_switch(&a, "--insecure")) {
            insecure = 1;
            continue;
        }
        if ((m = kg_arg_value(&a, "--redis", &url, &st)) || (m = worker_flag(&a, &wc, &st)) || (m = eval_flag(&a, &ef, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        return unknown_flag(&a);
    }
    url = redis_from_env(url);
    if (!url) return fail(dk_fail(DK_ERR_USAGE, "--redis URL is required (or set KERNELGYM_REDIS)"), a.cmd);
    if (strcmp(url, "auto") == 0)
        return fail(dk_fail(DK_ERR_USAGE, "--redis auto: a lone worker needs a shared Redis; use `kernelgym serve` for a local fleet"), a.cmd);
    kg_redis_url u;
    if ((st = kg_redis_url_parse(url, &u)) != DK_OK) return fail(dk_wrap(st, "--redis: "), a.cmd);
    if ((st = kg_redis_url_check_exposure(&u, insecure, "--insecure")) != DK_OK) return fail(st, a.cmd);
    eval_flags_finish(&ef);
    wc.eval = ef.ev;
    snprintf(wc.redis_url, sizeof wc.redis_url, "%s", url);
    install_stop_handlers();
    st = kg_worker_run(&wc, &g_stop);
    if (st != DK_OK) return fail(st, a.cmd);
    return 0;
}

/* ---- serve ----------------------------------------------------------------- */

/* Sets the fleet's workers from --gpus / --workers / what the machine has. */
static dk_status fleet_workers(kg_fleet_config *fc, const kg_args *a, const char *gpus, int workers, const char *device) {
    if (gpus) DK_TRY(kg_arg_int_list(a, "--gpus", gpus, fc->gpus, KG_FLEET_MAX, &fc->n_gpus));
    if (gpus && workers > 0) return dk_fail(DK_ERR_USAGE, "--gpus and --workers exclude each other");
    if (!gpus && workers <= 0 && strcmp(device, "cpu") != 0) {
        int n = count_gpus();
        for (int i = 0; i < n && i < KG_FLEET_MAX; i++) fc->gpus[fc->n_gpus++] = i;
    }
    fc->n_cpu_workers = workers > 0 ? workers : 1;
    snprintf(fc->device, sizeof fc->device, "%s", device);
    return DK_OK;
}

/* The evaluation and worker flags serve/score pass on to every worker. */
typedef struct {
    const char *argv[128];
    int n;
} passthrough;

static void pass_on(passthrough *p, const kg_args *a, int first) {
    for (int k = first; k <= a->i && p->n < 128; k++) p->argv[p->n++] = a->argv[k];
}

static int cmd_serve(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym serve"};
    eval_flags ef;
    eval_flags_init(&ef);
    kg_worker_config wc;
    kg_worker_config_default(&wc);
    const char *redis = "auto", *gpus = NULL, *workers_s = NULL;
    passthrough pt = {.n = 0};
    dk_status st = DK_OK;
    int insecure = 0;
    for (; a.i < argc; a.i++) {
        int first = a.i, m;
        if (kg_arg_switch(&a, "--insecure")) { /* the workers need it too */
            insecure = 1;
            pass_on(&pt, &a, first);
            continue;
        }
        if ((m = kg_arg_value(&a, "--redis", &redis, &st)) || (m = kg_arg_value(&a, "--gpus", &gpus, &st)) ||
            (m = kg_arg_value(&a, "--workers", &workers_s, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        const char *ignored;
        if ((m = kg_arg_value(&a, "--name", &ignored, &st)))
            return fail(dk_fail(DK_ERR_USAGE, "--name: each worker of a fleet names itself"), a.cmd);
        if ((m = eval_flag(&a, &ef, &st)) || (m = worker_flag(&a, &wc, &st))) {
            if (m < 0) return fail(st, a.cmd);
            if (strcmp(argv[first], "--gpu") == 0 || strncmp(argv[first], "--gpu=", 6) == 0)
                return fail(dk_fail(DK_ERR_USAGE, "--gpu: a fleet takes --gpus LIST"), a.cmd);
            if (strncmp(argv[first], "--device", 8) != 0) pass_on(&pt, &a, first);
            continue;
        }
        return unknown_flag(&a);
    }
    kg_fleet_config fc;
    kg_fleet_config_default(&fc);
    int workers = 0;
    if (workers_s && (st = kg_arg_int(&a, "--workers", workers_s, 1, KG_FLEET_MAX, &workers)) != DK_OK) return fail(st, a.cmd);
    if ((st = fleet_workers(&fc, &a, gpus, workers, ef.ev.device)) != DK_OK) return fail(st, a.cmd);
    if (strcmp(redis, "auto") != 0) {
        kg_redis_url u;
        if ((st = kg_redis_url_parse(redis, &u)) != DK_OK) return fail(dk_wrap(st, "--redis: "), a.cmd);
        if ((st = kg_redis_url_check_exposure(&u, insecure, "--insecure")) != DK_OK) return fail(st, a.cmd);
    }
    snprintf(fc.redis, sizeof fc.redis, "%s", redis);
    fc.extra = pt.argv;
    fc.n_extra = pt.n;
    install_stop_handlers();
    kg_fleet f;
    if ((st = kg_fleet_start(&f, &fc)) != DK_OK) return fail(st, a.cmd);
    printf("%s\n", f.url);
    fflush(stdout);
    char shown[2048];
    kg_redis_url_redact(f.url, shown, sizeof shown);
    fprintf(stderr, "kernelgym serve: %d worker(s) on %s; Redis %s%s; SIGINT or SIGTERM stops\n", f.n,
            fc.n_gpus > 0 ? "GPUs" : "CPU", shown, f.own_redis ? " (private)" : "");
    int rc = 0;
    while (!g_stop) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (kg_fleet_check(&f) == 0) {
            fprintf(stderr, "kernelgym serve: every worker has left on its own; stopping\n");
            rc = 1;
            break;
        }
    }
    kg_fleet_stop(&f, 30.0);
    fprintf(stderr, "kernelgym serve: stopped\n");
    return rc;
}

/* ---- submit ---------------------------------------------------------------- */

static int cmd_submit(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym submit"};
    kg_job job;
    kg_job_init(&job);
    const char *url = NULL, *task = NULL, *cand = NULL, *wait_s = NULL, *kind = "eval", *payload = NULL, *sleep_s = NULL;
    dk_status st = DK_OK;
    int insecure = 0;
    for (; a.i < argc; a.i++) {
        int m;
        if (kg_arg_switch(&a, "--insecure")) {
            insecure = 1;
            continue;
        }
        if ((m = kg_arg_value(&a, "--redis", &url, &st)) || (m = kg_arg_value(&a, "--task", &task, &st)) ||
            (m = kg_arg_value(&a, "--candidate", &cand, &st)) || (m = kg_arg_value(&a, "--wait", &wait_s, &st)) ||
            (m = kg_arg_value(&a, "--kind", &kind, &st)) || (m = kg_arg_value(&a, "--payload", &payload, &st)) ||
            (m = kg_arg_value(&a, "--sleep", &sleep_s, &st)) || (m = job_flag(&a, &job.opt, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        return unknown_flag(&a);
    }
    double wait = 600;
    if (wait_s && (st = kg_arg_double(&a, "--wait", wait_s, 0, 1e9, &wait)) != DK_OK) return fail(st, a.cmd);
    int k;
    if ((st = kg_arg_enum(&a, "--kind", kind, kg_job_kind_names, KG_N_JOB_KINDS, &k)) != DK_OK) return fail(st, a.cmd);
    job.kind = (kg_job_kind)k;
    if (sleep_s && (st = kg_arg_double(&a, "--sleep", sleep_s, 0, 86400, &job.opt.sleep_s)) != DK_OK) return fail(st, a.cmd);
    url = redis_from_env(url);
    if (!url) return fail(dk_fail(DK_ERR_USAGE, "--redis URL is required (or set KERNELGYM_REDIS)"), a.cmd);
    if (strcmp(url, "auto") == 0)
        return fail(dk_fail(DK_ERR_USAGE, "--redis auto: submit needs the URL of a running fleet (kernelgym serve prints it)"), a.cmd);
    kg_redis_url u;
    if ((st = kg_redis_url_parse(url, &u)) != DK_OK) return fail(dk_wrap(st, "--redis: "), a.cmd);
    if ((st = kg_redis_url_check_exposure(&u, insecure, "--insecure")) != DK_OK) return fail(st, a.cmd);
    char *task_src = NULL, *cand_src = NULL;
    char name[256] = "";
    if (job.kind == KG_JOB_EVAL) {
        if (!task) return fail(dk_fail(DK_ERR_USAGE, "--task is required"), a.cmd);
        if (!cand) return fail(dk_fail(DK_ERR_USAGE, "--candidate is required"), a.cmd);
        size_t tl, cl;
        if ((st = read_flag_file("--task", task, &task_src, &tl)) != DK_OK ||
            (st = read_flag_file("--candidate", cand, &cand_src, &cl)) != DK_OK) {
            free(task_src);
            return fail(st, a.cmd);
        }
        if (strlen(cand_src) != cl || strlen(task_src) != tl) {
            free(task_src);
            free(cand_src);
            return fail(dk_fail(DK_ERR_USAGE, "%s contains a NUL byte", strlen(cand_src) != cl ? "--candidate" : "--task"), a.cmd);
        }
        stem(task, name, sizeof name);
        job.task_source = task_src;
        job.candidate_source = cand_src;
        job.task_name = name;
    }
    job.payload = payload;
    int rc = 0;
    kg_client *c = kg_client_connect(url, &st);
    kg_result res;
    int n_done = 0;
    if (c) st = kg_client_run(c, &job, 1, wait, &res, &n_done);
    if (st != DK_OK) {
        rc = fail(st, a.cmd);
    } else {
        if (n_done == 1) {
            print_json(res.json);
        } else {
            fprintf(stderr, "%s: no result within %g s (is any worker connected to this Redis?)\n", a.cmd, wait);
            rc = 1;
        }
        kg_result_free(&res);
    }
    kg_client_close(c);
    free(task_src);
    free(cand_src);
    return rc;
}

/* ---- score ----------------------------------------------------------------- */

static int cmd_score(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym score"};
    eval_flags ef;
    eval_flags_init(&ef);
    kg_worker_config wc;
    kg_worker_config_default(&wc);
    kg_job_options opt;
    kg_job_options_default(&opt);
    const char *tasks = NULL, *sols = NULL, *redis = NULL, *json_out = NULL, *gpus = NULL, *workers_s = NULL, *wait_s = NULL;
    passthrough pt = {.n = 0};
    dk_status st = DK_OK;
    int insecure = 0;
    for (; a.i < argc; a.i++) {
        int first = a.i, m;
        if (kg_arg_switch(&a, "--insecure")) {
            insecure = 1;
            continue;
        }
        if ((m = kg_arg_value(&a, "--tasks", &tasks, &st)) || (m = kg_arg_value(&a, "--solutions", &sols, &st)) ||
            (m = kg_arg_value(&a, "--redis", &redis, &st)) || (m = kg_arg_value(&a, "--json", &json_out, &st)) ||
            (m = kg_arg_value(&a, "--gpus", &gpus, &st)) || (m = kg_arg_value(&a, "--workers", &workers_s, &st)) ||
            (m = kg_arg_value(&a, "--wait", &wait_s, &st)) || (m = job_flag(&a, &opt, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        if ((m = eval_flag(&a, &ef, &st)) || (m = worker_flag(&a, &wc, &st))) {
            if (m < 0) return fail(st, a.cmd);
            if (strncmp(argv[first], "--device", 8) != 0 && strncmp(argv[first], "--gpu", 5) != 0) pass_on(&pt, &a, first);
            continue;
        }
        return unknown_flag(&a);
    }
    if (!tasks) return fail(dk_fail(DK_ERR_USAGE, "--tasks DIR is required"), a.cmd);
    if (!sols) return fail(dk_fail(DK_ERR_USAGE, "--solutions DIR is required"), a.cmd);
    if (!dk_dir_exists(tasks)) return fail(dk_fail(DK_ERR_USAGE, "--tasks: %s: no such folder", tasks), a.cmd);
    if (!dk_dir_exists(sols)) return fail(dk_fail(DK_ERR_USAGE, "--solutions: %s: no such folder", sols), a.cmd);
    double wait = INFINITY;
    if (wait_s && (st = kg_arg_double(&a, "--wait", wait_s, 0, 1e9, &wait)) != DK_OK) return fail(st, a.cmd);
    int workers = 0;
    if (workers_s && (st = kg_arg_int(&a, "--workers", workers_s, 1, KG_FLEET_MAX, &workers)) != DK_OK) return fail(st, a.cmd);
    if ((gpus || workers_s) && (!redis || strcmp(redis, "auto") != 0))
        return fail(dk_fail(DK_ERR_USAGE, "%s only goes with --redis auto", gpus ? "--gpus" : "--workers"), a.cmd);
    if (redis && strcmp(redis, "auto") != 0) {
        kg_redis_url u;
        if ((st = kg_redis_url_parse(redis, &u)) != DK_OK) return fail(dk_wrap(st, "--redis: "), a.cmd);
        if ((st = kg_redis_url_check_exposure(&u, insecure, "--insecure")) != DK_OK) return fail(st, a.cmd);
    }
    eval_flags_finish(&ef);

    kg_score_config sc = {.tasks_dir = tasks, .solutions_dir = sols, .where = {.redis = redis, .eval = ef.ev},
                          .opt = opt, .wait_s = wait, .json_out = json_out};
    kg_fleet_config_default(&sc.where.fleet);
    if (redis && strcmp(redis, "auto") == 0) {
        if ((st = fleet_workers(&sc.where.fleet, &a, gpus, workers, ef.ev.device)) != DK_OK) return fail(st, a.cmd);
        sc.where.fleet.extra = pt.argv;
        sc.where.fleet.n_extra = pt.n;
        install_stop_handlers();
    }
    if ((st = kg_score_run(&sc, &g_stop)) != DK_OK) return fail(st, a.cmd);
    return 0;
}

/* ---- audit ----------------------------------------------------------------- */

static int cmd_audit(int argc, char **argv) {
    kg_args a = {argc, argv, 2, "kernelgym audit"};
    eval_flags ef;
    eval_flags_init(&ef);
    kg_audit_config ac = {.min_catch = 1.0, .max_fp = 0.0, .wait_s = INFINITY};
    kg_job_options_default(&ac.opt);
    const char *min_s = NULL, *max_s = NULL, *wait_s = NULL;
    dk_status st = DK_OK;
    for (; a.i < argc; a.i++) {
        int m;
        if ((m = kg_arg_value(&a, "--hacks", &ac.hacks_dir, &st)) || (m = kg_arg_value(&a, "--honest", &ac.honest_dir, &st)) ||
            (m = kg_arg_value(&a, "--tasks", &ac.tasks_dir, &st)) || (m = kg_arg_value(&a, "--json", &ac.json_out, &st)) ||
            (m = kg_arg_value(&a, "--min-catch", &min_s, &st)) || (m = kg_arg_value(&a, "--max-fp", &max_s, &st)) ||
            (m = kg_arg_value(&a, "--wait", &wait_s, &st)) || (m = job_flag(&a, &ac.opt, &st)) ||
            (m = eval_flag(&a, &ef, &st))) {
            if (m < 0) return fail(st, a.cmd);
            continue;
        }
        return unknown_flag(&a);
    }
    if (!ac.hacks_dir || !ac.honest_dir) return fail(dk_fail(DK_ERR_USAGE, "--hacks DIR and --honest DIR are required"), a.cmd);
    if ((min_s && (st = kg_arg_double(&a, "--min-catch", min_s, 0, 1, &ac.min_catch)) != DK_OK) ||
        (max_s && (st = kg_arg_double(&a, "--max-fp", max_s, 0, 1, &ac.max_fp)) != DK_OK) ||
        (wait_s && (st = kg_arg_double(&a, "--wait", wait_s, 0, 1e9, &ac.wait_s)) != DK_OK))
        return fail(st, a.cmd);
    char tasks[4096];
    if (!ac.tasks_dir) {
        snprintf(tasks, sizeof tasks, "%s/../tasks", ac.hacks_dir);
        ac.tasks_dir = tasks;
    }
    const char *dirs[] = {ac.hacks_dir, ac.honest_dir, ac.tasks_dir}, *flags[] = {"--hacks", "--honest", "--tasks"};
    for (int i = 0; i < 3; i++)
        if (!dk_dir_exists(dirs[i])) return fail(dk_fail(DK_ERR_USAGE, "%s: %s: no such folder", flags[i], dirs[i]), a.cmd);
    eval_flags_finish(&ef);
    ac.where.eval = ef.ev;
    /* auto picks cuda only where the harness sees a GPU; the corpus headers
     * need to know which, so auto means cpu here unless --device cuda. */
    ac.device = strcmp(ef.ev.device, "cuda") == 0 ? "cuda" : "cpu";
    snprintf(ac.where.eval.device, sizeof ac.where.eval.device, "%s", ac.device);
    int passed = 0;
    if ((st = kg_audit_run(&ac, &g_stop, &passed)) != DK_OK) return fail(st, a.cmd);
    return passed ? 0 : 1;
}

int main(int argc, char **argv) {
    setvbuf(stderr, NULL, _IOLBF, 0);
    kg_ignore_sigpipe();
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "check")) return cmd_check(argc, argv);
    if (!strcmp(cmd, "worker")) return cmd_worker(argc, argv);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc, argv);
    if (!strcmp(cmd, "submit")) return cmd_submit(argc, argv);
    if (!strcmp(cmd, "score")) return cmd_score(argc, argv);
    if (!strcmp(cmd, "audit")) return cmd_audit(argc, argv);
    fprintf(stderr, "kernelgym: unknown command '%s' (expected eval, check, worker, serve, submit, score or audit)\n", cmd);
    return 2;
}
