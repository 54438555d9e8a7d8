/* bench_train.c: the full training step of a Qwen3-shaped model on one GPU,
 * against Hugging Face transformers at the same shape: what an SFT or RL
 * update spends per micro-batch. A step is what trainer/sft.c does before
 * the optimizer: zero the gradients, forward over a packed batch, upload
 * dL/dlogprob for loss = -mean(logprob of the next token), backward, fetch
 * the logprobs for the loss. Random bf16 weights (std 0.02, norms 1).
 *
 * Configurations: Qwen3-0.6B shape (hidden 1024, 28 layers, 16 heads, 8 KV
 * heads, head dim 128, intermediate 3072, vocabulary 151936, tied, q/k norm)
 * and Qwen3-1.7B shape (hidden 2048, intermediate 6144, the rest the same),
 * each with recompute none, layer and layer_keep_attention (the layer
 * re-run without the attention, whose output is kept); B = 4 sequences of S = 4096
 * tokens packed into one batch (cu_seqlens 0, S, 2S, ...). 2 warm-up steps,
 * then 5 timed steps, each ended by a device sync.
 *
 * --wide runs, instead, the RL bases at full width and reduced depth: the
 * Qwen3-8B shape (hidden 4096, intermediate 12288, 32 heads, 8 KV heads) and
 * the Qwen3-14B shape (hidden 5120, intermediate 17408, 40 heads, 8 KV heads),
 * head dim 128, vocabulary 151936, untied embeddings (bench_shapes.h), with
 * --layers N layers (default 4) instead of 36 / 40; same B, S, recompute modes
 * and steps. Their matmuls are the wide ones the real models run, which the
 * 0.6B / 1.7B shapes do not reach, while the step still fits one GPU (14B
 * width, 4 layers: about 2.9B parameters, 5.8 GB of bf16 weights and 11.5 GB
 * of fp32 gradients). Their names say the depth: "8b-4l", "14b-4l". The
 * default run stays the 0.6B / 1.7B one so that its timings compare with
 * earlier ones.
 *
 * FLOPs per step (model FLOPs: recomputation is not counted, so MFU compares
 * every recompute mode on the same work):
 *   6 * N * B*S                      N = non-embedding parameters (layers +
 *                                    final norm), fwd 2 + bwd 4 per MAC
 * + 6 * hidden * vocab * B*S         the lm head (tied or not: the embedding
 *                                    is a lookup, not a matmul, so an untied
 *                                    table adds parameters but no FLOPs)
 * + 4 * B * S^2 * hq * L / 2 * 3     attention scores and values (4 S^2 hq
 *                                    per sequence and layer), causal (/2),
 *                                    forward + backward (x3); hq = heads *
 *                                    head_dim
 * with L the layers the model actually has (--layers for --wide).
 * MFU = FLOPs / time / 989 TFLOP/s (H200 dense bf16).
 *
 * HF: tools/bench/torch_train.py times Qwen3ForCausalLM(config) in bf16 with
 * sdpa attention on [B, S] at the same shapes (forward + backward of the
 * causal LM loss), without and with gradient checkpointing; recompute none is
 * compared with the former, both recomputing modes with the latter. By default this
 * program runs it (DK_PYTHON, default python3; DK_SOURCE, default the current
 * directory) after freeing its own memory; --hf FILE reads its output from a
 * file instead; --no-hf uses the anchors measured on the H200: 0.6B 46.5k
 * tokens/s, 1.7B 29.6k, 1.7B with checkpointing 23.9k (none for --wide).
 * With --wide, torch_train.py gets --wide --layers N and builds the same
 * reduced-depth, untied models (keys "8b-4l", "8b-4l-gc", "14b-4l", ...).
 * Targets: >= 1.3x HF; MFU >= 60% for 1.7B without recompute and >= 50% for
 * 0.6B with layer recompute.
 *
 * Usage: bench_train [--quick] [--device cuda|cpu] [--tiny] [--wide]
 *                    [--layers N] [--steps N] [--warmup N]
 *                    [--hf FILE | --no-hf] [--op-times] [--attn-fwd N] [--attn-bwd N] [--lmhead-kernel N]
 *                    [--keep-logits] [--recompute MODE]
 * --quick: the first shape only (0.6B, or 8B with --wide), 3 timed steps.
 * --tiny: a small shape (2 x 64 tokens, 2 layers) so the whole program runs
 * on the CPU backend in seconds; with --wide, a small untied shape of
 * --layers layers ("tiny-4l"), so the wide path and its HF keys can be
 * checked there too. --wide: the 8B / 14B width cases above (--layers N,
 * default 4, sets their depth). --op-times: after the timed steps, one
 * more step under the per-op timer (kernels/op_timer.h), and its table: the
 * time of each op, the stream's idle time between ops, and their shares.
 * --attn-fwd N / --attn-bwd N: the attention kernels' pins (ops_tuning in
 * kernels/ops.h: 0 the chosen kernels, which are a block per query tile
 * and the one-pass backward at head dim 128; 2 the persistent forward;
 * 1 the two-pass backward). --lmhead-kernel N: the lm head's pin
 * (ops_tuning.lmhead_kernel: 0 chosen, 1 the one-kernel passes one block
 * a tile, without clusters, -1 cuBLASLt). --keep-logits: the model keeps
 * the lm head's fp32 logits from forward to backward (model_keep_logits:
 * 4 B*S*vocab bytes more, one lm-head GEMM fewer). --recompute MODE: that
 * recompute mode alone (none, layer or layer_keep_attention).
 * A step whose loss is not finite stops the program, saying how many
 * tokens' logprobs are not finite and which is the first. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/device.h"
#include "kernels/op_timer.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "tools/bench/bench_shapes.h"
#include "tools/bench/bench_weights.h"
#include "tools/bench/bench_stats.h"

#define PEAK_TFLOPS 989.0 /* H200 dense bf16, datasheet */
#define TARGET_RATIO 1.3
/* The MFU a configuration is held to, or 0 where none is set. */
static double target_mfu(const char *label, int recompute) {
    if (!strcmp(label, "1.7b") && recompute == MODEL_RECOMPUTE_NONE) return 0.60;
    if (!strcmp(label, "0.6b") && recompute == MODEL_RECOMPUTE_LAYER) return 0.50;
    return 0.0;
}

