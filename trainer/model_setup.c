/* model_setup.c: device, tokenizer and model for a run, with the checks that
 * tie them together (the tokenizer's ids must fit the embedding table). */
#include "trainer/model_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/mem_plan.h"
#include "trainer/zero_ckpt.h"
#include "common/util.h"
#include "kernels/device.h"
#include "model/param_buffers.h"
#include "model/weights.h"

/* Refuses a model whose weights, gradients and AdamW state cannot fit the
 * host, before anything is allocated: a clear message instead of an
 * out-of-memory abort halfway through planning. A CUDA run checks the memory
 * plan instead (trainer/mem_plan.h), once its GPU is known. */
static dk_status check_fits(const dk_config *cfg, const model_config *mc, size_t scratch, int max_tokens, int sharded,
                            int world) {
    const double n = (double)model_config_n_params(mc);
    /* fp32 weights, gradients, m and v, + op scratch; sharded
     * (trainer/zero.h): 1/world of that state, plus the gathered embedding,
     * final norm and lm head and two layer slots, weights and gradients */
    double need = n * 16 / (sharded ? world : 1) + (double)scratch;
    if (sharded) {
        param_layout pl;
        param_layout_init(&pl, mc);
        need += (double)(pl.embed_size + pl.final_norm_size + pl.lm_head_size + 2 * pl.layer_size) * 8;
    }
    const double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
        return dk_fail(DK_ERR_USAGE,
                       "[model] %.2fB parameters need about %.0f GB on %s for weights, gradients, AdamW state and "
                       "op scratch (%.1f GB of it for batches of %d tokens), but %.0f GB are there: use a smaller "
                       "model, shorter [data] max_length or a device with more memory",
                       n / 1e9, need / 1e9, ops_device_name(cfg->run.device), scratch / 1e9, max_tokens, have / 1e9);
    return DK_OK;
}

static dk_status sharded_weights(run_setup *r, const dk_config *cfg);

/* The model for r->max_tokens in the plan's recompute mode, keeping the lm
 * head's logits where the plan has room for them. */
static dk_status setup_model_create(run_setup *r, const model_config *mc, int own_params) {
    DK_TRY(model_create_ex(&r->model, mc, &r->ctx, r->max_tokens, r->recompute, own_params));
    if (r->keep_logits) model_keep_logits(&r->model);
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
    comm_launch(NULL, NULL); /* a no-op after main's launch */
    const int world = comm_where().world;
    const char *force = getenv("DK_ZERO");
    const int trains = cfg->run.mode == DK_MODE_SFT || cfg->run.mode == DK_MODE_RL;
    r->sharded = trains && (world > 1 || (force && !strcmp(force, "1")));
    if (cfg->run.device == DK_DEVICE_CPU) DK_TRY(check_fits(cfg, &mc, scratch, max_tokens, r->sharded, world));
    DK_TRY(run_setup_device(r, cfg, scratch));
    DK_TRY(mem_plan_run_start(cfg, &mc, r->ctx.gpu, r->sharded ? world : 1, r->sharded, max_tokens, &r->recompute,
                              &r->keep_logits));
    r->max_tokens = max_tokens;
    DK_TRY(setup_model_create(r, &mc, !r->sharded));
    r->model_ready = 1;
    r->training = 1;
    if (r->sharded) {
        optim_config oc = run_setup_optim_config(cfg);
        DK_TRY(zero_init(&r->zero, &r->model, &r->comm, &oc));
        DK_TRY(sharded_weights(r, cfg));
    } else {
        DK_TRY(run_setup_initial_weights(&r->model, cfg));
    }
    /* Checked after loading so a bad checkpoint is reported as what it is. */
    int tv = tokenizer_vocab_size(r->tok);
    if (tv > mc.vocab_size)
        return dk_fail(DK_ERR_USAGE, "%s has %d tokens but the model's vocab_size is %d: ids would overflow the embedding",
                       cfg->tokenizer.path, tv, mc.vocab_size);
    printf("model: %s, %d layers, hidden %d, %d heads (%d kv), vocab %d, %.2fM parameters, %.1f MB on %s\n",
           model_arch_name(mc.arch), mc.n_layers, mc.hidden_size, mc.n_heads, mc.n_kv_heads, mc.vocab_size,
           model_config_n_params(&mc) / 1e6, model_device_bytes(&r->model) / 1e6, ops_device_name(cfg->run.device));
    if (r->sharded)
        printf("dist: %d ranks (%s), ZeRO-3: %.1f MB of shards and working set per rank\n", r->comm.world,
               r->comm.backend == COMM_NCCL ? "nccl" : "mpi", r->zero.device_bytes / 1e6);
    return DK_OK;
}

