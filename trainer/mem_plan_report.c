/* mem_plan_report.c: what the trainer does with a memory plan: print it as a
 * table, answer `train --plan`, and refuse a CUDA run whose plan does not fit
 * the device before anything is allocated. */
#include "trainer/mem_plan.h"

#include <stdlib.h>
#include <unistd.h>

#include "kernels/device.h"

static double gb(size_t b) { return (double)b / 1e9; }

static const char *recompute_name(model_recompute r) {
    return (int)r >= 0 && (int)r < (int)MODEL_N_RECOMPUTE ? model_recompute_names[r] : "auto";
}

static const char *mode_name(dk_run_mode m) {
    return m == DK_MODE_SFT ? "sft" : m == DK_MODE_RL ? "rl" : "eval";
}

/* One cell: GB, or "-" where the item is absent. */
static void cell(FILE *f, size_t bytes) {
    if (!bytes) fprintf(f, " %12s", "-");
    else fprintf(f, " %12.2f", gb(bytes));
}

/* "14.768B", "0.71M" or "443": a count of parameters or elements. */
static void count(char *buf, size_t n, size_t size) {
    if (n >= 100000000) snprintf(buf, size, "%.3fB", n / 1e9);
    else if (n >= 100000) snprintf(buf, size, "%.2fM", n / 1e6);
    else snprintf(buf, size, "%zu", n);
}

void mem_plan_print(const mem_plan *p, FILE *f) {
    static const char *phase_head[MEM_PHASES] = {"train GB", "rollout GB"};
    char np[32], nu[32];
    count(np, p->n_params, sizeof np);
    count(nu, p->largest_unit, sizeof nu);
    fprintf(f, "memory plan of one GPU: mode %s, world %d, %.2f GB per GPU, margin %.2f GB\n", mode_name(p->mode),
            p->world, gb(p->gpu_bytes), gb(p->margin_bytes));
    fprintf(f, "  model: %s parameters, largest unit %s elements (padded for the world); weights and activations %s\n",
            np, nu, p->act_size == 2 ? "bf16" : "fp32");
    if (p->has_phase[MEM_TRAIN]) {
        fprintf(f, "  train: micro-batch of %d tokens per rank, recompute %s, lm-head logits %s\n", p->train_tokens,
                recompute_name(p->recompute), p->keep_logits ? "kept (one GEMM fewer)" : "recomputed");
        if (p->recompute_auto)
            fprintf(f, "  recompute = auto picked %s: %s\n", recompute_name(p->recompute), p->recompute_why);
    }
    if (p->has_phase[MEM_ROLLOUT])
        fprintf(f, "  rollout: %d conversations per rank of up to %d tokens, generation steps of %d tokens\n",
                p->rollout_seqs, p->max_length, p->step_tokens);
    fprintf(f, "\n  %-36s", "item");
    for (int ph = 0; ph < MEM_PHASES; ph++)
        if (p->has_phase[ph]) fprintf(f, " %12s", phase_head[ph]);
    for (int r = 0; r < MEM_ROWS; r++) {
        fprintf(f, "\n  %-36s", mem_plan_row_name((mem_row)r));
        for (int ph = 0; ph < MEM_PHASES; ph++)
            if (p->has_phase[ph]) cell(f, p->bytes[r][ph]);
    }
    fprintf(f, "\n  %-36s", "total");
    for (int ph = 0; ph < MEM_PHASES; ph++)
        if (p->has_phase[ph]) cell(f, p->total[ph]);
    fprintf(f, "\n  %-36s", "free");
    for (int ph = 0; ph < MEM_PHASES; ph++)
        if (p->has_phase[ph]) fprintf(f, " %12.2f", ((double)p->gpu_bytes - (double)p->total[ph]) / 1e9);
    fputc('\n', f);
    if (p->has_phase[MEM_ROLLOUT]) {
        const double share = p->kv_need_all ? 100.0 * (double)p->kv_tokens / (double)p->kv_need_all : 0.0;
        char fit[32];
        if (share >= 100.0) snprintf(fit, sizeof fit, "all of it fits");
        else snprintf(fit, sizeof fit, "%.0f%% of that fits", share);
        fprintf(f,
                "\n  KV cache: %ld tokens of %zu bytes, %.1f conversations of %d tokens (at least 1 needed); the "
                "rank's %d at full length need %ld tokens (%s)\n",
                p->kv_tokens, p->kv_token_bytes, p->kv_need_one ? (double)p->kv_tokens / p->kv_need_one : 0.0,
                p->max_length, p->rollout_seqs, p->kv_need_all, fit);
    }
    double free_gb = ((double)p->gpu_bytes - (double)p->peak) / 1e9;
    fprintf(f, "\n  peak: %.2f GB in the %s phase%s; %.2f GB of %.2f GB free (margin %.2f GB): %s\n", gb(p->peak),
            p->peak_phase == MEM_TRAIN ? "train" : "rollout",
            p->peak_phase == MEM_ROLLOUT && p->kv_tokens ? " (the KV cache takes rl.kv_cache_fraction of what is free)" : "", free_gb,
            gb(p->gpu_bytes), gb(p->margin_bytes), p->fits ? "FITS" : "DOES NOT FIT");
}

