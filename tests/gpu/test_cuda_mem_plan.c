/* test_cuda_mem_plan.c: the memory plan (trainer/mem_plan.h) of one GPU
 * against what the CUDA backend really takes, for the Qwen3-0.6B and
 * Qwen3-1.7B shapes (tied, q/k norm; tools/bench/bench_train.c's), SFT at
 * world 1 (nothing sharded), 4 sequences of 4096 tokens per micro-batch,
 * recompute none and layer.
 *
 * Measured with cudaMemGetInfo (kernels/device.h): free memory once the
 * process's CUDA context exists, then after ops_ctx_init, model_create
 * (and model_keep_logits where the plan keeps the lm head's logits, as a
 * run does), optim_init and one optimizer step (forward, backward, AdamW).
 * Checks:
 *   - exact: model_device_bytes equals the plan's parameter, gradient,
 *     activation and kept-logits rows; the context's scratch and cuBLASLt workspace equal
 *     the plan's rows (the sizes the plan assumes are the ones allocated);
 *   - within 10%: the memory the run took (free before - free after)
 *     against the plan without its CUDA-context estimate, and the memory in
 *     use on the device (total - free after) against the whole train phase,
 *     context estimate included. What the plan cannot see (cudaMalloc
 *     rounding, cuBLASLt's own handle memory, kernel images loaded on first
 *     launch) is what the margin is for.
 *
 * Then RL sharded at world 1 (what DK_ZERO=1 runs; mem_plan_make_ex), the
 * 0.6B shape, recompute layer, 16 rollouts of 4096 tokens, through the
 * `mpi` comm backend (no NCCL buffers): the train phase (shards, the
 * working set, activations, one forward, backward and zero_step), then the
 * rollout phase as trainer/rollout_session.c makes it (working set and
 * activations freed, the inference copy gathered, the engine created with
 * the plan's KV cache). Checks:
 *   - exact: zero's shards and working set, the inference copy and the
 *     engine's KV cache are the plan's rows;
 *   - within 10%: what each phase took (cudaMemGetInfo) against the plan's
 *     phase without its CUDA-context estimate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tests/check.h"
#include "trainer/mem_plan.h"
#include "trainer/micro_batch.h"
#include "trainer/optim.h"
#include "dist/comm.h"
#include "model/generate.h"
#include "model/param_buffers.h"
#include "trainer/rollout_session.h"
#include "trainer/zero.h"

#define TOL 0.10
#define SEQS 4
#define SEQ_LEN 4096

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

static double gb(size_t b) { return (double)b / 1e9; }

/* One optimizer step (optim o, or zero z when set) over T / SEQ_LEN packed
 * sequences of random tokens with a mean-NLL loss; the gradient norm. */
static double train_step(model *m, int T, optim *o, zero *z) {
    const int seqs = T / SEQ_LEN;
    int32_t *tokens = dk_malloc((size_t)T * sizeof(int32_t)), *targets = dk_malloc((size_t)T * sizeof(int32_t));
    int32_t *cu = dk_malloc((size_t)(seqs + 1) * sizeof(int32_t));
    float *dlogprob = dk_malloc((size_t)T * sizeof(float));
    for (int t = 0; t < T; t++) tokens[t] = (int32_t)(dk_mix64((uint64_t)t) % (uint64_t)m->cfg.vocab_size);
    for (int s = 0; s <= seqs; s++) cu[s] = s * SEQ_LEN;
    for (int t = 0; t < T; t++) {
        targets[t] = (t + 1) % SEQ_LEN ? tokens[t + 1] : -1;
        dlogprob[t] = targets[t] >= 0 ? -1.0f / (float)T : 0.0f;
    }
    model_batch b = {T, seqs, tokens, NULL, cu, targets};
    model_zero_grad(m);
    must(model_forward(m, &b, 1.0f), "model_forward");
    ops_upload(m->ctx, m->dlogprob, dlogprob, (size_t)T * sizeof(float));
    model_backward(m, m->dlogprob, NULL);
    double norm = z ? zero_step(z, 1e-5) : optim_step(o, m->ctx, &m->params, &m->grads, 1e-5);
    ops_sync(m->ctx);
    free(tokens);
    free(targets);
    free(cu);
    free(dlogprob);
    return norm;
}

