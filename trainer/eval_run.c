/* eval_run.c: the eval mode of eval_run.h. Tasks go through in batches of
 * train.batch_size conversations, one sample each; the model's answers are
 * judged by the run's environment exactly as in RL. */
#include "trainer/eval_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/eval_report.h"
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
    rl_rollout *ro = dk_calloc((size_t)n, sizeof *ro);
    int64_t *keys = dk_calloc((size_t)n, sizeof *keys);
    for (int i = 0; i < n; i++) keys[i] = i;
    rl_rollout_stats total = {0};
    for (int i0 = 0; i0 < n && st == DK_OK; i0 += B) {
        int nb = i0 + B <= n ? B : n - i0;
        printf("eval: tasks %d-%d of %d\n", i0 + 1, i0 + nb, n);
        rl_rollout_config rc;
        rollout_session_config(&ss, cfg, 0, keys + i0, &rc);
        rl_rollout_stats rs;
        st = rl_rollout_batch(ss.eng, ss.r.tok, ss.es.env, ss.es.list + i0, nb, 1, &rc, ro + i0, &rs);
        total.generate_s += rs.generate_s;
        total.env_s += rs.env_s;
        total.sampled_tokens += rs.sampled_tokens;
        /* Conversations keep their tokens for the report but give back their cache pages. */
        for (int k = 0; k < nb && st == DK_OK; k++) gen_seq_drop_cache(ss.eng, ro[i0 + k].seq);
        /* rl_rollout_batch numbers tasks within its batch: make them global. */
        for (int k = 0; k < nb; k++) ro[i0 + k].task = i0 + k;
    }
    if (st == DK_OK) {
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
    rl_rollout_free(ss.eng, ro, n);
    free(ro);
    free(keys);
    rollout_session_free(&ss);
    return st;
}
