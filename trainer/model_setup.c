/* model_setup.c: device, tokenizer and model for a run, with the checks that
 * tie them together (the tokenizer's ids must fit the embedding table). */
#include "trainer/model_setup.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "trainer/mem_plan.h"

/* Refuses a model that cannot fit the device, before anything is
 * allocated: a clear message instead of an out-of-memory abort halfway
 * through planning. On CUDA that is the memory plan (trainer/mem_plan.h) of
 * one rank holding the whole model; on the CPU, host memory against the
 * weights, gradients, AdamW state and op scratch. */
static dk_status check_fits(const dk_config *cfg, const model_config *mc, size_t scratch, int max_tokens) {
    if (cfg->run.device == DK_DEVICE_CUDA) return mem_plan_check_device(cfg, mc, 0, 1, max_tokens);
    const double n = (double)model_config_n_params(mc);
    /* fp32 weights + fp32 gradients + fp32 m and v + op scratch */
    const double need = n * (4 + 4 + 8) + (double)scratch;
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
        return dk_fail(DK_ERR_USAGE,
                       "[model] %.2fB parameters need about %.0f GB on %s for weights, gradients, AdamW state and "
                       "op scratch (%.1f GB of it for batches of %d tokens), but %.0f GB are there: use a smaller "
                       "model, shorter [data] max_length or a device with more memory",
                       n / 1e9, need / 1e9, ops_device_name(cfg->run.device), scratch / 1e9, max_tokens, have / 1e9);
    return DK_OK;
}

dk_status run_setup_init(run_setup *r, const dk_config *cfg, int max_tokens, size_t extra_scratch) {
    memset(r, 0, sizeof *r);
    model_config mc;
    DK_TRY(config_model(cfg, &mc));

    dk_status st = tokenizer_load(cfg->tokenizer.path, &r->tok);
    if (st != DK_OK) return dk_wrap(DK_ERR_USAGE, "[tokenizer] path: ");
    size_t scratch = model_scratch_bytes(&mc, max_tokens);
    if (extra_scratch > scratch) scratch = extra_scratch;
    DK_TRY(check_fits(cfg, &mc, scratch, max_tokens));
    DK_TRY(ops_ctx_init(&r->ctx, cfg->run.device, 0, scratch));
    r->ctx_ready = 1;
    DK_TRY(model_create(&r->model, &mc, &r->ctx, max_tokens, cfg->train.recompute));
    r->model_ready = 1;
    DK_TRY(run_setup_initial_weights(&r->model, cfg));
    /* Checked after loading so a bad checkpoint is reported as what it is. */
    int tv = tokenizer_vocab_size(r->tok);
    if (tv > mc.vocab_size)
        return dk_fail(DK_ERR_USAGE, "%s has %d tokens but the model's vocab_size is %d: ids would overflow the embedding",
                       cfg->tokenizer.path, tv, mc.vocab_size);
    printf("model: %s, %d layers, hidden %d, %d heads (%d kv), vocab %d, %.2fM parameters, %.1f MB on %s\n",
           model_arch_name(mc.arch), mc.n_layers, mc.hidden_size, mc.n_heads, mc.n_kv_heads, mc.vocab_size,
           model_config_n_params(&mc) / 1e6, model_device_bytes(&r->model) / 1e6, ops_device_name(cfg->run.device));
    return DK_OK;
}

dk_status run_setup_initial_weights(model *m, const dk_config *cfg) {
    if (!cfg->model.path[0]) {
        model_init_random(m, (uint64_t)cfg->run.seed, (float)cfg->model.init_std);
        return DK_OK;
    }
    dk_status st = model_load_hf(m, cfg->model.path);
    return st == DK_OK ? DK_OK : dk_wrap(st, "[model] path = %s: ", cfg->model.path);
}

void run_setup_free(run_setup *r) {
    if (r->model_ready) model_free(&r->model);
    if (r->ctx_ready) ops_ctx_free(&r->ctx);
    if (r->tok) tokenizer_free(r->tok);
    memset(r, 0, sizeof *r);
}