static void run_case(const char *name, const char *hidden, const char *inter, const char *recompute) {
    char h[64], i[64], r[64];
    snprintf(h, sizeof h, "model.hidden_size=%s", hidden);
    snprintf(i, sizeof i, "model.intermediate_size=%s", inter);
    snprintf(r, sizeof r, "train.recompute=%s", recompute);
    const char *ov[] = {"run.mode=sft", "run.device=cuda", "model.arch=qwen3", "model.vocab_size=151936", h, i,
                        "model.n_layers=28", "model.n_heads=16", "model.n_kv_heads=8", "model.head_dim=128",
                        "model.max_position=40960", "model.tie_embeddings=true", "data.max_length=4096",
                        "train.batch_size=4", "train.grad_accum=1", r};
    dk_config cfg;
    must(config_load(&cfg, NULL, (int)(sizeof ov / sizeof ov[0]), (char **)ov), "config_load");
    model_config mc;
    must(config_model(&cfg, &mc), "config_model");
    const int T = (int)micro_plan_make(&cfg, cfg.train.batch_size, 1).max_tokens;
    CHECK(T == SEQS * SEQ_LEN, "%s: micro-batch of %d tokens, want %d", name, T, SEQS * SEQ_LEN);

    const size_t total = device_total_bytes(0);
    mem_plan p;
    must(mem_plan_make(&p, &cfg, &mc, 1, DK_DEVICE_CUDA, total, 0), "mem_plan_make");
    printf("== %s, recompute %s\n", name, recompute);
    mem_plan_print(&p, stdout);

    (void)device_free_bytes(0); /* the context exists from here on */
    const size_t free0 = device_free_bytes(0);

    ops_ctx ctx;
    must(ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, model_scratch_bytes(&mc, T)), "ops_ctx_init");
    model m;
    must(model_create(&m, &mc, &ctx, T, (model_recompute)cfg.train.recompute), "model_create");
    if (p.keep_logits) model_keep_logits(&m); /* as run_setup_init does where the plan has room */
    model_init_random(&m, 1, 0.02f);
    optim_config oc = {0.9f, 0.999f, 1e-8f, 0.01f, 1.0f};
    optim o;
    optim_init(&o, &ctx, &oc, &mc, &m.params);

    /* One step over SEQS packed sequences of random tokens. */
    double norm = train_step(&m, T, &o, NULL);
    CHECK(isfinite(norm) && norm > 0, "%s: gradient norm %g", name, norm);
    const size_t free1 = device_free_bytes(0);

    /* The sizes the plan assumes are the ones allocated. */
    const size_t model_rows = p.bytes[MEM_PARAMS][MEM_TRAIN] + p.bytes[MEM_GRADS][MEM_TRAIN] +
                              p.bytes[MEM_ACTIVATIONS][MEM_TRAIN] + p.bytes[MEM_KEEP_LOGITS][MEM_TRAIN];
    CHECK(model_rows == model_device_bytes(&m), "%s: plan's model rows %zu bytes, model_device_bytes %zu", name,
          model_rows, model_device_bytes(&m));
    CHECK(p.bytes[MEM_SCRATCH][MEM_TRAIN] == ctx.scratch_size, "%s: scratch row %zu, context %zu", name,
          p.bytes[MEM_SCRATCH][MEM_TRAIN], ctx.scratch_size);
    CHECK(p.bytes[MEM_BLASLT][MEM_TRAIN] == ctx.blaslt_ws_size, "%s: cuBLASLt row %zu, context %zu", name,
          p.bytes[MEM_BLASLT][MEM_TRAIN], ctx.blaslt_ws_size);
    CHECK(p.fits, "%s: the plan does not fit the device", name);

    /* What the run took, against the plan. */
    const size_t planned_run = p.total[MEM_TRAIN] - p.bytes[MEM_CONTEXT][MEM_TRAIN];
    const size_t took = free0 - free1, in_use = total - free1;
    const double err_run = ((double)took - (double)planned_run) / (double)planned_run;
    const double err_all = ((double)in_use - (double)p.total[MEM_TRAIN]) / (double)p.total[MEM_TRAIN];
    printf("%s, recompute %s: planned %.3f GB, the run took %.3f GB (%+.1f%%); in use %.3f GB against the train "
           "phase's %.3f GB (%+.1f%%); context and other processes before the run: %.3f GB\n",
           name, recompute, gb(planned_run), gb(took), 100 * err_run, gb(in_use), gb(p.total[MEM_TRAIN]),
           100 * err_all, gb(total - free0));
    CHECK(fabs(err_run) <= TOL, "%s: took %.3f GB, planned %.3f GB", name, gb(took), gb(planned_run));
    CHECK(fabs(err_all) <= TOL, "%s: %.3f GB in use, train phase %.3f GB", name, gb(in_use), gb(p.total[MEM_TRAIN]));

    optim_free(&o, &ctx);
    model_free(&m);
    ops_ctx_free(&ctx);
}

static void check_phase(const char *what, size_t took, size_t planned) {
    const double err = ((double)took - (double)planned) / (double)planned;
    printf("rl sharded, %s phase: planned %.3f GB, took %.3f GB (%+.1f%%)\n", what, gb(planned), gb(took), 100 * err);
    CHECK(fabs(err) <= TOL, "rl sharded, %s phase: took %.3f GB, planned %.3f GB", what, gb(took), gb(planned));
}

