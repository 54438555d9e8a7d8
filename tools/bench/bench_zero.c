/* bench_zero.c: a ZeRO-3 training step (trainer/zero.h) at Qwen3-14B width
 * with 4 layers (hidden 5120, intermediate 17408, 40 heads, 8 KV heads, head
 * dim 128, vocabulary 151936, untied lm head, q/k norm): the per-rank memory
 * of the shards and the working set, the step time (forward, backward,
 * AdamW on the shards) and where it goes layer by layer. Runs at world 1
 * (`bench_zero`) or under `mpirun -np N bench_zero`; rank 0 prints.
 *
 * A timed step has no sync inside, so gathers and reduce-scatters overlap
 * compute as in training. The per-layer table comes from one more step with
 * a device sync at every layer boundary (the hooks are wrapped), so it shows
 * each layer's own forward and backward time (gather wait included) without
 * the overlap. Weights: a cheap pseudo-random fill of each rank's shards
 * (the speed does not depend on the values).
 *
 * Usage: bench_zero [--device cuda|cpu] [--tokens T] [--steps N] [--tiny]
 * --tiny: hidden 64, 4 layers, vocabulary 512 (the CPU backend in seconds). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/comm.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "trainer/zero.h"

#define MAX_LAYERS 8
#define PEAK_TFLOPS 989.0 /* H200 dense bf16, datasheet (as bench_train.c) */

typedef struct {
    zero *z;
    ops_ctx *ctx;
    int timing;
    double t_mark, fwd[MAX_LAYERS], bwd[MAX_LAYERS];
} timer;

/* zero's hook, with a sync and a time stamp at every layer boundary. */
static void timed_hook(void *user, model *m, model_hook_event ev, int l) {
    timer *t = user;
    if (t->timing && (ev == MODEL_HOOK_LAYER_PARAMS || ev == MODEL_HOOK_LAYER_GRADS_DONE ||
                      ev == MODEL_HOOK_BACKWARD_BEGIN)) {
        ops_sync(t->ctx);
        double now = dk_now();
        if (ev == MODEL_HOOK_LAYER_PARAMS && t->z->dir > 0 && l > 0) t->fwd[l - 1] += now - t->t_mark;
        if (ev == MODEL_HOOK_BACKWARD_BEGIN) t->fwd[m->cfg.n_layers - 1] += now - t->t_mark;
        if (ev == MODEL_HOOK_LAYER_GRADS_DONE) t->bwd[l] += now - t->t_mark;
        t->t_mark = now;
    }
    zero_hook(t->z, m, ev, l);
    if (t->timing && ev == MODEL_HOOK_LAYER_GRADS_DONE) {
        ops_sync(t->ctx);
        t->t_mark = dk_now();
    }
}

static void fill_shards(zero *z, int rank) {
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)rank;
    for (int u = 0; u < z->n_units; u++) {
        size_t n, b, e;
        zero_unit_range(z, u, &n, &b, &e);
        float *h = dk_malloc((e - b + 1) * sizeof(float));
        for (size_t i = 0; i < e - b; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            h[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
        }
        zero_shard_set(z, u, ZERO_PARAM, h);
        free(h);
    }
}

