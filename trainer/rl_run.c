/* rl_run.c: the RL step loop. One step:
 *   1. take n_tasks = batch_size / n_samples tasks (a keyed shuffle per pass);
 *   2. roll out n_samples conversations per task, max_turns turns each;
 *   3. turn rewards -> PRS -> returns and advantages per (task, turn) group;
 *   4. PPO update (old logprobs recomputed by the training forward);
 *   5. one console line, one metrics.jsonl line, a checkpoint when due.
 * Randomness is keyed by (seed, step, task, sample), so a resumed run rolls
 * out exactly what the uninterrupted one would have. */
#include "trainer/rl_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "model/generate.h"
#include "rl/advantage.h"
#include "rl/prompts.h"
#include "rl/prs.h"
#include "rl/rollout.h"
#include "trainer/checkpoint.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/model_setup.h"
#include "trainer/progress.h"
#include "trainer/rl_batch.h"
#include "trainer/rl_dump.h"
#include "trainer/rl_env_setup.h"
#include "trainer/rl_metrics.h"
#include "trainer/rl_update.h"

/* A keyed permutation index: the task of slot i in pass i / n (see sft_data). */
static int task_at(const dk_config *cfg, long i, int n) {
    uint64_t x = (uint64_t)cfg->run.seed * 0x9e3779b97f4a7c15ULL + (uint64_t)(i / n) + 1;
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
    /* An affine map a*j + b mod n with gcd(a, n) = 1 is a permutation. */
    uint64_t a = 1 + 2 * (x % (uint64_t)n), b = (x >> 20) % (uint64_t)n;
    while (n > 1) {
        uint64_t g = a, h = (uint64_t)n;
        while (h) {
            uint64_t t = g % h;
            g = h;
            h = t;
        }
        if (g == 1) break;
        a++;
    }
    return (int)((a * (uint64_t)(i % n) + b) % (uint64_t)n);
}

static dk_status load_template(const char *path, prompt_kind k, char **out) {
    *out = NULL;
    if (!path[0]) return DK_OK;
    dk_status st = prompt_load(path, k, out);
    return st == DK_OK ? DK_OK : dk_wrap(st, k == PROMPT_FIRST ? "[rl] prompt_template: " : "[rl] feedback_template: ");
}

static dk_status check_shape(const dk_config *cfg) {
    const int B = cfg->train.batch_size, S = cfg->rl.n_samples;
    if (B % S != 0)
        return dk_fail(DK_ERR_USAGE, "[train] batch_size = %d must be a multiple of [rl] n_samples = %d", B, S);
    if (B % (cfg->rl.mini_batches * cfg->train.grad_accum) != 0)
        return dk_fail(DK_ERR_USAGE,
                       "[train] batch_size = %d must split into [rl] mini_batches (%d) x [train] grad_accum (%d)", B,
                       cfg->rl.mini_batches, cfg->train.grad_accum);
    if (cfg->rl.max_turns > RL_MAX_TURNS)
        return dk_fail(DK_ERR_USAGE, "[rl] max_turns = %d: at most %d", cfg->rl.max_turns, RL_MAX_TURNS);
    return DK_OK;
}

static dk_status resume(const dk_config *cfg, model *m, optim *o, int *start) {
    char path[4096];
    *start = 0;
    if (!strcmp(cfg->ckpt.resume, "none")) return DK_OK;
    if (!strcmp(cfg->ckpt.resume, "auto")) {
        DK_TRY(ckpt_find_latest(cfg->run.dir, path, sizeof path));
        if (!path[0]) return DK_OK;
    } else {
        snprintf(path, sizeof path, "%s", cfg->ckpt.resume);
    }
    ckpt_state cs;
    dk_status st = ckpt_load(path, m, o, &cs);
    if (st != DK_OK) return dk_wrap(st, "[ckpt] resume: ");
    *start = cs.step;
    printf("resumed from %s (step %d)\n", path, cs.step);
    return DK_OK;
}

/* One progress bar per phase of a turn: generating, then evaluating. */
static void on_progress(void *user, const char *phase, int turn, long done, long total) {
    progress *p = user;
    if (done == 0) {
        char label[64];
        snprintf(label, sizeof label, "turn %d %s", turn, phase);
        progress_begin(p, label, total, stdout);
    } else if (done >= total) {
        progress_update(p, done, NULL);
        progress_end(p);
    }
}

static void on_env_progress(void *user, long done, long total) {
    if (done < total) progress_update(user, done, NULL);
}