/* The world size of the launch: Open MPI's or a PMI launcher's, else 1. */
static int launcher_world(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

int mem_plan_command(const dk_config *cfg, FILE *out) {
    model_config mc;
    dk_status st = config_model(cfg, &mc);
    if (st != DK_OK) {
        fprintf(stderr, "train --plan: %s\n", dk_error());
        return st;
    }
    const int world = cfg->dist.world > 0 ? cfg->dist.world : launcher_world();
    const char *from = "dist.gpu_memory_gb";
    size_t gpu = (size_t)(cfg->dist.gpu_memory_gb * 1e9);
    if (!gpu && (gpu = device_total_bytes(0))) from = "gpu 0's total memory";
    if (!gpu) {
        gpu = (size_t)(MEM_PLAN_DEFAULT_GPU_GB * 1e9);
        from = "no GPU answers: an H200's";
    }
    fprintf(out, "world %d (%s), %.2f GB per GPU (%s)\n", world, cfg->dist.world > 0 ? "dist.world" : "the launcher's",
            gb(gpu), from);
    mem_plan p;
    st = mem_plan_make(&p, cfg, &mc, world, DK_DEVICE_CUDA, gpu, 0);
    if (st != DK_OK) {
        fprintf(stderr, "train --plan: %s\n", dk_error());
        return st;
    }
    mem_plan_print(&p, out);
    if (p.fits) return 0;
    fprintf(stderr, "train --plan: DOES NOT FIT one GPU of %.2f GB at world %d with a margin of %.2f GB (the table "
                    "says where the memory goes)\n",
            gb(gpu), world, gb(p.margin_bytes));
    return 1;
}

/* The plan into *p, and a failure naming gpu_name where it does not fit. */
static dk_status check_plan(mem_plan *p, const dk_config *cfg, const model_config *mc, int world, int sharded,
                            int max_tokens, size_t gpu_bytes, const char *gpu_name) {
    DK_TRY(mem_plan_make_ex(p, cfg, mc, world, sharded, DK_DEVICE_CUDA, gpu_bytes, max_tokens));
    if (p->fits) return DK_OK;
    mem_plan_print(p, stderr);
    return dk_fail(DK_ERR_USAGE,
                   "the memory plan above does not fit %s (%.2f GB): lower [train] micro_batch_tokens or [data] "
                   "max_length, set [train] recompute = layer, or run on more ranks (train --plan CONFIG "
                   "dist.world=N shows the plan at N)",
                   gpu_name, gb(gpu_bytes));
}

dk_status mem_plan_check(const dk_config *cfg, const model_config *mc, int world, int max_tokens, size_t gpu_bytes,
                         const char *gpu_name) {
    mem_plan p;
    return check_plan(&p, cfg, mc, world, world > 1, max_tokens, gpu_bytes, gpu_name);
}

dk_status mem_plan_run_start(const dk_config *cfg, const model_config *mc, int gpu, int world, int sharded,
                             int max_tokens, model_recompute *rc, int *keep_logits) {
    const int is_auto = cfg->train.recompute == DK_RECOMPUTE_AUTO;
    *keep_logits = 0;
    *rc = is_auto ? MODEL_RECOMPUTE_LAYER : cfg->train.recompute; /* where no memory size answers */
    const int cuda = cfg->run.device == DK_DEVICE_CUDA;
    const size_t bytes = cuda ? device_total_bytes(gpu) : (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    if (!bytes || (!cuda && !is_auto)) return DK_OK; /* no GPU answers: ops_ctx_init reports that */
    mem_plan p;
    if (cuda) {
        char name[32];
        snprintf(name, sizeof name, "gpu %d", gpu);
        DK_TRY(check_plan(&p, cfg, mc, world, sharded, max_tokens, bytes, name));
    } else {
        DK_TRY(mem_plan_make_ex(&p, cfg, mc, world, sharded, DK_DEVICE_CPU, bytes, max_tokens));
    }
    *rc = p.recompute;
    *keep_logits = p.keep_logits;
    if (p.keep_logits)
        printf("lm-head logits kept from forward to backward: %.2f GB (the plan has room)\n",
               gb(p.bytes[MEM_KEEP_LOGITS][MEM_TRAIN]));
    if (is_auto)
        printf("recompute = auto: %s on %.2f GB (%s)\n", recompute_name(p.recompute), gb(bytes), p.recompute_why);
    return DK_OK;
}