/* The initial weights, each rank keeping its shards. From model.path every
 * rank reads only its own slices of the HF files (mapped, not read whole).
 * Random weights are made whole on the host (param_init_random draws them
 * in one order): the full fp32 copy is large (59 GB for 14B), so the ranks
 * of a node take turns, one full copy per node at a time. */
static dk_status sharded_weights(run_setup *r, const dk_config *cfg) {
    model *m = &r->model;
    comm *c = &r->comm;
    if (cfg->model.path[0]) {
        ckpt_shards_io io = zero_ckpt_io_init(&r->zero);
        dk_status st = ckpt_shards_init_from_hf(cfg->model.path, &m->cfg, &m->layout, &io);
        return st == DK_OK ? DK_OK : dk_wrap(st, "[model] path = %s: ", cfg->model.path);
    }
    /* The most ranks any node has: every rank takes that many turns. */
    double *local = dk_calloc((size_t)c->world, sizeof(double));
    local[c->rank] = c->at.local_world;
    comm_all_reduce_host(c, local, (size_t)c->world);
    int turns = 1;
    for (int i = 0; i < c->world; i++)
        if ((int)local[i] > turns) turns = (int)local[i];
    free(local);
    for (int turn = 0; turn < turns; turn++) {
        if (turn == c->at.local_rank) {
            param_buffers host;
            param_buffers_alloc_host(&host, &m->layout, m->cfg.n_layers, m->cfg.tie_embeddings, sizeof(float));
            param_init_random(&host, &m->layout, &m->cfg, (uint64_t)cfg->run.seed, (float)cfg->model.init_std);
            zero_load_host(&r->zero, &host);
            param_buffers_free_host(&host);
        }
        comm_barrier(c);
    }
    return DK_OK;
}

optim_config run_setup_optim_config(const dk_config *cfg) {
    optim_config oc = {(float)cfg->train.beta1, (float)cfg->train.beta2, (float)cfg->train.eps,
                       (float)cfg->train.weight_decay, (float)cfg->train.grad_clip};
    return oc;
}

dk_status run_setup_device(run_setup *r, const dk_config *cfg, size_t scratch) {
    comm_launch(NULL, NULL); /* a no-op after main's launch */
    const comm_place at = comm_where();
    _Static_assert((int)DK_COMM_AUTO == (int)COMM_AUTO && (int)DK_COMM_NCCL == (int)COMM_NCCL &&
                       (int)DK_COMM_MPI == (int)COMM_MPI,
                   "dist.backend values are the comm backends, in the same order");
    comm_backend be;
    int gpu = 0;
    const int cuda = cfg->run.device == DK_DEVICE_CUDA;
    DK_TRY(comm_pick((comm_backend)cfg->dist.backend, cuda, cuda ? device_count() : 0, &at, &be, &gpu));
    DK_TRY(ops_ctx_init(&r->ctx, cfg->run.device, gpu, scratch));
    r->ctx_ready = 1;
    DK_TRY(comm_open(&r->comm, &r->ctx, be, cfg->dist.timeout_s));
    r->comm_ready = 1;
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

void run_setup_train_release(run_setup *r) {
    if (!r->sharded || !r->training) return;
    zero_working_release(&r->zero);
    model_config mc = r->model.cfg;
    param_layout pl = r->model.layout;
    model_free(&r->model); /* the activations: the shards are zero's */
    r->model.cfg = mc;     /* what the rollout phase still reads */
    r->model.layout = pl;
    r->model.ctx = &r->ctx;
    r->training = 0;
}

dk_status run_setup_train_restore(run_setup *r) {
    if (!r->sharded || r->training) return DK_OK;
    model_config mc = r->model.cfg;
    DK_TRY(setup_model_create(r, &mc, 0));
    zero_working_restore(&r->zero);
    r->training = 1;
    return DK_OK;
}

void run_setup_free(run_setup *r) {
    if (r->sharded && r->model_ready) zero_free(&r->zero);
    if (r->model_ready && r->training) model_free(&r->model);
    if (r->comm_ready) comm_close(&r->comm);
    if (r->ctx_ready) ops_ctx_free(&r->ctx);
    if (r->tok) tokenizer_free(r->tok);
    memset(r, 0, sizeof *r);
}