typedef struct {
    const char *name; /* also the key of torch_train.py's lines */
    model_config cfg;
    int B, S;
} shape;

static const model_config qwen3_0_6b = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 151936, .hidden_size = 1024, .intermediate_size = 3072, .n_layers = 28,
    .n_heads = 16, .n_kv_heads = 8, .head_dim = 128, .max_position = 40960, .rope_theta = 1000000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};
/* qwen3_1_7b, qwen3_8b and qwen3_14b come from bench_shapes.h (the --wide
 * cases take the last two with n_layers replaced). */
/* Same structure (GQA 2:1, q/k norm, tied, head_dim != hidden / heads),
 * small enough for the CPU backend; torch_train.py --tiny builds the same. */
static const model_config tiny = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 512, .hidden_size = 64, .intermediate_size = 128, .n_layers = 2,
    .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .max_position = 1024, .rope_theta = 1000000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 1, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};
/* --wide --tiny: tiny plus what the wide cases change: untied embeddings,
 * GQA 4:1 as 8B (32:8), Hq*D = 256 != hidden, intermediate 3 x hidden; small
 * enough for the CPU backend. n_layers is set from --layers. torch_train.py
 * --wide --tiny builds the same. */
static const model_config tiny_wide = {
    .arch = DK_ARCH_QWEN3, .vocab_size = 512, .hidden_size = 128, .intermediate_size = 384, .n_layers = 4,
    .n_heads = 8, .n_kv_heads = 2, .head_dim = 32, .max_position = 1024, .rope_theta = 1000000.0f,
    .rms_eps = 1e-6f, .tie_embeddings = 0, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
};

/* HF numbers measured on the H200 (tokens/s, B = 4, S = 4096). */
static const struct {
    const char *key;
    double tps;
} anchors[] = {{"0.6b", 46500.0}, {"1.7b", 29600.0}, {"1.7b-gc", 23900.0}};

