/* eval_run.c: the eval mode of eval_run.h. Tasks go through in batches of
 * train.batch_size conversations, one sample each; the model's answers are
 * judged by the run's environment exactly as in RL. At world > 1 every rank
 * holds the whole model and rolls out a contiguous share of each batch
 * (trainer/rl_gather.h: a conversation's draws are keyed by its task, so it
 * rolls out alike on any rank); the rollouts are gathered in task order and
 * rank 0 writes the one report. */
#include "trainer/eval_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/eval_report.h"
#include "trainer/rl_gather.h"
#include "trainer/rl_dump.h"
#include "trainer/rollout_session.h"

dk_status eval_run(const dk_config *cfg) {
    rollout_session ss;
    const int B = cfg->train.batch_size;
    dk_status st = rollout_session_init(&ss, cfg, B, 0);
    if (st != DK_OK) {
        rollout_session_free(&ss);
        return st;
    }
    if (cfg->model.path[0] == '\0')
        printf("eval: note: [model] path is empty, so this evaluates a randomly initialised model\n");
    const int n = ss.es.n_tasks;
    comm *cm = &ss.r.comm;
    const int lead = cm->rank == 0;
    rl_rollout *ro = dk_calloc((size_t)n, sizeof *ro);
    rl_rollout *local = cm->world > 1 ? dk_calloc((size_t)B, sizeof *local) : NULL;
    int64_t *keys = dk_calloc((size_t)n, sizeof *keys);
    for (int i = 0; i < n; i++) keys[i] = i;
    rl_rollout_stats total = {0};
    for (int i0 = 0; i0 < n && st == DK_OK; i0 += B) {
        int nb = i0 + B <= n ? B : n - i0, t0 = 0, t1 = nb;
        printf("eval: tasks %d-%d of %d\n", i0 + 1, i0 + nb, n);
        if (cm->world > 1) rl_gather_task_range(nb, cm->rank, cm->world, &t0, &t1);
        rl_rollout *mine = cm->world > 1 ? local : ro + i0;
        rl_rollout_config rc;
        rollout_session_config(&ss, cfg, 0, keys + i0 + t0, &rc);
        rl_rollout_stats rs;
        memset(&rs, 0, sizeof rs);
        if (t1 > t0) st = rl_rollout_batch(ss.eng, ss.r.tok, ss.es.env, ss.es.list + i0 + t0, t1 - t0, 1, &rc, mine, &rs);
        total.generate_s += rs.generate_s;
        total.env_s += rs.env_s;
        total.sampled_tokens += rs.sampled_tokens;
        /* Conversations keep their tokens for the report but give back their cache pages. */
        for (int k = 0; k < t1 - t0 && st == DK_OK; k++) gen_seq_drop_cache(ss.eng, mine[k].seq);
        if (cm->world > 1) {
            /* Every rank takes part even after its own failure: the gather
             * then fails on every rank instead of waiting for this one. */
            dk_status g = rl_gather_rollouts(cm, local, st == DK_OK ? t1 - t0 : 0, t0, ro + i0, nb);
            rl_rollout_free(ss.eng, local, t1 - t0);
            if (st == DK_OK) st = g;
        }
        /* Batch numbering of tasks becomes global. */
        for (int k = 0; k < nb; k++) ro[i0 + k].task = i0 + k;
    }
    if (cm->world > 1) {
        double tok = (double)total.sampled_tokens;
        comm_all_reduce_host(cm, &tok, 1);
        total.sampled_tokens = (long)tok;
    }
    if (st == DK_OK && lead) {
        eval_summary sum;
        eval_summarise(&sum, ro, n, cfg->rl.max_turns);
        eval_print(stdout, &sum, ro, ss.es.list, n);
        printf("generate %.1fs (%.0f tokens/s), evaluate %.1fs\n", total.generate_s,
               total.generate_s > 0 ? total.sampled_tokens / total.generate_s : 0.0, total.env_s);
        char path[DK_CONFIG_STR + 32];
        snprintf(path, sizeof path, "%s/eval.json", cfg->run.dir);
        st = eval_write_json(path, &sum, ro, ss.es.list, n);
        if (st == DK_OK) st = rl_dump_rollouts(cfg->run.dir, 0, ro, n, ss.es.list, ss.r.tok);
        if (st == DK_OK) printf("wrote %s and %s/rollouts.jsonl\n", path, cfg->run.dir);
    }
    if (cm->world > 1) rl_gather_free(ro, n);
    else rl_rollout_free(ss.eng, ro, n);
    free(ro);
    free(local);
    free(keys);
    rollout_session_free(&ss);
    return st;
}
