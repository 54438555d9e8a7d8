/* sft.c: the SFT loop. Each optimizer step takes batch_size conversations in
 * a keyed shuffled order, splits them into grad_accum packed micro-batches
 * (variable-length sequences, no padding), and minimises the mean negative
 * log-likelihood of the assistant tokens over the whole step: every target
 * token weighs the same whichever micro-batch it falls in.
 *
 * Data parallel: the step's sequences, their order and the micro-batches do
 * not depend on the world size; each rank runs its contiguous slice of every
 * micro-batch (an empty slice runs one masked token, so every rank makes the
 * same calls the sharded model's collectives need), every token's gradient is
 * divided by the step's global target count, and the sharded gradients are
 * summed over ranks. Any world size thus computes the same step up to the
 * order of float sums. */
#include "trainer/sft.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm.h"
#include "data/sft_data.h"
#include "trainer/checkpoint.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/run_begin.h"
#include "trainer/run_logs.h"
#include "trainer/micro_batch.h"
#include "trainer/model_setup.h"
#include "trainer/optim.h"
#include "trainer/zero_ckpt.h"

/* Host staging for one packed micro-batch. */
typedef struct {
    int32_t *tokens, *targets, *cu;
    float *dlogprob, *logprob;
    int T, n_seqs, n_targets;
} packed;

static void pack(packed *p, const sft_dataset *ds, const int *idx, int n) {
    if (n == 0) { /* a rank with nothing in this micro-batch: one masked token */
        p->T = 1;
        p->n_seqs = 1;
        p->n_targets = 0;
        p->tokens[0] = 0;
        p->targets[0] = -1;
        p->cu[0] = 0;
        p->cu[1] = 1;
        return;
    }
    p->T = 0;
    p->n_seqs = n;
    p->n_targets = 0;
    p->cu[0] = 0;
    for (int s = 0; s < n; s++) {
        const sft_example *e = &ds->ex[idx[s]];
        for (int i = 0; i < e->n; i++) {
            int t = p->T + i;
            p->tokens[t] = e->ids[i];
            p->targets[t] = (i + 1 < e->n && e->mask[i + 1]) ? e->ids[i + 1] : -1;
            p->n_targets += p->targets[t] >= 0;
        }
        p->T += e->n;
        p->cu[s + 1] = p->T;
    }
}

