/* rl_run.c: the RL step loop. One step:
 *   1. take n_tasks = batch_size / n_samples tasks (a keyed shuffle per pass);
 *   2. roll out n_samples conversations per task, max_turns turns each;
 *   3. turn rewards -> PRS -> returns and advantages per (task, turn) group;
 *   4. PPO update (old logprobs recomputed by the training forward);
 *   5. one console line, one metrics.jsonl line, a checkpoint when due.
 * Randomness is keyed by (seed, step, task, sample), so a resumed run rolls
 * out exactly what the uninterrupted one would have.
 *
 * Data parallel (mpirun -np N): every rank rolls out a contiguous run of the
 * step's tasks with its own engine; a pair's draws are keyed as above, so it
 * rolls out alike on any rank. The rollouts are then gathered to every rank
 * in global order (trainer/rl_gather.h), so PRS, rewards and advantages are
 * computed from the whole batch, identically everywhere; each rank trains on
 * its own sequences with global mini-batches and denominators
 * (trainer/rl_update.h) and the gradients are summed over ranks, so every
 * rank takes the same optimizer step and holds the same weights for its next
 * rollouts. At world > 1 (or with DK_ZERO=1) the policy is sharded (ZeRO-3,
 * trainer/zero.h): each rank keeps 1/N of the weights, masters, moments and
 * gradients, and the rollout phase reads an inference copy gathered once
 * per step (trainer/rollout_session.h says what each phase holds). Rank 0
 * alone writes the metrics and the rollouts; a sharded checkpoint is written
 * by every rank, its own slices. */
#include "trainer/rl_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "rl/advantage.h"
#include "rl/prs.h"
#include "rl/rollout.h"
#include "trainer/checkpoint.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/micro_batch.h"
#include "trainer/rl_batch.h"
#include "trainer/rl_dump.h"
#include "trainer/rl_gather.h"
#include "trainer/rl_metrics.h"
#include "trainer/run_begin.h"
#include "trainer/run_logs.h"
#include "trainer/rollout_session.h"
#include "trainer/rl_update.h"
#include "trainer/zero_ckpt.h"