static void run_rl_sharded(void) {
    const char *ov[] = {"run.mode=rl", "run.device=cuda", "model.arch=qwen3", "model.vocab_size=151936",
                        "model.hidden_size=1024", "model.intermediate_size=3072", "model.n_layers=28",
                        "model.n_heads=16", "model.n_kv_heads=8", "model.head_dim=128", "model.max_position=40960",
                        "model.tie_embeddings=true", "data.max_length=4096", "train.batch_size=16",
                        "train.grad_accum=4", "rl.n_samples=4", "train.recompute=layer"};
    dk_config cfg;
    must(config_load(&cfg, NULL, (int)(sizeof ov / sizeof ov[0]), (char **)ov), "config_load");
    model_config mc;
    must(config_model(&cfg, &mc), "config_model");
    const size_t total = device_total_bytes(0);
    mem_plan p;
    must(mem_plan_make_ex(&p, &cfg, &mc, 1, 1, DK_DEVICE_CUDA, total, 0), "mem_plan_make_ex");
    printf("== rl, sharded at world 1, recompute layer\n");
    mem_plan_print(&p, stdout);
    const int T = p.train_tokens;
    const size_t ctx_est = p.bytes[MEM_CONTEXT][MEM_TRAIN];

    (void)device_free_bytes(0);
    const size_t free0 = device_free_bytes(0);
    ops_ctx ctx;
    must(ops_ctx_init(&ctx, DK_DEVICE_CUDA, 0, model_scratch_bytes(&mc, T)), "ops_ctx_init");
    comm c;
    must(comm_open(&c, &ctx, COMM_MPI, 60), "comm_open");
    model m;
    must(model_create_ex(&m, &mc, &ctx, T, MODEL_RECOMPUTE_LAYER, 0), "model_create_ex");
    if (p.keep_logits) model_keep_logits(&m);
    optim_config oc = {0.9f, 0.999f, 1e-8f, 0.01f, 1.0f};
    zero z;
    must(zero_init(&z, &m, &c, &oc), "zero_init");
    {
        param_buffers host;
        param_buffers_alloc_host(&host, &m.layout, mc.n_layers, mc.tie_embeddings, sizeof(float));
        param_init_random(&host, &m.layout, &mc, 1, 0.02f);
        zero_load_host(&z, &host);
        param_buffers_free_host(&host);
    }
    size_t shards = 0;
    for (int r = MEM_PARAMS; r <= MEM_GRADS; r++) shards += p.bytes[r][MEM_TRAIN];
    const size_t gathered = p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN] + p.bytes[MEM_GATHER_GRADS][MEM_TRAIN];
    CHECK(z.device_bytes == shards + gathered, "rl sharded: zero holds %zu bytes, the plan's rows %zu + %zu",
          z.device_bytes, shards, gathered);

    /* The train phase: one packed micro-batch of 4 rollouts. */
    double norm = train_step(&m, T, NULL, &z);
    CHECK(isfinite(norm) && norm > 0, "rl sharded: gradient norm %g", norm);
    check_phase("train", free0 - device_free_bytes(0), p.total[MEM_TRAIN] - ctx_est);

    /* The rollout phase, as rollout_session_begin makes it. */
    zero_working_release(&z);
    model_free(&m);
    model view;
    memset(&view, 0, sizeof view);
    view.cfg = mc;
    param_layout_init(&view.layout, &mc);
    view.ctx = &ctx;
    view.params.layers = dk_calloc((size_t)mc.n_layers, sizeof(void *));
    CHECK(zero_full_bytes(&z) == p.bytes[MEM_INFER_COPY][MEM_ROLLOUT], "rl sharded: inference copy %zu bytes, plan %zu",
          zero_full_bytes(&z), p.bytes[MEM_INFER_COPY][MEM_ROLLOUT]);
    zero_gather_full(&z, &view.params);
    gen_config gc;
    rollout_session_gen_config(&cfg, &mc, p.rollout_seqs, &gc);
    gc.cache_bytes = p.bytes[MEM_KV_CACHE][MEM_ROLLOUT];
    gen_engine *eng = NULL;
    must(gen_create(&eng, &view, &gc), "gen_create");
    const gen_config *got = gen_get_config(eng);
    const size_t kv = (size_t)got->n_pages * gen_page_bytes(&mc, &ctx, got->page_size);
    CHECK(kv == p.bytes[MEM_KV_CACHE][MEM_ROLLOUT], "rl sharded: KV cache %zu bytes, plan %zu", kv,
          p.bytes[MEM_KV_CACHE][MEM_ROLLOUT]);
    ops_sync(&ctx);
    check_phase("rollout", free0 - device_free_bytes(0), p.total[MEM_ROLLOUT] - ctx_est);

    gen_free(eng);
    zero_full_free(&z, &view.params);
    free(view.params.layers);
    zero_free(&z);
    comm_close(&c);
    ops_ctx_free(&ctx);
}

int main(int argc, char **argv) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("no CUDA GPU or no CUDA op table in this build: skipped\n");
        return 77;
    }
    comm_launch(&argc, &argv);
    run_case("qwen3-0.6b", "1024", "3072", "none");
    run_case("qwen3-0.6b", "1024", "3072", "layer");
    run_case("qwen3-1.7b", "2048", "6144", "none");
    run_case("qwen3-1.7b", "2048", "6144", "layer");
    run_rl_sharded();
    int rc = check_report();
    comm_finish();
    return rc;
}