dk_status sft_run(const dk_config *cfg) {
    const int B = cfg->train.batch_size;
    const micro_plan plan = micro_plan_make(cfg, B, 1);
    /* A rank runs its slice of each micro-batch: at most ceil(seqs / world)
     * of its sequences when the micro-batch counts sequences, the whole
     * token bound when it counts tokens. The activations are planned for
     * that, as trainer/mem_plan.c plans them. */
    const int world = comm_where().world;
    long rank_tokens = plan.max_tokens;
    if (plan.max_seqs != INT_MAX)
        rank_tokens = (long)((plan.max_seqs + world - 1) / world) * cfg->data.max_length;
    const int max_tokens = (int)(rank_tokens < plan.max_tokens ? rank_tokens : plan.max_tokens);
    run_setup r;
    dk_status st = run_setup_init(&r, cfg, max_tokens, 0);
    if (st != DK_OK) {
        run_setup_free(&r);
        return st;
    }
    sft_dataset ds;
    st = sft_dataset_load(&ds, cfg->data.train, r.tok, cfg->data.max_length);
    if (st != DK_OK) {
        run_setup_free(&r);
        return dk_wrap(st, "[data] train: ");
    }
    printf("data: %s: %d conversations, %ld tokens (dropped: %d longer than %d tokens, %d without assistant tokens)\n",
           cfg->data.train, ds.n, ds.n_tokens, ds.n_too_long, cfg->data.max_length, ds.n_no_target);

    model *m = &r.model;
    ops_ctx *ctx = &r.ctx;
    comm *cm = &r.comm;
    const int lead = cm->rank == 0; /* the rank that prints and writes */
    optim_config oc = run_setup_optim_config(cfg);
    optim opt;
    memset(&opt, 0, sizeof opt);
    if (!r.sharded) optim_init(&opt, ctx, &oc, &m->cfg, &m->params);
    lr_schedule sched = {cfg->train.schedule, cfg->train.lr, cfg->train.min_lr, cfg->train.warmup_steps,
                         cfg->run.steps};
    int start = 0;
    ckpt_shards_io zio;
    if (r.sharded) {
        zio = zero_ckpt_io(&r.zero);
        int t = zero_step_count(&r.zero);
        st = ckpt_resume_shards(cfg, &m->cfg, &m->layout, &zio, &start, &t);
        zero_set_step_count(&r.zero, t);
    } else {
        st = ckpt_resume(cfg, m, &opt, &start);
    }
    if (st != DK_OK) goto done;
    int complete = 0;
    st = run_begin(cfg, start, lead, &complete);
    if (st != DK_OK || complete) goto done;
    metrics_log ml;
    memset(&ml, 0, sizeof ml);
    if (lead) st = metrics_open(&ml, cfg->run.dir);
    if (st != DK_OK) goto done;

    packed p;
    p.tokens = dk_malloc((size_t)max_tokens * sizeof(int32_t));
    p.targets = dk_malloc((size_t)max_tokens * sizeof(int32_t));
    p.cu = dk_malloc((size_t)(B + 1) * sizeof(int32_t));
    p.dlogprob = dk_malloc((size_t)max_tokens * sizeof(float));
    p.logprob = dk_malloc((size_t)max_tokens * sizeof(float));
    int *idx = dk_malloc((size_t)B * sizeof(int)), *len = dk_malloc((size_t)B * sizeof(int));

    for (int step = start; step < cfg->run.steps; step++) {
        double t0 = dk_now();
        double lr = lr_at(&sched, step);
        for (int i = 0; i < B; i++) idx[i] = sft_dataset_index(&ds, (uint64_t)cfg->run.seed, (long)step * B + i);
        /* Count the step's target tokens first: the loss is their mean. */
        long n_targets = 0, n_tokens = 0;
        for (int i = 0; i < B; i++) {
            const sft_example *e = &ds.ex[idx[i]];
            for (int j = 1; j < e->n; j++) n_targets += e->mask[j];
            n_tokens += e->n;
            len[i] = e->n;
        }
        model_zero_grad(m);
        double nll = 0.0;
        for (int s0 = 0, s1; s0 < B; s0 = s1) {
            s1 = micro_next(&plan, len, s0, B);
            /* This rank's slice of the micro-batch. */
            const int n = s1 - s0, a = s0 + (int)((long)n * cm->rank / cm->world);
            const int e = s0 + (int)((long)n * (cm->rank + 1) / cm->world);
            pack(&p, &ds, idx + a, e - a);
            model_batch b = {p.T, p.n_seqs, p.tokens, NULL, p.cu, p.targets};
            st = model_forward(m, &b, 1.0f);
            if (st != DK_OK) goto done_loop;
            for (int t = 0; t < p.T; t++) p.dlogprob[t] = p.targets[t] >= 0 ? -1.0f / (float)n_targets : 0.0f;
            ops_upload(ctx, m->dlogprob, p.dlogprob, (size_t)p.T * sizeof(float));
            model_backward(m, m->dlogprob, NULL);
            ops_download(ctx, p.logprob, m->logprob, (size_t)p.T * sizeof(float));
            for (int t = 0; t < p.T; t++)
                if (p.targets[t] >= 0) nll -= p.logprob[t];
        }
        comm_all_reduce_host(cm, &nll, 1);
        double loss = nll / (double)n_targets;
        double norm = r.sharded ? zero_step(&r.zero, lr) : optim_step(&opt, ctx, &m->params, &m->grads, lr);
        ops_sync(ctx);
        double dt = dk_now() - t0;
        if (!isfinite(loss) || !isfinite(norm)) {
            st = dk_fail(DK_ERR_RUNTIME, "step %d: loss %g, grad norm %g: training diverged (lower [train] lr?)",
                         step + 1, loss, norm);
            goto done_loop;
        }
        if (!lead) goto saved;
        metrics_begin(&ml, step + 1);
        metrics_add(&ml, "loss", loss);
        metrics_add(&ml, "lr", lr);
        metrics_add(&ml, "grad_norm", norm);
        metrics_add(&ml, "tokens", (double)n_tokens);
        metrics_add(&ml, "target_tokens", (double)n_targets);
        metrics_add(&ml, "tokens_per_s", n_tokens / dt);
        metrics_add(&ml, "step_s", dt);
        metrics_add(&ml, "epoch", (double)((long)step * B) / ds.n);
        metrics_end(&ml);
        if ((step + 1) % cfg->run.log_every == 0 || step == 0 || step + 1 == cfg->run.steps)
            printf("step %5d/%d | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s\n", step + 1, cfg->run.steps,
                   loss, lr, norm, n_tokens / dt);
        fflush(stdout);
    saved:;
        int every = cfg->ckpt.every;
        if ((every > 0 && (step + 1) % every == 0) || step + 1 == cfg->run.steps) {
            ckpt_state cs = {step + 1, (long)(step + 1) * B, (uint64_t)cfg->run.seed, cm->world};
            st = lead ? run_logs_mark(cfg->run.dir, step + 1) : DK_OK;
            /* Every rank writes its slices; rank 0's failure to mark the logs
             * reaches the others through the first sync of the save. */
            if (r.sharded) {
                st = ckpt_shards_sync(&zio, st, "marking the logs");
                if (st == DK_OK)
                    st = ckpt_save_shards(cfg->run.dir, &m->cfg, &m->layout, zero_step_count(&r.zero), &zio, cfg,
                                          &cs, cfg->ckpt.keep, CKPT_MAX_SHARD_BYTES);
            } else if (st == DK_OK) {
                st = ckpt_save(cfg->run.dir, m, &opt, cfg, &cs, cfg->ckpt.keep);
            }
            if (st != DK_OK) goto done_loop;
            if (lead) printf("checkpoint: %s/ckpt/step_%08d\n", cfg->run.dir, step + 1);
        }
    }
done_loop:
    free(p.tokens);
    free(p.targets);
    free(p.cu);
    free(p.dlogprob);
    free(p.logprob);
    free(idx);
    free(len);
    if (lead) metrics_close(&ml);
done:
    if (!r.sharded) optim_free(&opt, ctx);
    sft_dataset_free(&ds);
    run_setup_free(&r);
    return st;
}