/* The task at slot i of the run: a keyed shuffle of the task set per pass. */
static int task_at(const dk_config *cfg, long i, int n) {
    uint64_t key = dk_key((uint64_t)cfg->run.seed, (uint64_t)(i / n), 1, 0, 0);
    return (int)dk_permute((uint64_t)(i % n), (uint64_t)n, key);
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

/* The step's rollout counts summed over ranks (the timings stay rank 0's:
 * the ranks generate at the same time). */
static void rollout_stats_all_reduce(comm *c, rl_rollout_stats *rs) {
    double x[1 + 2 * RL_MAX_TURNS];
    x[0] = (double)rs->sampled_tokens;
    for (int t = 0; t < RL_MAX_TURNS; t++) {
        x[1 + t] = (double)rs->response_tokens_per_turn[t];
        x[1 + RL_MAX_TURNS + t] = rs->responses_per_turn[t];
    }
    comm_all_reduce_host(c, x, sizeof x / sizeof *x);
    rs->sampled_tokens = (long)x[0];
    for (int t = 0; t < RL_MAX_TURNS; t++) {
        rs->response_tokens_per_turn[t] = (long)x[1 + t];
        rs->responses_per_turn[t] = (int)x[1 + RL_MAX_TURNS + t];
    }
}

dk_status rl_run(const dk_config *cfg) {
    DK_TRY(check_shape(cfg));
    const int B = cfg->train.batch_size, S = cfg->rl.n_samples, n_tasks = B / S, turns = cfg->rl.max_turns;
    /* The policy being trained is the tempered one the rollouts sampled from. */
    const float inv_temp = cfg->rl.temperature > 0 ? (float)(1.0 / cfg->rl.temperature) : 1.0f;
    /* The engine decodes this rank's conversations only: size it (and, on
     * the CPU, its KV cache) for the largest share of the batch; so are the
     * micro-batches, which hold this rank's sequences only (the plan
     * trainer/mem_plan.c makes). */
    const int world = comm_where().world;
    const int most_local = (n_tasks + world - 1) / world * S;
    const micro_plan plan = micro_plan_make(cfg, most_local > 0 ? most_local : 1, cfg->rl.mini_batches);
    rollout_session ss;
    dk_status st = rollout_session_init(&ss, cfg, most_local > 0 ? most_local : 1, (int)plan.max_tokens);
    if (st != DK_OK) {
        rollout_session_free(&ss);
        return st;
    }
    model *m = &ss.r.model;
    comm *cm = &ss.r.comm;
    const int lead = cm->rank == 0; /* the rank that prints and writes */
    int t0, t1; /* this rank's tasks of every step */
    rl_gather_task_range(n_tasks, cm->rank, cm->world, &t0, &t1);
    const int n_local = (t1 - t0) * S;
    const model_config mc = m->cfg;
    ops_ctx *ctx = &ss.r.ctx;
    /* Sharded: the shards are the optimizer's state (zero_step); else optim.c's. */
    zero *z = ss.r.sharded ? &ss.r.zero : NULL;
    optim opt;
    memset(&opt, 0, sizeof opt);
    optim_config oc = run_setup_optim_config(cfg);
    if (!z) optim_init(&opt, ctx, &oc, &m->cfg, &m->params);
    metrics_log ml = {0};
    model ref;
    int have_ref = 0;
    int start = 0;
    ckpt_shards_io zio;
    if (z) {
        /* The frozen reference: the initial weights' act shards, kept before
         * a resume replaces them (a resumed run gets the same reference). */
        if (cfg->rl.kl_coef > 0) zero_keep_reference(z);
        zio = zero_ckpt_io(z);
        int t = zero_step_count(z);
        st = ckpt_resume_shards(cfg, &m->cfg, &m->layout, &zio, &start, &t);
        zero_set_step_count(z, t);
    } else {
        st = ckpt_resume(cfg, m, &opt, &start);
    }
    if (st == DK_OK && !z && cfg->rl.kl_coef > 0) {
        /* The frozen reference is the policy the run started from, rebuilt
         * from the same source (so a resumed run gets the same one). */
        st = model_create(&ref, &mc, &ss.r.ctx, (int)plan.max_tokens, 0);
        have_ref = st == DK_OK;
        if (st == DK_OK) st = run_setup_initial_weights(&ref, cfg);
    }
    int complete = 0;
    if (st == DK_OK) st = run_begin(cfg, start, lead, &complete);
    if (st == DK_OK && !complete && lead) st = metrics_open(&ml, cfg->run.dir);

    lr_schedule sched = {cfg->train.schedule, cfg->train.lr, cfg->train.min_lr, cfg->train.warmup_steps, cfg->run.steps};
    adv_config ac;
    adv_config_default(&ac);
    ac.estimator = cfg->rl.advantage;
    ac.gamma = cfg->rl.gamma;
    prs_config pc;
    prs_config_default(&pc);
    pc.mode = cfg->rl.prs;
    pc.threshold = cfg->rl.prs_threshold;
    pc.seed = (uint64_t)cfg->run.seed;
    const size_t cells = (size_t)B * turns;
    float *rewards = dk_calloc(cells, sizeof(float)), *coverage = dk_calloc(cells, sizeof(float));
    float *adv = dk_calloc(cells, sizeof(float));
    uint8_t *valid = dk_calloc(cells, 1), *correct = dk_calloc(cells, 1);
    rl_task *batch_tasks = dk_calloc((size_t)n_tasks, sizeof *batch_tasks);
    int64_t *task_ids = dk_calloc((size_t)n_tasks, sizeof *task_ids);
    int64_t *task_keys = dk_calloc((size_t)n_tasks, sizeof *task_keys);
    rl_rollout *ro_local = dk_calloc((size_t)B, sizeof *ro_local);
    /* The whole batch: this rank's own rollouts at world 1, else gathered. */
    rl_rollout *ro = cm->world > 1 ? dk_calloc((size_t)B, sizeof *ro) : ro_local;
    int lost_steps = 0; /* steps in a row with evaluations the judge could not run */

    for (int step = start; step < cfg->run.steps && st == DK_OK && !complete; step++) {
        double t_step = dk_now();
        /* The rollout phase: the training buffers go first, so its peak is
         * what it adds to what both phases keep (mem_base). */
        run_setup_train_release(&ss.r);
        const size_t mem_base = ops_mem_bytes(ctx);
        ops_mem_peak_reset(ctx);
        st = rollout_session_begin(&ss);
        if (st != DK_OK) break;
        for (int i = 0; i < n_tasks; i++) {
            int k = task_at(cfg, (long)step * n_tasks + i, ss.es.n_tasks);
            batch_tasks[i] = ss.es.list[k];
            task_ids[i] = k;
        }
        /* Repeats of a task in the step draw their own conversations. */
        rl_task_keys(task_ids, n_tasks, ss.es.n_tasks, task_keys);
        rl_rollout_config rc;
        rollout_session_config(&ss, cfg, step, task_keys, &rc);
        rc.task_keys = task_keys + t0;
        rl_rollout_stats rs;
        memset(&rs, 0, sizeof rs);
        if (t1 > t0) st = rl_rollout_batch(ss.eng, ss.r.tok, ss.es.env, batch_tasks + t0, t1 - t0, S, &rc, ro_local, &rs);
        if (st != DK_OK) break;
        /* A batch the judge could not score is trained on (its turns count as
         * errors) unless it is one of fail_step_after in a row. The count is
         * the job's, so every rank takes the same decision. */
        double lost_all = (double)ss.es.env->judge_lost;
        ss.es.env->judge_lost = 0;
        if (cm->world > 1) comm_all_reduce_host(cm, &lost_all, 1);
        const long judge_lost = (long)lost_all;
        lost_steps = judge_lost > 0 ? lost_steps + 1 : 0;
        if (cfg->kernelgym.fail_step_after > 0 && lost_steps >= cfg->kernelgym.fail_step_after) {
            rl_rollout_free(ss.eng, ro_local, n_local);
            st = dk_fail(DK_ERR_RUNTIME,
                         "step %d: %ld evaluations could not run; KernelGym was unreachable for %d steps in a row "
                         "([kernelgym] fail_step_after = %d, reconnect_s = %g)",
                         step + 1, judge_lost, lost_steps, cfg->kernelgym.fail_step_after, cfg->kernelgym.reconnect_s);
            break;
        }
        if (cm->world > 1) {
            st = rl_gather_rollouts(cm, ro_local, n_local, t0, ro, B);
            if (st != DK_OK) break;
            rollout_stats_all_reduce(cm, &rs);
        }

        rl_batch_cells(ro, B, turns, rewards, valid, correct, coverage);
        prs_stats ps;
        prs_apply(&pc, step, n_tasks, S, turns, task_keys, correct, coverage, valid, &ps);
        st = adv_compute(&ac, n_tasks, S, turns, rewards, valid, NULL, adv);
        if (st != DK_OK) break;

        rl_batch b;
        /* This rank trains on the sequences it rolled out. */
        const size_t c0 = (size_t)t0 * S * turns;
        rl_batch_build(&b, ro + (size_t)t0 * S, n_local, turns, adv + c0, valid + c0);
        /* What needs the rollouts' sequences, before the engine goes. */
        rl_step_summary sum;
        memset(&sum, 0, sizeof sum);
        if (lead) {
            rl_metrics_summarise(&sum, ro, B, turns, rewards, &ps);
            sum.judge_lost = judge_lost;
            st = rl_dump_rollouts(cfg->run.dir, step + 1, ro, B, batch_tasks, ss.r.tok);
        }
        rl_rollout_free(ss.eng, ro_local, n_local);
        const size_t mem_rollout_peak = ops_mem_peak(ctx);
        dk_status end = rollout_session_end(&ss); /* the train phase */
        if (st == DK_OK) st = end;
        ops_mem_peak_reset(ctx);
        if (st == DK_OK && have_ref) st = rl_forward_logprobs(&ref, &b, &plan, inv_temp, b.logp_ref, NULL, NULL);
        if (st == DK_OK && z && cfg->rl.kl_coef > 0) {
            zero_use_reference(z, 1);
            st = rl_forward_logprobs(m, &b, &plan, inv_temp, b.logp_ref, NULL, cm);
            zero_use_reference(z, 0);
        }
        rl_update_config uc;
        ppo_config_default(&uc.ppo);
        uc.ppo.clip_low = cfg->rl.clip_low;
        uc.ppo.clip_high = cfg->rl.clip_high;
        uc.ppo.dual_clip = cfg->rl.dual_clip;
        uc.ppo.agg = cfg->rl.loss_agg;
        uc.ppo.kl_coef = cfg->rl.kl_coef;
        uc.ppo.entropy_coef = cfg->rl.entropy_coef;
        uc.ppo.tis_cap = cfg->rl.tis_cap;
        uc.epochs = cfg->rl.ppo_epochs;
        uc.mini_batches = cfg->rl.mini_batches;
        uc.plan = plan;
        uc.inv_temp = inv_temp;
        uc.lr = lr_at(&sched, step);
        uc.c = cm;
        uc.seq0 = t0 * S;
        uc.n_global = B;
        uc.z = z;
        rl_update_stats us;
        memset(&us, 0, sizeof us);
        if (st == DK_OK) st = rl_update(m, &opt, &b, &uc, &us);
        us.mem_base = mem_base;
        us.mem_rollout_peak = mem_rollout_peak;
        us.mem_infer_copy = ss.infer_bytes;
        us.mem_kv_cache = ss.kv_bytes;
        us.mem_train_peak = ops_mem_peak(ctx);
        us.mem_bytes = ops_mem_bytes(ctx);
        if (st == DK_OK && lead) {
            double step_s = dk_now() - t_step;
            rl_metrics_write(&ml, step + 1, &sum, &rs, &us, uc.lr, step_s);
            rl_metrics_print(step + 1, cfg->run.steps, &sum, &rs, &us, step_s);
        }
        rl_batch_free(&b);
        if (cm->world > 1) rl_gather_free(ro, B);
        if (st != DK_OK) break;
        int every = cfg->ckpt.every;
        if (!((every > 0 && (step + 1) % every == 0) || step + 1 == cfg->run.steps)) continue;
        if (z) {
            /* Every rank writes its slices; rank 0's failure to mark the
             * logs reaches the others through the first sync of the save. */
            ckpt_state cs = {step + 1, (long)(step + 1) * n_tasks, (uint64_t)cfg->run.seed, cm->world};
            st = lead ? run_logs_mark(cfg->run.dir, step + 1) : DK_OK;
            st = ckpt_shards_sync(&zio, st, "marking the logs");
            if (st == DK_OK)
                st = ckpt_save_shards(cfg->run.dir, &m->cfg, &m->layout, zero_step_count(z), &zio, cfg, &cs,
                                      cfg->ckpt.keep, CKPT_MAX_SHARD_BYTES);
        } else if (lead) {
            /* Every rank holds the same weights and optimizer state: rank
             * 0's are the job's. */
            ckpt_state cs = {step + 1, (long)(step + 1) * n_tasks, (uint64_t)cfg->run.seed, 1};
            st = run_logs_mark(cfg->run.dir, step + 1);
            if (st == DK_OK) st = ckpt_save(cfg->run.dir, m, &opt, cfg, &cs, cfg->ckpt.keep);
        }
        if (st == DK_OK && lead) printf("checkpoint: %s/ckpt/step_%08d\n", cfg->run.dir, step + 1);
    }
    free(rewards);
    free(coverage);
    free(adv);
    free(valid);
    free(correct);
    free(batch_tasks);
    free(task_ids);
    free(task_keys);
    if (ro != ro_local) free(ro);
    free(ro_local);
    if (lead) metrics_close(&ml);
    if (have_ref) model_free(&ref);
    if (!z) optim_free(&opt, ctx);
    rollout_session_free(&ss);
    return st;
}
