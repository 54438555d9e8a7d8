/* rollout_session.c: builds and tears down a rollout_session. */
#include "trainer/rollout_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm.h"
#include "kernels/device.h"
#include "rl/prompts.h"

static dk_status load_template(const char *path, prompt_kind k, char **out) {
    *out = NULL;
    if (!path[0]) return DK_OK;
    dk_status st = prompt_load(path, k, out);
    return st == DK_OK ? DK_OK : dk_wrap(st, k == PROMPT_FIRST ? "[rl] prompt_template: " : "[rl] feedback_template: ");
}

void rollout_session_gen_config(const dk_config *cfg, const model_config *mc, int max_batch, gen_config *gc) {
    memset(gc, 0, sizeof *gc);
    gen_config_defaults(gc);
    gc->max_batch = max_batch;
    gc->max_context = cfg->data.max_length;
    gc->max_step_tokens = cfg->data.max_length < 4096 ? cfg->data.max_length : 4096;
    if (cfg->run.device == DK_DEVICE_CPU) /* room for every conversation at full length */
        gc->cache_bytes = (size_t)max_batch * cfg->data.max_length * 2 * mc->n_layers * mc->n_kv_heads *
                          mc->head_dim * sizeof(float) + (64u << 20);
    else gc->cache_fraction = cfg->rl.kv_cache_fraction;
    gc->cuda_graphs = cfg->rl.decode_graphs;
}

dk_status rollout_session_init(rollout_session *s, const dk_config *cfg, int max_batch, int train_tokens) {
    memset(s, 0, sizeof *s);
    model_config mc;
    DK_TRY(config_model(cfg, &mc));
    gen_config gc;
    rollout_session_gen_config(cfg, &mc, max_batch, &gc);
    int tokens = train_tokens > 0 ? train_tokens : cfg->data.max_length;
    DK_TRY(run_setup_init(&s->r, cfg, tokens, gen_scratch_bytes(&mc, &gc, cfg->run.device)));
    s->gc = gc;
    if (s->r.sharded) {
        s->infer.cfg = s->r.model.cfg;
        s->infer.layout = s->r.model.layout;
        s->infer.ctx = &s->r.ctx;
        s->infer.params.layers = dk_calloc((size_t)mc.n_layers, sizeof(void *));
    }
    if (cfg->run.mode != DK_MODE_RL) DK_TRY(rollout_session_begin(s));
    DK_TRY(load_template(cfg->rl.prompt_template, PROMPT_FIRST, &s->first_t));
    DK_TRY(load_template(cfg->rl.feedback_template, PROMPT_FOLLOWUP, &s->follow_t));
    DK_TRY(rl_env_setup_init(&s->es, cfg, &s->r.comm));
    /* The toy asks its question plainly, not as a kernel task. */
    if (cfg->rl.env == DK_ENV_TOY && !s->first_t) s->first_t = dk_strdup("{source}");
    if (cfg->rl.env == DK_ENV_TOY && !s->follow_t) s->follow_t = dk_strdup("{feedback}");
    s->stop_tokens[s->n_stop++] = tokenizer_token_id(s->r.tok, "<|im_end|>");
    int eot = tokenizer_token_id(s->r.tok, "<|endoftext|>");
    if (eot >= 0) s->stop_tokens[s->n_stop++] = eot;
    return DK_OK;
}

dk_status rollout_session_begin(rollout_session *s) {
    if (s->eng) return DK_OK;
    run_setup_train_release(&s->r);
    model *m = &s->r.model;
    if (s->r.sharded) {
        s->infer_bytes = zero_full_bytes(&s->r.zero);
        zero_gather_full(&s->r.zero, &s->infer.params);
        s->infer_live = 1;
        m = &s->infer;
    }
    /* The cache takes its share of what is free once the rest is in. Ranks
     * that share this GPU (mpi backend) size their caches at about the same
     * moment from the same free memory, so each counts only its part of it:
     * two ranks each taking kv_cache_fraction of all of it ran out. */
    gen_config gc = s->gc;
    if (gc.cache_bytes == 0) {
        const comm_place at = comm_where();
        gc.free_bytes = device_free_bytes(s->r.ctx.gpu) / (size_t)comm_gpu_sharers(&at, device_count());
    }
    DK_TRY(gen_create(&s->eng, m, &gc));
    const gen_config *got = gen_get_config(s->eng);
    s->kv_bytes = (size_t)got->n_pages * gen_page_bytes(&m->cfg, &s->r.ctx, got->page_size);
    return DK_OK;
}

dk_status rollout_session_end(rollout_session *s) {
    if (s->eng) gen_free(s->eng);
    s->eng = NULL;
    if (s->infer_live) zero_full_free(&s->r.zero, &s->infer.params);
    s->infer_live = 0;
    return run_setup_train_restore(&s->r);
}

void rollout_session_free(rollout_session *s) {
    free(s->first_t);
    free(s->follow_t);
    rl_env_setup_free(&s->es);
    if (s->eng) gen_free(s->eng);
    if (s->infer_live) zero_full_free(&s->r.zero, &s->infer.params);
    free(s->infer.params.layers);
    run_setup_free(&s->r);
    memset(s, 0, sizeof *s);
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

void rollout_session_config(rollout_session *s, const dk_config *cfg, int64_t step, const int64_t *task_keys,
                            rl_rollout_config *rc) {
    memset(rc, 0, sizeof *rc);
    rc->max_turns = cfg->rl.max_turns;
    rc->gen.temperature = (float)cfg->rl.temperature;
    rc->gen.top_p = (float)cfg->rl.top_p;
    rc->gen.top_k = cfg->rl.top_k;
    rc->gen.max_new_tokens = cfg->rl.max_new_tokens;
    rc->gen.stop_tokens = s->stop_tokens;
    rc->gen.n_stop_tokens = s->n_stop;
    rc->first_template = s->first_t;
    rc->followup_template = s->follow_t;
    rc->seed = (uint64_t)cfg->run.seed;
    rc->step = step;
    rc->task_keys = task_keys;
    rc->progress = on_progress;
    rc->env_progress = on_env_progress;
    rc->progress_user = &s->bar;
}
