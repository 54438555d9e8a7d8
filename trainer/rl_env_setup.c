/* rl_env_setup.c: builds the run's environment and task list. */
#include "trainer/rl_env_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "env/redis_conn.h"
#include "rl/env_kernelgym.h"
#include "rl/env_toy.h"

/* The device a private fleet evaluates on; auto follows run.device. */
static const char *fleet_device(const dk_config *cfg) {
    if (cfg->kernelgym.device != KG_DEVICE_AUTO) return kg_device_names[cfg->kernelgym.device];
    return config_device_names[cfg->run.device];
}

/* Starts this node's kernelgym.workers workers on `redis` ("auto": a
 * private Redis first, on TCP when tcp is set). */
static dk_status start_workers(rl_env_setup *s, const dk_config *cfg, const char *device, const char *redis, int tcp) {
    kg_fleet_config fc;
    kg_fleet_config_default(&fc);
    snprintf(fc.redis, sizeof fc.redis, "%s", redis);
    fc.redis_tcp = tcp;
    snprintf(fc.device, sizeof fc.device, "%s", device);
    if (!strcmp(device, "cuda")) {
        fc.n_gpus = cfg->kernelgym.workers;
        for (int i = 0; i < fc.n_gpus && i < KG_FLEET_MAX; i++) fc.gpus[i] = i;
    } else {
        fc.n_cpu_workers = cfg->kernelgym.workers;
    }
    fc.gpu_memory_gb = cfg->kernelgym.gpu_memory_gb;
    dk_status st = kg_fleet_start(&s->fleet, &fc);
    if (st != DK_OK) return dk_wrap(st, "[kernelgym] redis = auto: ");
    s->have_fleet = 1;
    /* Dead workers and a dead Redis are restarted while the run goes on. */
    return kg_fleet_watch(&s->fleet);
}

/* One line on stderr per node: its workers' pids and where their Redis is
 * (redacted), so a log shows that every node started its own. */
static void log_node(const rl_env_setup *s, const comm *c, const char *device) {
    char pids[512] = "", url[2048], own[64] = "";
    size_t used = 0;
    for (int i = 0; i < s->fleet.n && used + 16 < sizeof pids; i++)
        used += (size_t)snprintf(pids + used, sizeof pids - used, "%s%d", i ? " " : "", (int)s->fleet.pid[i]);
    kg_redis_url_redact(s->fleet.url, url, sizeof url);
    if (s->fleet.own_redis) snprintf(own, sizeof own, " (private, pid %d)", (int)s->fleet.redis.pid);
    int node, n_nodes;
    comm_node(&node, &n_nodes);
    /* One write, so the lines of two ranks do not mix. */
    fprintf(stderr, "kernelgym: node %d of %d (rank %d, pid %d): %d %s worker(s), pids %s; Redis %s%s\n",
            node, n_nodes, c->rank, (int)getpid(), s->fleet.n, device, pids, url, own);
}

/* redis = auto: rank 0 starts Redis and its node's workers, and the URL
 * goes to every rank; the local rank 0 of every other node then starts that
 * node's workers on it. A job on one node keeps the unix socket; over
 * several nodes Redis listens on TCP on a routable address of rank 0's host
 * with a random password, which travels only over MPI and through the
 * workers' environment. When rank 0 fails it sends an empty URL, and when a
 * node's workers fail every rank hears of it, so every rank leaves with an
 * error instead of waiting on a fleet that never came. Workers and Redis end
 * with the process that started them (kg_child_setup's parent-death signal),
 * so a rank that dies, or a job that is aborted, takes its node's fleet along. */
static dk_status start_fleet(rl_env_setup *s, const dk_config *cfg, comm *c, const char *device, char *url,
                             size_t url_cap) {
    int node, n_nodes;
    comm_node(&node, &n_nodes);
    const int multi = n_nodes > 1;
    dk_status st = DK_OK;
    if (c->rank == 0) st = start_workers(s, cfg, device, "auto", multi);
    const char *mine = c->rank == 0 && st == DK_OK ? s->fleet.url : "";
    void *all = NULL;
    size_t *sizes = dk_calloc((size_t)c->world, sizeof *sizes);
    comm_all_gather_host(c, mine, c->rank == 0 ? strlen(mine) : 0, &all, sizes);
    if (sizes[0] == 0 || sizes[0] >= url_cap) {
        free(all);
        free(sizes);
        if (st != DK_OK) return st;
        return dk_fail(DK_ERR_RUNTIME, "[kernelgym] redis = auto: rank 0 could not start the private fleet");
    }
    memcpy(url, all, sizes[0]);
    url[sizes[0]] = 0;
    memset(all, 0, sizes[0]); /* the password */
    free(all);
    free(sizes);
    if (multi && c->at.local_rank == 0 && c->rank != 0) st = start_workers(s, cfg, device, url, 0);
    double failed = st != DK_OK;
    comm_all_reduce_host(c, &failed, 1);
    if (failed > 0) {
        if (st != DK_OK) return st;
        return dk_fail(DK_ERR_RUNTIME, "[kernelgym] redis = auto: %.0f node(s) could not start their workers (their "
                                       "rank's message says why)", failed);
    }
    if (s->have_fleet) log_node(s, c, device);
    if (c->rank == 0)
        printf("kernelgym: private fleet, %d %s worker(s) on each of %d node(s), %d rank(s) submitting\n",
               s->fleet.n, device, n_nodes, c->world);
    return DK_OK;
}

