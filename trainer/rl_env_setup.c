/* rl_env_setup.c: builds the run's environment and task list. */
#include "trainer/rl_env_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/redis_conn.h"
#include "rl/env_kernelgym.h"
#include "rl/env_toy.h"

/* The device a private fleet evaluates on; auto follows run.device. */
static const char *fleet_device(const dk_config *cfg) {
    if (cfg->kernelgym.device != KG_DEVICE_AUTO) return kg_device_names[cfg->kernelgym.device];
    return config_device_names[cfg->run.device];
}

/* Starts Redis (redis = "auto") and kernelgym.workers workers. */
static dk_status start_workers(rl_env_setup *s, const dk_config *cfg, const char *device, const char *redis) {
    kg_fleet_config fc;
    kg_fleet_config_default(&fc);
    snprintf(fc.redis, sizeof fc.redis, "%s", redis);
    snprintf(fc.device, sizeof fc.device, "%s", device);
    if (!strcmp(device, "cuda")) {
        fc.n_gpus = cfg->kernelgym.workers;
        for (int i = 0; i < fc.n_gpus && i < KG_FLEET_MAX; i++) fc.gpus[i] = i;
    } else {
        fc.n_cpu_workers = cfg->kernelgym.workers;
    }
    dk_status st = kg_fleet_start(&s->fleet, &fc);
    if (st != DK_OK) return dk_wrap(st, "[kernelgym] redis = auto: ");
    s->have_fleet = 1;
    /* Dead workers and a dead Redis are restarted while the run goes on. */
    return kg_fleet_watch(&s->fleet);
}

/* redis = auto: rank 0 starts Redis and the workers, and the URL goes to
 * every rank. The private Redis listens on a unix socket only
 * (env/redis_auto.h), so the job must sit on one node (checked first, alike
 * on every rank). When rank 0 fails it sends an empty URL, so every rank
 * leaves with an error instead of waiting on a fleet that never came. */
static dk_status start_fleet(rl_env_setup *s, const dk_config *cfg, comm *c, const char *device, char *url,
                             size_t url_cap) {
    if (c->at.local_world != c->world)
        return dk_fail(DK_ERR_USAGE,
                       "[kernelgym] redis = auto: the private Redis listens on a unix socket, which the ranks on "
                       "other nodes cannot reach (this job spans %d ranks, %d on this node): give kernelgym.redis "
                       "the URL of a fleet every node reaches",
                       c->world, c->at.local_world);
    dk_status st = DK_OK;
    if (c->rank == 0) st = start_workers(s, cfg, device, "auto");
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
    free(all);
    free(sizes);
    if (s->have_fleet)
        printf("kernelgym: private fleet, %d %s worker(s), %d rank(s) submitting\n", s->fleet.n, device, c->world);
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
    if (s->have_fleet) kg_fleet_stop(&s->fleet, 10.0);
    task_set_free(&s->tasks);
    free(s->list);
    memset(s, 0, sizeof *s);
}