int main(int argc, char **argv) {
    comm_launch(&argc, &argv);
    const comm_place at = comm_where();
    dk_device dev = DK_DEVICE_CUDA;
    int T = 4096, steps = 3, tiny = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (ops_parse_device(argv[++i], &dev) != DK_OK) DK_ABORT("%s", dk_error());
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tiny")) tiny = 1;
        else {
            fprintf(stderr, "usage: bench_zero [--device cuda|cpu] [--tokens T] [--steps N] [--tiny]\n");
            return 2;
        }
    }
    if (dev == DK_DEVICE_CUDA && !ops_cuda_available()) {
        fprintf(stderr, "bench_zero: no GPU\n");
        return 77;
    }
    if (at.rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    model_config mc = {DK_ARCH_QWEN3, 151936, 5120, 17408, 4, 40, 8, 128, 40960, 1e6f, 1e-6f, 0, 0, 0, 1, -1, -1};
    if (tiny) {
        mc.vocab_size = 512, mc.hidden_size = 64, mc.intermediate_size = 128, mc.n_heads = 4, mc.n_kv_heads = 2;
        mc.head_dim = 16;
        if (T == 4096) T = 128;
    }
    comm_backend be;
    int gpu;
    if (comm_pick(COMM_AUTO, dev == DK_DEVICE_CUDA, dev == DK_DEVICE_CUDA ? device_count() : 0, &at, &be, &gpu) != DK_OK)
        DK_ABORT("%s", dk_error());
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, dev, gpu, model_scratch_bytes(&mc, T)) != DK_OK) DK_ABORT("%s", dk_error());
    comm c;
    if (comm_open(&c, &ctx, be, 600) != DK_OK) DK_ABORT("%s", dk_error());
    size_t free0 = dev == DK_DEVICE_CUDA ? device_free_bytes(gpu) : 0;
    model m;
    if (model_create_ex(&m, &mc, &ctx, T, MODEL_RECOMPUTE_LAYER, 0) != DK_OK) DK_ABORT("%s", dk_error());
    zero z;
    optim_config oc = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    if (zero_init(&z, &m, &c, &oc) != DK_OK) DK_ABORT("%s", dk_error());
    fill_shards(&z, c.rank);
    timer tm = {&z, &ctx, 0, 0, {0}, {0}};
    m.hooks.fn = timed_hook;
    m.hooks.user = &tm;

    /* One packed batch of 4 sequences, targets = next token. */
    int32_t *tok = dk_malloc(T * sizeof(int32_t)), *tgt = dk_malloc(T * sizeof(int32_t)), cu[5];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 2654435761u) % (unsigned)mc.vocab_size);
    for (int i = 0; i < T; i++) tgt[i] = i + 1 < T ? tok[i + 1] : -1;
    for (int s = 0; s <= 4; s++) cu[s] = s * T / 4;
    model_batch b = {T, 4, tok, NULL, cu, tgt};
    float *dl = dk_malloc(T * sizeof(float));
    for (int i = 0; i < T; i++) dl[i] = -1.0f / (float)(T * c.world);

    printf("bench_zero: %d rank(s) (%s), hidden %d, intermediate %d, %d layers, vocab %d, %.2fB parameters, %d "
           "tokens per rank and step, recompute layer\n",
           c.world, be == COMM_NCCL ? "nccl" : "mpi", mc.hidden_size, mc.intermediate_size, mc.n_layers,
           mc.vocab_size, model_config_n_params(&mc) / 1e9, T);
    double best = 1e30;
    for (int s = 0; s <= steps; s++) { /* step 0 warms up */
        ops_sync(&ctx);
        double t0 = dk_now();
        model_zero_grad(&m);
        if (model_forward(&m, &b, 1.0f) != DK_OK) DK_ABORT("%s", dk_error());
        ops_upload(&ctx, m.dlogprob, dl, (size_t)T * sizeof(float));
        model_backward(&m, m.dlogprob, NULL);
        double norm = zero_step(&z, 1e-5);
        ops_sync(&ctx);
        double dt = dk_now() - t0;
        if (s > 0 && dt < best) best = dt;
        printf("step %d: %.1f ms, grad norm %.4f%s\n", s, dt * 1e3, norm, s == 0 ? " (warm-up)" : "");
    }
    tm.timing = 1;
    tm.t_mark = dk_now();
    model_zero_grad(&m);
    if (model_forward(&m, &b, 1.0f) != DK_OK) DK_ABORT("%s", dk_error());
    ops_upload(&ctx, m.dlogprob, dl, (size_t)T * sizeof(float));
    model_backward(&m, m.dlogprob, NULL);
    ops_sync(&ctx);
    tm.timing = 0;
    printf("per layer (synced at every boundary; the last layer's forward includes the final norm and lm head, "
           "its backward the lm head's): layer | forward ms | recompute + backward ms\n");
    for (int l = 0; l < mc.n_layers; l++) {
        printf("  %d | %8.2f | %8.2f\n", l, tm.fwd[l] * 1e3, tm.bwd[l] * 1e3);
    }
    /* Model FLOPs as bench_train.c counts them (recompute not counted):
     * 6 N T for the layers, 6 C V T for the lm head, causal attention over
     * the 4 packed sequences, forward + backward. */
    const double S = T / 4.0, hq = (double)mc.n_heads * mc.head_dim;
    const double n_layer = (double)mc.n_layers * (double)m.layout.layer_size + (double)m.layout.final_norm_size;
    const double flops = 6.0 * n_layer * T + 6.0 * (double)mc.hidden_size * mc.vocab_size * T +
                         4.0 * 4.0 * S * S * hq * mc.n_layers / 2.0 * 3.0;
    printf("best step %.1f ms, %.0f tokens/s per rank, %.1f TFLOP/s per rank: MFU %.1f%% of %.0f TFLOP/s (H200 dense "
           "bf16)\n",
           best * 1e3, T / best, flops / best / 1e12, 100.0 * flops / best / (PEAK_TFLOPS * 1e12), PEAK_TFLOPS);
    printf("memory per rank: shards, gathered embedding / lm head and layer slots %.1f MB; activations and "
           "workspace %.1f MB",
           z.device_bytes / 1e6, model_device_bytes(&m) / 1e6);
    if (dev == DK_DEVICE_CUDA) printf("; device memory in use %.1f MB", (free0 - device_free_bytes(gpu)) / 1e6);
    printf("\n");
    zero_free(&z);
    model_free(&m);
    comm_close(&c);
    ops_ctx_free(&ctx);
    comm_finish();
    return 0;
}