static dk_status setup_kernelgym(rl_env_setup *s, const dk_config *cfg, comm *c) {
    if (!cfg->data.tasks[0]) return dk_fail(DK_ERR_USAGE, "[data] tasks is empty: rl.env = kernelgym needs a task set");
    dk_status st = task_set_load(cfg->data.tasks, 0, &s->tasks);
    if (st != DK_OK) return dk_wrap(st, "[data] tasks: ");
    task_set_print_summary(&s->tasks, cfg->data.tasks, stdout);
    s->n_tasks = s->tasks.n;
    s->list = dk_calloc((size_t)s->n_tasks, sizeof *s->list);
    for (int i = 0; i < s->n_tasks; i++) {
        const task_entry *t = &s->tasks.tasks[i];
        s->list[i] = (rl_task){t->id, t->name, t->level, t->source, t->reference_profile};
    }
    const char *device = fleet_device(cfg);
    char url[2048];
    snprintf(url, sizeof url, "%s", cfg->kernelgym.redis);
    if (strcmp(cfg->kernelgym.redis, "auto") != 0) {
        kg_redis_url u;
        dk_status st = kg_redis_url_parse(url, &u);
        if (st == DK_OK) st = kg_redis_url_check_exposure(&u, cfg->kernelgym.insecure, "[kernelgym] insecure = true");
        if (st != DK_OK) return dk_wrap(st, "[kernelgym] redis: ");
    }
    if (cfg->kernelgym.gpu_memory_gb > 0 && strcmp(cfg->kernelgym.redis, "auto") != 0)
        return dk_fail(DK_ERR_USAGE, "[kernelgym] gpu_memory_gb = %g caps the workers of a private fleet (redis = "
                                     "auto); the fleet at redis = URL starts its workers itself (set it to 0)",
                       cfg->kernelgym.gpu_memory_gb);
    if (cfg->kernelgym.gpu_memory_gb > 0 && strcmp(device, "cuda") != 0)
        return dk_fail(DK_ERR_USAGE, "[kernelgym] gpu_memory_gb = %g, but the private fleet evaluates on %s, which has "
                                     "no GPU memory to cap (set it to 0, or kernelgym.device = cuda)",
                       cfg->kernelgym.gpu_memory_gb, device);
    if (!strcmp(cfg->kernelgym.redis, "auto")) {
        st = start_fleet(s, cfg, c, device, url, sizeof url);
        if (st != DK_OK) return st;
    }
    rl_kg_config kc;
    kc.timeout_s = cfg->kernelgym.timeout_s;
    /* The whole batch may queue behind few workers: give it room, bounded. */
    kc.wait_s = cfg->kernelgym.timeout_s * (2.0 + (double)cfg->train.batch_size / cfg->kernelgym.workers);
    kc.reconnect_s = cfg->kernelgym.reconnect_s;
    kg_reward_config_default(&kc.reward, KG_REWARD_PROFILE);
    kc.reward.alpha = cfg->rl.reward_alpha;
    kc.reward.speedup_cap = cfg->rl.speedup_cap;
    kc.reward.hack_penalty = cfg->rl.hack_penalty;
    kc.device = device;
    kc.feedback_max_tokens = cfg->rl.feedback_max_tokens;
    s->env = rl_env_kernelgym_new(url, &kc);
    return DK_OK;
}

dk_status rl_env_setup_init(rl_env_setup *s, const dk_config *cfg, comm *c) {
    memset(s, 0, sizeof *s);
    if (cfg->rl.env == DK_ENV_TOY) {
        const rl_task *t = rl_env_toy_tasks(&s->n_tasks);
        s->list = dk_calloc((size_t)s->n_tasks, sizeof *s->list);
        memcpy(s->list, t, (size_t)s->n_tasks * sizeof *t);
        s->env = rl_env_toy_new(cfg->rl.max_new_tokens);
        return DK_OK;
    }
    return setup_kernelgym(s, cfg, c);
}

void rl_env_setup_free(rl_env_setup *s) {
    if (s->env) s->env->free(s->env);
    /* More than a worker's own 10 s for its harness server to exit
     * (env/evaluator.c), so a slow machine does not see it killed mid-leave. */
    if (s->have_fleet) kg_fleet_stop(&s->fleet, 30.0);
    task_set_free(&s->tasks);
    free(s->list);
    memset(s, 0, sizeof *s);
}
