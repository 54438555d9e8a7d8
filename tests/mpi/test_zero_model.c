/* test_zero_model.c: ZeRO-3 (trainer/zero.h) against the unsharded model of the
 * same weights in the same process, on the CPU backend, for an untied Qwen3
 * and a tied Qwen2 fixture shape with 3 layers (odd, so both layer slots
 * take turns unevenly):
 *   - each rank's unit ranges are dist/shard.h's, and its shards hold
 *     exactly its slice of the weights it was given;
 *   - the sharded forward's per-token logprobs equal the unsharded ones bit
 *     for bit (the gathered layers are exact copies);
 *   - after two micro-batches on every rank, each scaled by 1/world, the
 *     reduce-scattered gradient shards equal the unsharded gradients: bit
 *     for bit at world 1, else within 1e-5 of the unit's largest gradient
 *     (the second micro-batch adds onto the first one's sum in another
 *     order, and 1/3 is inexact);
 *   - one AdamW step (eps 1e-3, so an update is smooth in its gradient):
 *     the same global norm (1e-6 relative) and the same parameters (bit for
 *     bit at world 1, else within 1e-6 + 1e-5 relative);
 *   - the shard API round-trips m, v and params;
 *   - the memory plan (trainer/mem_plan.h) of the same shape on the CPU
 *     backend, sharded (mem_plan_make_ex, at world 1 too), counts to the
 *     byte the shards and the gathered working set that zero_init
 *     allocates, and so does ops_mem_bytes;
 *   - the inference copy (zero_gather_full) is every unit whole, bit for
 *     bit the gathered masters (fp32 on the CPU), padding zero;
 *   - the frozen reference (zero_keep_reference before the step): with it
 *     swapped in, the forward after the step gives the first forward's
 *     logprobs bit for bit; swapped out, the stepped model's again;
 *   - the working set released (with the model's activations, as the RL
 *     rollout phase does) frees exactly zero_working_bytes, and restored,
 *     the forward gives the same logprobs bit for bit.
 * Runs at world 1 alone and at 2 and 3 ranks (tests/mpi/test_zero.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/shard.h"
#include "model/param_buffers.h"
#include "tests/check.h"
#include "tests/fixture_models.h"
#include "trainer/mem_plan.h"
#include "trainer/zero.h"

static float *unit_of(const param_buffers *b, int n_layers, int u) {
    if (u == 0) return b->embed;
    if (u <= n_layers) return b->layers[u - 1];
    return u == n_layers + 1 ? b->final_norm : b->lm_head;
}

static void run_arch(comm *c, ops_ctx *ctx, dk_arch arch) {
    const int W = c->world, R = c->rank;
    model_config mc = fixture_model_config(arch);
    mc.n_layers = 3;
    const char *name = model_arch_name(arch);
    model ref, sh;
    DK_ASSERT(model_create(&ref, &mc, ctx, 64, MODEL_RECOMPUTE_NONE) == DK_OK);
    DK_ASSERT(model_create_ex(&sh, &mc, ctx, 64, MODEL_RECOMPUTE_LAYER, 0) == DK_OK);
    model_init_random(&ref, 5, 0.3f);
    param_buffers host;
    param_buffers_alloc_host(&host, &ref.layout, mc.n_layers, mc.tie_embeddings, sizeof(float));
    param_init_random(&host, &ref.layout, &mc, 5, 0.3f);
    optim_config oc = {0.9f, 0.95f, 1e-3f, 0.1f, 0.5f};
    zero z;
    const size_t mem0 = ops_mem_bytes(ctx);
    DK_ASSERT(zero_init(&z, &sh, c, &oc) == DK_OK);
    CHECK(ops_mem_bytes(ctx) - mem0 == z.device_bytes, "%s: ops_mem_bytes grew by %zu, zero_init counts %zu", name,
          ops_mem_bytes(ctx) - mem0, z.device_bytes);
    zero_load_host(&z, &host);
    CHECK(z.n_units == mc.n_layers + 2 + !mc.tie_embeddings, "%s: %d units", name, z.n_units);
    {
        dk_config cfg;
        config_defaults(&cfg);
        cfg.run.mode = DK_MODE_SFT;
        mem_plan p;
        DK_ASSERT(mem_plan_make_ex(&p, &cfg, &mc, W, 1, DK_DEVICE_CPU, (size_t)80e9, 64) == DK_OK);
        size_t shards = 0, gathered = p.bytes[MEM_GATHER_PARAMS][MEM_TRAIN] + p.bytes[MEM_GATHER_GRADS][MEM_TRAIN];
        for (int r = MEM_PARAMS; r <= MEM_GRADS; r++) shards += p.bytes[r][MEM_TRAIN];
        CHECK(shards + gathered == z.device_bytes, "%s, world %d: the plan has %zu + %zu bytes, zero_init allocated %zu",
              name, W, shards, gathered, z.device_bytes);
        CHECK(gathered == zero_working_bytes(&z), "%s, world %d: the plan gathers %zu bytes, the working set is %zu",
              name, W, gathered, zero_working_bytes(&z));
    }
    zero_keep_reference(&z);

    for (int u = 0; u < z.n_units; u++) {
        size_t n, b, e, wb, we;
        zero_unit_range(&z, u, &n, &b, &e);
        shard_range(n, W, R, &wb, &we);
        CHECK(b == wb && e == we, "%s unit %d: range [%zu, %zu) is not shard_range's [%zu, %zu)", name, u, b, e, wb,
              we);
        float *got = dk_malloc((e - b + 1) * sizeof(float));
        zero_shard_get(&z, u, ZERO_MASTER, got);
        CHECK(!memcmp(got, unit_of(&host, mc.n_layers, u) + b, (e - b) * sizeof(float)),
              "%s unit %d: the master shard is not the given slice", name, u);
        free(got);
    }

    /* Two micro-batches: 2 sequences of 7 and 5 tokens, then 1 of 9. */
    int32_t tok[16], tgt[16], cu1[3] = {0, 7, 12}, cu2[2] = {0, 9};
    for (int i = 0; i < 16; i++) {
        tok[i] = (i * 37 + 11) % mc.vocab_size;
        tgt[i] = i % 5 == 4 ? -1 : (i * 13 + 3) % mc.vocab_size;
    }
    model_batch mb[2] = {{12, 2, tok, NULL, cu1, tgt}, {9, 1, tok + 3, NULL, cu2, tgt + 3}};
    float dl[16], lp_ref[16], lp_sh[16], lp0[16];
    model_zero_grad(&ref);
    model_zero_grad(&sh);
    for (int k = 0; k < 2; k++) {
        const int T = mb[k].T;
        DK_ASSERT(model_forward(&ref, &mb[k], 1.0f) == DK_OK);
        DK_ASSERT(model_forward(&sh, &mb[k], 1.0f) == DK_OK);
        memcpy(lp_ref, ref.logprob, T * sizeof(float));
        memcpy(lp_sh, sh.logprob, T * sizeof(float));
        CHECK(!memcmp(lp_ref, lp_sh, T * sizeof(float)), "%s micro-batch %d: sharded logprobs differ", name, k);
        if (k == 0) memcpy(lp0, lp_sh, T * sizeof(float));
        for (int t = 0; t < T; t++) dl[t] = -1.0f;
        memcpy(ref.dlogprob, dl, T * sizeof(float));
        model_backward(&ref, ref.dlogprob, NULL);
        for (int t = 0; t < T; t++) dl[t] = -1.0f / (float)W;
        memcpy(sh.dlogprob, dl, T * sizeof(float));
        model_backward(&sh, sh.dlogprob, NULL);
    }
    int bad = 0;
    double worst = 0;
    for (int u = 0; u < z.n_units; u++) {
        const float *full = unit_of(&ref.grads, mc.n_layers, u), *g = full + z.u[u].begin;
        float top = 0;
        for (size_t i = 0; i < z.u[u].n; i++) top = fmaxf(top, fabsf(full[i]));
        const float tol = W == 1 ? 0.0f : 1e-5f * top;
        for (size_t i = 0; i < z.u[u].end - z.u[u].begin; i++) {
            bad += fabsf(z.u[u].grad[i] - g[i]) > tol;
            double d = fabs(z.u[u].grad[i] - g[i]) / (top + 1e-30);
            if (d > worst) worst = d;
        }
    }
    CHECK(bad == 0, "%s: %d gradient shard elements differ from the unsharded gradients (worst %.2e of the unit's largest)", name,
          bad, worst);

    optim o;
    optim_init(&o, ctx, &oc, &mc, &ref.params);
    double n_ref = optim_step(&o, ctx, &ref.params, &ref.grads, 1e-2);
    double n_sh = zero_step(&z, 1e-2);
    CHECK(fabs(n_ref - n_sh) <= 1e-6 * n_ref, "%s: grad norm %.9g sharded vs %.9g", name, n_sh, n_ref);
    param_buffers got;
    param_buffers_alloc_host(&got, &ref.layout, mc.n_layers, mc.tie_embeddings, sizeof(float));
    zero_gather_host(&z, &got);
    bad = 0;
    worst = 0;
    for (int u = 0; u < z.n_units; u++) {
        const float *a = unit_of(&got, mc.n_layers, u), *b = unit_of(&ref.params, mc.n_layers, u);
        for (size_t i = 0; i < z.u[u].n; i++) {
            float tol = W == 1 ? 0.0f : 1e-6f + 1e-5f * fabsf(b[i]);
            bad += fabsf(a[i] - b[i]) > tol;
            if (fabs(a[i] - b[i]) > worst) worst = fabs(a[i] - b[i]);
        }
    }
    CHECK(bad == 0, "%s: %d parameters differ after one AdamW step (worst %.2e)", name, bad, worst);
    CHECK(zero_step_count(&z) == 1, "%s: step count %d", name, zero_step_count(&z));

    /* The inference copy: every unit whole, then its padding; it takes
     * zero_full_bytes and gives them back. */
    {
        const size_t before = ops_mem_bytes(ctx);
        param_buffers inf = {0};
        inf.layers = dk_calloc((size_t)mc.n_layers, sizeof(void *));
        zero_gather_full(&z, &inf);
        size_t at = 0;
        bad = 0;
        for (int u = 0; u < z.n_units; u++) {
            const float *a = unit_of(&inf, mc.n_layers, u), *b = unit_of(&got, mc.n_layers, u);
            bad += memcmp(a, b, z.u[u].n * sizeof(float)) != 0;
            for (size_t i = z.u[u].n; i < z.u[u].len * (size_t)W; i++) bad += a[i] != 0.0f;
            at += z.u[u].len * (size_t)W;
        }
        CHECK(bad == 0 && inf.elem_size == sizeof(float) && (mc.tie_embeddings ? !inf.lm_head : !!inf.lm_head),
              "%s: the inference copy is not the gathered weights unit by unit (%d bad)", name, bad);
        CHECK(at * sizeof(float) == zero_full_bytes(&z) && ops_mem_bytes(ctx) - before == zero_full_bytes(&z),
              "%s: the inference copy took %zu bytes, zero_full_bytes %zu, its units %zu", name,
              ops_mem_bytes(ctx) - before, zero_full_bytes(&z), at * sizeof(float));
        zero_full_free(&z, &inf);
        CHECK(ops_mem_bytes(ctx) == before && !inf.embed && !inf.layers[0], "%s: the inference copy was not freed", name);
        free(inf.layers);
    }
    /* The reference swapped in and out; the working set released and made
     * again around a model re-created, as an RL step's phases do. */
    {
        const int T = mb[0].T;
        float lp_after[16], lp[16];
        DK_ASSERT(model_forward(&sh, &mb[0], 1.0f) == DK_OK);
        memcpy(lp_after, sh.logprob, T * sizeof(float));
        CHECK(memcmp(lp_after, lp0, T * sizeof(float)), "%s: the step left the logprobs as they were", name);
        zero_use_reference(&z, 1);
        DK_ASSERT(model_forward(&sh, &mb[0], 1.0f) == DK_OK);
        CHECK(!memcmp(sh.logprob, lp0, T * sizeof(float)), "%s: the reference's logprobs are not the first ones", name);
        zero_use_reference(&z, 0);
        DK_ASSERT(model_forward(&sh, &mb[0], 1.0f) == DK_OK);
        CHECK(!memcmp(sh.logprob, lp_after, T * sizeof(float)), "%s: swapped back, the logprobs changed", name);
        const size_t before = ops_mem_bytes(ctx), working = zero_working_bytes(&z), dev = z.device_bytes;
        zero_working_release(&z);
        CHECK(before - ops_mem_bytes(ctx) == working && z.device_bytes == dev - working,
              "%s: releasing the working set freed %zu bytes, want %zu", name, before - ops_mem_bytes(ctx), working);
        model_free(&sh);
        DK_ASSERT(model_create_ex(&sh, &mc, ctx, 64, MODEL_RECOMPUTE_LAYER, 0) == DK_OK);
        zero_working_restore(&z);
        CHECK(ops_mem_bytes(ctx) == before && z.device_bytes == dev, "%s: restored, %zu bytes allocated, were %zu", name,
              ops_mem_bytes(ctx), before);
        DK_ASSERT(model_forward(&sh, &mb[0], 1.0f) == DK_OK);
        memcpy(lp, sh.logprob, T * sizeof(float));
        CHECK(!memcmp(lp, lp_after, T * sizeof(float)), "%s: restored, the logprobs changed", name);
    }

    /* The shard API round-trips, and a set param is what the next gather sees. */
    for (int u = 0; u < z.n_units; u++) {
        size_t n, b, e;
        zero_unit_range(&z, u, &n, &b, &e);
        float *x = dk_malloc((e - b + 1) * sizeof(float)), *y = dk_malloc((e - b + 1) * sizeof(float));
        for (size_t i = 0; i < e - b; i++) x[i] = (float)(u * 1000 + (b + i) % 997) * 0.001f;
        zero_field fs[3] = {ZERO_M, ZERO_V, ZERO_PARAM};
        for (int f = 0; f < 3; f++) {
            zero_shard_set(&z, u, fs[f], x);
            zero_shard_get(&z, u, fs[f], y);
            CHECK(!memcmp(x, y, (e - b) * sizeof(float)), "%s unit %d field %d: set then get differs", name, u, f);
        }
        free(x);
        free(y);
    }
    zero_gather_host(&z, &got);
    bad = 0;
    for (int u = 0; u < z.n_units; u++) {
        const float *a = unit_of(&got, mc.n_layers, u);
        for (size_t i = 0; i < z.u[u].n; i++) bad += a[i] != (float)(u * 1000 + i % 997) * 0.001f;
    }
    CHECK(bad == 0, "%s: %d gathered parameters are not the ones every rank set", name, bad);

    param_buffers_free_host(&got);
    param_buffers_free_host(&host);
    optim_free(&o, ctx);
    zero_free(&z);
    model_free(&sh);
    model_free(&ref);
}

int main(int argc, char **argv) {
    comm_launch(&argc, &argv);
    ops_ctx ctx;
    DK_ASSERT(ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 1 << 20) == DK_OK);
    comm c;
    DK_ASSERT(comm_open(&c, &ctx, COMM_MPI, 60) == DK_OK);
    run_arch(&c, &ctx, DK_ARCH_QWEN3);
    run_arch(&c, &ctx, DK_ARCH_QWEN2);
    printf("rank %d of %d: ", c.rank, c.world);
    comm_close(&c);
    ops_ctx_free(&ctx);
    int rc = check_report();
    comm_finish();
    return rc;
}