/* What one configuration measured. */
typedef struct {
    char key[32];      /* "0.6b", "0.6b-gc", ...: the HF run it is compared with */
    const char *label; /* shape name */
    int recompute;
    double step_s, min_s, max_s, tps, tflops, mfu, mem_gb, plan_gb, loss, ln_v;
    double hf_tps, hf_mem_gb, hf_loss;
    const char *hf_src; /* "torch_train.py", "--hf FILE", "anchor" or NULL */
} result;

static void must(dk_status s, const char *what) { bench_must("bench_train", s, what); }

/* The [train] recompute value of a mode (model/'s name table), and its short
 * form for the table. */
static const char *recompute_name(int rc) { return model_recompute_names[rc]; }
static const char *recompute_short(int rc) {
    return rc == MODEL_RECOMPUTE_LAYER ? "layer" : rc == MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION ? "layer+att" : "none";
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) { return bench_next_u64(&rng); }

/* Non-embedding parameters: the layers and the final norm. */
static double n_nonembedding(const model *m) {
    return (double)m->cfg.n_layers * (double)m->layout.layer_size + (double)m->layout.final_norm_size;
}

/* Model FLOPs of one step over B sequences of S tokens (header comment). */
static double step_flops(const model *m, int B, int S) {
    const model_config *c = &m->cfg;
    const double tokens = (double)B * S, hq = (double)c->n_heads * c->head_dim;
    return 6.0 * n_nonembedding(m) * tokens + 6.0 * (double)c->hidden_size * c->vocab_size * tokens +
           4.0 * B * (double)S * S * hq * c->n_layers / 2.0 * 3.0;
}

/* One configuration: plan, initialise, warm up, time; everything freed at
 * the end so the next one (and the torch run) gets the whole device. */
/* --op-times: one more step, after the timed ones, under the per-op timer
 * (kernels/op_timer.h), whose table is printed with the configuration. */
static int op_times;
/* --attn-fwd N, --attn-bwd N, --lmhead-kernel N: ops_tuning.attn_fwd /
 * attn_bwd / lmhead_kernel (ops.h) for every step (model_scratch_bytes
 * holds the one-pass backward's accumulator for these batches of long
 * sequences). */
static int attn_fwd_pin, attn_bwd_pin, lmhead_pin, keep_logits;