dk_status rl_run(const dk_config *cfg) {
    DK_TRY(check_shape(cfg));
    const int B = cfg->train.batch_size, S = cfg->rl.n_samples, n_tasks = B / S, turns = cfg->rl.max_turns;
    const int micro_seqs = B / (cfg->rl.mini_batches * cfg->train.grad_accum);
    model_config mc;
    DK_TRY(config_model(cfg, &mc));
    gen_config gc = {0};
    gen_config_defaults(&gc);
    gc.max_batch = B;
    gc.max_context = cfg->data.max_length;
    gc.max_step_tokens = cfg->data.max_length < 4096 ? cfg->data.max_length : 4096;
    if (cfg->run.device == DK_DEVICE_CPU) gc.cache_bytes = (size_t)B * cfg->data.max_length * 2 * mc.n_layers *
                                                           mc.n_kv_heads * mc.head_dim * sizeof(float) + (64u << 20);
    else gc.cache_fraction = cfg->rl.kv_cache_fraction;
    run_setup r;
    dk_status st = run_setup_init(&r, cfg, micro_seqs * cfg->data.max_length, gen_scratch_bytes(&mc, &gc, cfg->run.device));
    if (st != DK_OK) {
        run_setup_free(&r);
        return st;
    }
    model *m = &r.model;
    /* The cache takes its fraction of what is free once the model is in. */
    if (gc.cache_bytes == 0) gc.free_bytes = device_free_bytes(r.ctx.gpu);
    gen_engine *eng = NULL;
    rl_env_setup es;
    memset(&es, 0, sizeof es);
    char *first_t = NULL, *follow_t = NULL;
    optim opt;
    optim_config oc = {(float)cfg->train.beta1, (float)cfg->train.beta2, (float)cfg->train.eps,
                       (float)cfg->train.weight_decay, (float)cfg->train.grad_clip};
    optim_init(&opt, &r.ctx, &oc, &m->cfg, &m->params);
    metrics_log ml = {0};
    model ref;
    int have_ref = 0;
    st = gen_create(&eng, m, &gc);
    if (st == DK_OK) st = load_template(cfg->rl.prompt_template, PROMPT_FIRST, &first_t);
    if (st == DK_OK) st = load_template(cfg->rl.feedback_template, PROMPT_FOLLOWUP, &follow_t);
    if (st == DK_OK) st = rl_env_setup_init(&es, cfg);
    /* The toy asks its question plainly, not as a kernel task. */
    if (st == DK_OK && cfg->rl.env == DK_ENV_TOY && !first_t) first_t = dk_strdup("{source}");
    if (st == DK_OK && cfg->rl.env == DK_ENV_TOY && !follow_t) follow_t = dk_strdup("{feedback}");
    int start = 0;
    if (st == DK_OK) st = resume(cfg, m, &opt, &start);
    if (st == DK_OK && cfg->rl.kl_coef > 0) {
        /* The frozen reference is the policy the run started from, rebuilt
         * from the same source (so a resumed run gets the same one). */
        st = model_create(&ref, &mc, &r.ctx, micro_seqs * cfg->data.max_length, 0);
        have_ref = st == DK_OK;
        if (st == DK_OK && cfg->model.path[0]) st = model_load_hf(&ref, cfg->model.path);
        else if (st == DK_OK) model_init_random(&ref, (uint64_t)cfg->run.seed, (float)cfg->model.init_std);
    }
    if (st == DK_OK) st = metrics_open(&ml, cfg->run.dir, start > 0 ? start : -1);

    int32_t stop_tokens[2];
    int n_stop = 0;
    stop_tokens[n_stop++] = tokenizer_token_id(r.tok, "<|im_end|>");
    if (tokenizer_token_id(r.tok, "<|endoftext|>") >= 0) stop_tokens[n_stop++] = tokenizer_token_id(r.tok, "<|endoftext|>");
    lr_schedule sched = {cfg->train.schedule, cfg->train.lr, cfg->train.min_lr, cfg->train.warmup_steps, cfg->run.steps};
    adv_config ac;
    adv_config_default(&ac);
    ac.estimator = (adv_estimator)cfg->rl.advantage;
    ac.gamma = cfg->rl.gamma;
    prs_config pc;
    prs_config_default(&pc);
    pc.mode = (prs_mode)cfg->rl.prs;
    pc.threshold = cfg->rl.prs_threshold;
    pc.seed = (uint64_t)cfg->run.seed;
    const size_t cells = (size_t)B * turns;
    float *rewards = dk_calloc(cells, sizeof(float)), *coverage = dk_calloc(cells, sizeof(float));
    float *adv = dk_calloc(cells, sizeof(float));
    uint8_t *valid = dk_calloc(cells, 1), *correct = dk_calloc(cells, 1);
    rl_task *batch_tasks = dk_calloc((size_t)n_tasks, sizeof *batch_tasks);
    int64_t *task_ids = dk_calloc((size_t)n_tasks, sizeof *task_ids);
    rl_rollout *ro = dk_calloc((size_t)B, sizeof *ro);

    for (int step = start; step < cfg->run.steps && st == DK_OK; step++) {
        double t_step = dk_now();
        for (int i = 0; i < n_tasks; i++) {
            int k = task_at(cfg, (long)step * n_tasks + i, es.n_tasks);
            batch_tasks[i] = es.list[k];
            task_ids[i] = k;
        }
        rl_rollout_config rc = {0};
        rc.max_turns = turns;
        rc.gen.temperature = (float)cfg->rl.temperature;
        rc.gen.top_p = (float)cfg->rl.top_p;
        rc.gen.top_k = cfg->rl.top_k;
        rc.gen.max_new_tokens = cfg->rl.max_new_tokens;
        rc.gen.stop_tokens = stop_tokens;
        rc.gen.n_stop_tokens = n_stop;
        rc.first_template = first_t;
        rc.followup_template = follow_t;
        rc.seed = (uint64_t)cfg->run.seed;
        rc.step = step;
        rc.task_keys = task_ids;
        progress bar;
        rc.progress = on_progress;
        rc.env_progress = on_env_progress;
        rc.progress_user = &bar;
        rl_rollout_stats rs;
        st = rl_rollout_batch(eng, r.tok, es.env, batch_tasks, n_tasks, S, &rc, ro, &rs);
        if (st != DK_OK) break;

        memset(rewards, 0, cells * sizeof(float));
        memset(valid, 0, cells);
        memset(correct, 0, cells);
        for (int i = 0; i < B; i++)
            for (int t = 0; t < ro[i].n_turns; t++) {
                size_t c = (size_t)i * turns + t;
                rewards[c] = (float)ro[i].res[t].reward;
                valid[c] = 1;
                correct[c] = (uint8_t)ro[i].res[t].correct;
                coverage[c] = (float)ro[i].res[t].coverage;
            }
        prs_stats ps;
        prs_apply(&pc, step, n_tasks, S, turns, task_ids, correct, coverage, valid, &ps);
        st = adv_compute(&ac, n_tasks, S, turns, rewards, valid, NULL, adv);
        if (st != DK_OK) break;

        rl_batch b;
        rl_batch_build(&b, ro, B, turns, adv, valid);
        if (have_ref) st = rl_forward_logprobs(&ref, &b, micro_seqs, 1.0f, b.logp_ref, NULL);
        rl_update_config uc;
        ppo_config_default(&uc.ppo);
        uc.ppo.clip_low = cfg->rl.clip_low;
        uc.ppo.clip_high = cfg->rl.clip_high;
        uc.ppo.dual_clip = cfg->rl.dual_clip;
        uc.ppo.agg = (ppo_agg)cfg->rl.loss_agg;
        uc.ppo.kl_coef = cfg->rl.kl_coef;
        uc.ppo.entropy_coef = cfg->rl.entropy_coef;
        uc.ppo.tis_cap = cfg->rl.tis_cap;
        uc.epochs = cfg->rl.ppo_epochs;
        uc.mini_batches = cfg->rl.mini_batches;
        uc.micro_seqs = micro_seqs;
        uc.inv_temp = cfg->rl.temperature > 0 ? (float)(1.0 / cfg->rl.temperature) : 1.0f;
        uc.lr = lr_at(&sched, step);
        rl_update_stats us;
        if (st == DK_OK) st = rl_update(m, &opt, &b, &uc, &us);
        if (st == DK_OK) {
            rl_step_summary sum;
            rl_metrics_summarise(&sum, ro, B, turns, rewards, valid, &ps);
            double step_s = dk_now() - t_step;
            rl_metrics_write(&ml, step + 1, &sum, &rs, &us, uc.lr, step_s);
            rl_metrics_print(step + 1, cfg->run.steps, &sum, &rs, &us, step_s);
            st = rl_dump_rollouts(cfg->run.dir, step + 1, ro, B, batch_tasks, r.tok);
        }
        rl_batch_free(&b);
        rl_rollout_free(eng, ro, B);
        if (st != DK_OK) break;
        int every = cfg->ckpt.every;
        if ((every > 0 && (step + 1) % every == 0) || step + 1 == cfg->run.steps) {
            ckpt_state cs = {step + 1, (long)(step + 1) * n_tasks, (uint64_t)cfg->run.seed, 1};
            st = ckpt_save(cfg->run.dir, m, &opt, cfg, &cs, cfg->ckpt.keep);
            if (st == DK_OK) printf("checkpoint: %s/ckpt/step_%08d\n", cfg->run.dir, step + 1);
        }
    }
    free(rewards);
    free(coverage);
    free(adv);
    free(valid);
    free(correct);
    free(batch_tasks);
    free(task_ids);
    free(ro);
    free(first_t);
    free(follow_t);
    metrics_close(&ml);
    if (have_ref) model_free(&ref);
    rl_env_setup_free(&es);
    if (eng) gen_free(eng);
    optim_free(&opt, &r.ctx);
    run_setup_free(&r);
    return st;
}