static void run_config(const shape *sh, dk_device dev, int recompute, int warmup, int steps, result *r) {
    const model_config *c = &sh->cfg;
    const int B = sh->B, S = sh->S, T = B * S;
    const int on_gpu = dev == DK_DEVICE_CUDA;
    size_t free0 = on_gpu ? device_free_bytes(0) : 0;
    rng = 0x2545f4914f6cdd1dull; /* same weights and batch for every recompute mode: same loss */

    ops_ctx ctx;
    must(ops_ctx_init(&ctx, dev, 0, model_scratch_bytes(c, T)), "ops_ctx_init");
    ctx.tuning.attn_fwd = attn_fwd_pin;
    ctx.tuning.attn_bwd = attn_bwd_pin;
    ctx.tuning.lmhead_kernel = lmhead_pin;
    model m;
    must(model_create(&m, c, &ctx, T, (model_recompute)recompute), "model_create");
    if (keep_logits) model_keep_logits(&m);
    /* The FLOPs count only the non-embedding part; the config's count must be
     * that plus the table(s) the model allocated (one tied, two untied), or
     * the MFU would be computed on a different model from the one timed.
     * Checked before the steps: a wide shape's run is long. */
    const double n_params = (double)model_config_n_params(c);
    if (n_params != n_nonembedding(&m) + (double)m.layout.embed_size + (double)m.layout.lm_head_size) {
        fprintf(stderr, "bench_train: %s: %.0f parameters by the config, %.0f in the model's layout\n", sh->name,
                n_params, n_nonembedding(&m) + (double)m.layout.embed_size + (double)m.layout.lm_head_size);
        exit(1);
    }
    double t0 = dk_now();
    bench_random_weights(&m, 0x2545f4914f6cdd1dull);
    double t_init = dk_now() - t0;

    /* The batch: B random sequences of S tokens; each token's target is the
     * next token of its sequence, the last token of a sequence has none. */
    int32_t *tokens = dk_malloc((size_t)T * sizeof(int32_t)), *targets = dk_malloc((size_t)T * sizeof(int32_t));
    int32_t *cu = dk_malloc((size_t)(B + 1) * sizeof(int32_t));
    float *dlogprob = dk_malloc((size_t)T * sizeof(float)), *logprob = dk_malloc((size_t)T * sizeof(float));
    for (int t = 0; t < T; t++) tokens[t] = (int32_t)(next_u64() % (uint64_t)c->vocab_size);
    int n_targets = 0;
    for (int b = 0; b <= B; b++) cu[b] = b * S;
    for (int t = 0; t < T; t++) {
        targets[t] = (t + 1) % S ? tokens[t + 1] : -1;
        n_targets += targets[t] >= 0;
    }
    for (int t = 0; t < T; t++) dlogprob[t] = targets[t] >= 0 ? -1.0f / (float)n_targets : 0.0f;
    model_batch batch = {.T = T, .n_seqs = B, .tokens = tokens, .pos = NULL, .cu_seqlens = cu, .targets = targets};

    double *times = dk_malloc((size_t)(warmup + steps) * sizeof(double));
    double loss = NAN;
    ops_sync(&ctx);
    ops_time_table tab;
    memset(&tab, 0, sizeof tab);
    for (int i = 0; i < warmup + steps + (op_times ? 1 : 0); i++) {
        const int profiled = i == warmup + steps; /* not among the timed steps */
        if (profiled) ops_timer_begin(&ctx);
        double a = dk_now();
        model_zero_grad(&m);
        must(model_forward(&m, &batch, 1.0f), "model_forward");
        ops_upload(&ctx, m.dlogprob, dlogprob, (size_t)T * sizeof(float));
        model_backward(&m, m.dlogprob, NULL);
        ops_download(&ctx, logprob, m.logprob, (size_t)T * sizeof(float)); /* synchronises */
        ops_sync(&ctx);
        if (profiled) ops_timer_end(&ctx, &tab);
        else times[i] = dk_now() - a;
        double nll = 0.0;
        for (int t = 0; t < T; t++)
            if (targets[t] >= 0) nll -= logprob[t];
        loss = nll / n_targets;
        if (!isfinite(loss)) {
            int bad = 0, first = -1;
            for (int t = 0; t < T; t++)
                if (targets[t] >= 0 && !isfinite(logprob[t]) && bad++ == 0) first = t;
            fprintf(stderr,
                    "bench_train: %s recompute %s: step %d loss is %g (%d tokens' logprob not finite, the first %d)\n",
                    sh->name, recompute_name(recompute), i + 1, loss, bad, first);
            exit(1);
        }
    }
    size_t free1 = on_gpu ? device_free_bytes(0) : 0;

    double total = 0.0;
    for (int i = warmup; i < warmup + steps; i++) total += times[i];
    qsort(times + warmup, (size_t)steps, sizeof(double), bench_cmp_double);
    r->label = sh->name;
    r->recompute = recompute;
    snprintf(r->key, sizeof r->key, "%s%s", sh->name, recompute ? "-gc" : "");
    r->step_s = total / steps;
    r->min_s = times[warmup];
    r->max_s = times[warmup + steps - 1];
    r->tps = T / r->step_s;
    r->tflops = step_flops(&m, B, S) / r->step_s / 1e12;
    r->mfu = r->tflops / PEAK_TFLOPS;
    r->mem_gb = on_gpu && free0 > free1 ? (double)(free0 - free1) / 1e9 : NAN;
    r->plan_gb = (double)model_device_bytes(&m) / 1e9;
    r->loss = loss;
    r->ln_v = log((double)c->vocab_size);

    printf("\n[%s shape, B=%d x S=%d packed (%d tokens), recompute %s]\n", sh->name, B, S, T,
           recompute_name(recompute));
    printf("  %.1fM parameters (%.1fM non-embedding%s); weights initialised in %.1f s\n", n_params / 1e6,
           n_nonembedding(&m) / 1e6, c->tie_embeddings ? "" : ", untied: embedding and lm head separate", t_init);
    printf("  %d warm-up + %d timed steps: %.1f ms/step (min %.1f, max %.1f); loss %.4f (ln V = %.4f)\n", warmup,
           steps, r->step_s * 1e3, r->min_s * 1e3, r->max_s * 1e3, loss, r->ln_v);
    printf("  %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% of %.0f TFLOP/s\n", r->tps, r->tflops, 100.0 * r->mfu,
           PEAK_TFLOPS);
    if (op_times) {
        char title[96];
        snprintf(title, sizeof title, "  %s recompute %s, one step", sh->name, recompute_name(recompute));
        ops_time_table_print(&tab, stdout, title);
    }
    if (on_gpu)
        printf("  device memory: %.2f GB in use (cudaMemGetInfo), of which the model's plan %.2f GB and ops scratch "
               "%.2f GB\n",
               r->mem_gb, r->plan_gb, ctx.scratch_size / 1e9);
    else
        printf("  memory planned by the model: %.3f GB\n", r->plan_gb);
    fflush(stdout);

    free(times), free(tokens), free(targets), free(cu), free(dlogprob), free(logprob);
    model_free(&m);
    ops_ctx_free(&ctx);
}

/* Reads torch_train.py's lines ("hf_tokens_per_s KEY X", "hf_peak_mem_gb KEY
 * X", "hf_loss KEY X") from f into the results; other lines are echoed when
 * echo is set. */
static void parse_hf(FILE *f, result *rs, int n, const char *src, int echo) {
    char line[1024], key[64], what[64];
    double x;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%63s %63s %lf", what, key, &x) == 3 && !strncmp(what, "hf_", 3)) {
            for (int i = 0; i < n; i++) {
                if (strcmp(rs[i].key, key)) continue;
                if (!strcmp(what, "hf_tokens_per_s")) rs[i].hf_tps = x, rs[i].hf_src = src;
                else if (!strcmp(what, "hf_peak_mem_gb")) rs[i].hf_mem_gb = x;
                else if (!strcmp(what, "hf_loss")) rs[i].hf_loss = x;
            }
        } else if (echo) {
            printf("  torch: %s", line);
        }
    }
}

/* An ops_tuning pin (ops.h) given to `flag`: an integer in lo .. hi, else
 * the program exits naming the flag and the value. */
static int parse_pin(const char *flag, const char *text, int lo, int hi) {
    char *end;
    const long v = strtol(text, &end, 10);
    if (*end || end == text || v < lo || v > hi) {
        fprintf(stderr, "bench_train: %s %s: expected an integer from %d to %d (ops_tuning, kernels/ops.h)\n", flag,
                text, lo, hi);
        exit(2);
    }
    return (int)v;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_train [--quick] [--device cuda|cpu] [--tiny] [--wide] [--layers N] [--steps N] "
                    "[--warmup N] [--hf FILE | --no-hf] [--op-times] [--attn-fwd N] [--attn-bwd N] "
                    "[--lmhead-kernel N] [--keep-logits]\n"
                    "  --wide: Qwen3-8B and 14B width (untied) at --layers N layers (default 4) instead of the "
                    "0.6B / 1.7B shapes\n");
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a fatal error keeps the lines printed before it */
    int quick = 0, use_tiny = 0, wide = 0, layers = -1, steps = -1, warmup = 2, no_hf = 0, only_rc = -1;
    const char *hf_file = NULL;
    dk_device dev = DK_DEVICE_CUDA;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--tiny")) use_tiny = 1;
        else if (!strcmp(argv[i], "--wide")) wide = 1;
        else if (!strcmp(argv[i], "--no-hf")) no_hf = 1;
        else if (!strcmp(argv[i], "--op-times")) op_times = 1;
        else if (!strcmp(argv[i], "--keep-logits")) keep_logits = 1;
        else if (!strcmp(argv[i], "--recompute") && i + 1 < argc) {
            for (int rc = 0; rc < MODEL_N_RECOMPUTE; rc++)
                if (!strcmp(argv[i + 1], model_recompute_names[rc])) only_rc = rc;
            if (only_rc < 0) {
                fprintf(stderr, "bench_train: --recompute %s: expected one of", argv[i + 1]);
                for (int rc = 0; rc < MODEL_N_RECOMPUTE; rc++) fprintf(stderr, " %s", model_recompute_names[rc]);
                fprintf(stderr, "\n");
                return 2;
            }
            i++;
        }
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (ops_parse_device(argv[++i], &dev) != DK_OK) {
                fprintf(stderr, "bench_train: %s\n", dk_error());
                return 2;
            }
        } else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hf") && i + 1 < argc) hf_file = argv[++i];
        else if (!strcmp(argv[i], "--attn-fwd") && i + 1 < argc) attn_fwd_pin = parse_pin("--attn-fwd", argv[++i], 0, 2);
        else if (!strcmp(argv[i], "--attn-bwd") && i + 1 < argc) attn_bwd_pin = parse_pin("--attn-bwd", argv[++i], 0, 2);
        else if (!strcmp(argv[i], "--lmhead-kernel") && i + 1 < argc)
            lmhead_pin = parse_pin("--lmhead-kernel", argv[++i], -1, 1);
        else usage();
    }
    if (steps < 0) steps = quick ? 3 : 5;
    if (steps < 1 || warmup < 0 || (hf_file && no_hf)) usage();
    if (attn_fwd_pin || attn_bwd_pin)
        printf("ops_tuning.attn_fwd = %d, attn_bwd = %d throughout\n", attn_fwd_pin, attn_bwd_pin);
    if (lmhead_pin) printf("ops_tuning.lmhead_kernel = %d throughout\n", lmhead_pin);
    if (layers != -1 && !wide) {
        fprintf(stderr, "bench_train: --layers sets the depth of the --wide shapes only\n");
        return 2;
    }
    if (layers == -1) layers = 4;
    if (layers < 1) usage();
    FILE *hf = NULL; /* opened now: a wrong path fails before the runs, not after */
    if (hf_file && !(hf = fopen(hf_file, "r"))) {
        fprintf(stderr, "bench_train: --hf %s: cannot open\n", hf_file);
        return 2;
    }
    if (dev == DK_DEVICE_CPU && !use_tiny) {
        fprintf(stderr, "bench_train: the CPU backend runs only the --tiny shape (the real shapes take hours there)\n");
        return 2;
    }
    if (dev == DK_DEVICE_CUDA) {
        if (device_count() == 0 || !ops_cuda_available()) {
            fprintf(stderr, "bench_train: needs a CUDA GPU and a build with the CUDA op table (or --device cpu "
                            "--tiny)\n");
            return 1;
        }
        char desc[256];
        if (device_describe(0, desc, sizeof desc) == 0) printf("device: %s\n", desc);
    } else {
        printf("device: cpu (--tiny: the numbers check the program, not the speed)\n");
    }

    shape shapes[2];
    int n_shapes = 0;
    char wide_names[2][16]; /* "8b-4l": the shape's name and torch_train.py's key say the depth */
    if (wide) {
        const struct {
            const char *base;
            const model_config *cfg;
        } w[] = {{"tiny", &tiny_wide}, {"8b", &qwen3_8b}, {"14b", &qwen3_14b}};
        const int first = use_tiny ? 0 : 1, last = use_tiny ? 0 : quick ? 1 : 2;
        for (int k = first; k <= last; k++) {
            char *name = wide_names[n_shapes];
            snprintf(name, sizeof wide_names[0], "%s-%dl", w[k].base, layers);
            shapes[n_shapes] = (shape){name, *w[k].cfg, use_tiny ? 2 : 4, use_tiny ? 64 : 4096};
            shapes[n_shapes++].cfg.n_layers = layers;
        }
    } else if (use_tiny) {
        shapes[n_shapes++] = (shape){"tiny", tiny, 2, 64};
    } else {
        shapes[n_shapes++] = (shape){"0.6b", qwen3_0_6b, 4, 4096};
        if (!quick) shapes[n_shapes++] = (shape){"1.7b", qwen3_1_7b, 4, 4096};
    }
    result rs[6];
    int n = 0;
    memset(rs, 0, sizeof rs);
    for (int s = 0; s < n_shapes; s++)
        for (int rc = MODEL_RECOMPUTE_NONE; rc <= MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION; rc++) {
            if (only_rc >= 0 && rc != only_rc) continue;
            run_config(&shapes[s], dev, rc, warmup, steps, &rs[n]);
            rs[n].hf_tps = rs[n].hf_mem_gb = rs[n].hf_loss = NAN;
            n++;
        }

    /* The HF side, after our memory is given back. */
    if (hf) {
        parse_hf(hf, rs, n, "--hf file", 0);
        fclose(hf);
    } else if (!no_hf) {
        const char *py = getenv("DK_PYTHON"), *src = getenv("DK_SOURCE");
        char cmd[2048];
        char wide_args[32] = ""; /* torch_train.py builds the same depth, so the keys match */
        if (wide) snprintf(wide_args, sizeof wide_args, " --wide --layers %d", layers);
        snprintf(cmd, sizeof cmd, "%s %s/tools/bench/torch_train.py --steps %d --warmup %d%s%s%s%s 2>&1",
                 py && *py ? py : "python3", src && *src ? src : ".", steps, warmup, quick ? " --quick" : "",
                 use_tiny ? " --tiny" : "", wide_args, dev == DK_DEVICE_CPU ? " --device cpu" : "");
        printf("\n$ %s\n", cmd);
        fflush(stdout);
        FILE *p = popen(cmd, "r");
        if (p) {
            parse_hf(p, rs, n, "torch_train.py", 1);
            int rc = pclose(p);
            if (rc != 0) printf("  (torch_train.py exited with status %d)\n", rc);
        }
    }
    for (int i = 0; i < n; i++)
        for (size_t a = 0; a < sizeof anchors / sizeof anchors[0]; a++)
            if (isnan(rs[i].hf_tps) && !strcmp(rs[i].key, anchors[a].key))
                rs[i].hf_tps = anchors[a].tps, rs[i].hf_src = "anchor";

    int lw = 6; /* the model column: 6 wide as it always was, wider for "14b-4l"-style names */
    for (int i = 0; i < n; i++)
        if ((int)strlen(rs[i].label) > lw) lw = (int)strlen(rs[i].label);
    printf("\n%-*s %-9s %9s %8s %6s %7s | %9s %7s %-14s | %7s %-6s %s\n", lw, "model", "recompute", "tokens/s",
           "TFLOP/s", "MFU", "mem GB", "HF tok/s", "HF GB", "HF source", "ratio", "target", "MFU target");
    for (int i = 0; i < n; i++) {
        result *r = &rs[i];
        double ratio = r->hf_tps > 0 ? r->tps / r->hf_tps : NAN;
        char mem[16] = "-", hf[16] = "-", hfm[16] = "-", rt[16] = "-", mt[32] = "";
        if (!isnan(r->mem_gb)) snprintf(mem, sizeof mem, "%.2f", r->mem_gb);
        if (!isnan(r->hf_tps)) snprintf(hf, sizeof hf, "%.0f", r->hf_tps);
        if (!isnan(r->hf_mem_gb)) snprintf(hfm, sizeof hfm, "%.1f", r->hf_mem_gb);
        if (!isnan(ratio)) snprintf(rt, sizeof rt, "%.2fx", ratio);
        const double tm = target_mfu(r->label, r->recompute);
        if (tm > 0.0) snprintf(mt, sizeof mt, ">= %.0f%%: %s", 100 * tm, r->mfu >= tm ? "met" : "MISSED");
        printf("%-*s %-9s %9.0f %8.1f %5.1f%% %7s | %9s %7s %-14s | %7s %-6s %s\n", lw, r->label,
               recompute_short(r->recompute), r->tps, r->tflops, 100 * r->mfu, mem, hf, hfm,
               r->hf_src ? r->hf_src : "none", rt, isnan(ratio) ? "-" : ratio >= TARGET_RATIO ? "met" : "MISSED", mt);
    }
    printf("ratio = our tokens/s / HF tokens/s (recompute layer and layer+att(ention kept) vs HF gradient "
           "checkpointing); target >= %.1fx\n",
           TARGET_RATIO);
    for (int i = 0; i < n; i++)
        if (!isnan(rs[i].hf_loss))
            printf("loss check %s: ours %.4f, HF %.4f (both random init, std 0.02: about ln V = %.2f)\n", rs[i].key,
                   rs[i].loss, rs[i].hf_loss, rs[i].ln_v);
    return 0;
}
