/* paged_decode.cu: the host side of the few-queries decode kernel of
 * paged_decode.cuh (which says how the kernel works and why its instances
 * are compiled in paged_decode_d*.cu): its plan (warps a CTA, splits of
 * the context, how rows are loaded, where the splits merge) and launch. */
#include <pthread.h>

#include "kernels/paged_decode.cuh"

static pd_kernel kernel_for(int D, int G, int nw, int lm) {
    switch (D) {
    case 32: return pd_kernel_d32(G, nw, lm);
    case 64: return pd_kernel_d64(G, nw, lm);
    case 128: return pd_kernel_d128(G, nw, lm);
    default: return pd_kernel_d256(G, nw, lm);
    }
}
/* Dynamic shared memory of the (G, nw, lm) instance: its ring. */
static size_t pd_smem_of(int G, int nw, int lm) { return pd_smem(pd_g_max(G), nw, lm); }

/* How a step's kernel loads its rows (LM above): for groups of up to 2
 * heads the next rows in registers, at any batch; for wider groups, where
 * the (token, KV head) units are fewer than the SMs, so that the splits of
 * a long context, one CTA an SM, must keep the loads in flight, the
 * shared-memory ring (which the second register set would cost their
 * 16-warp CTAs), and direct loads where a batch fills the SMs with CTAs.
 * Measured on an H100: at batch 1, Qwen3-1.7B at 32k context read a layer
 * in 62.6 us with registers, 69.3 direct, 71.9 through the ring; Qwen3-8B
 * at 8k in 28.2 us through the ring, 29.5 direct, 32.7 with registers (8
 * warps a CTA); at batch 64, 640 tokens of context, Qwen3-1.7B in 64.3 us
 * with registers, 68.3 direct (bench_generate --quick).
 * ctx->tuning.decode_prefetch pins it. */
static int pd_load_mode(const ops_ctx *ctx, long T, int Hkv, int G) {
    const int forced = ctx->tuning.decode_prefetch;
    if (forced < -1 || forced > 2)
        DK_ABORT("ops_tuning.decode_prefetch = %d: expected 0 (chosen), -1 (direct loads), 1 (next rows in "
                 "registers) or 2 (a shared-memory ring)",
                 forced);
    if (forced) return forced < 0 ? PD_DIRECT : forced;
    if (pd_g_max(G) <= 2) return PD_REGS;
    return T * Hkv >= cuda_sm_count(ctx) ? PD_DIRECT : PD_RING;
}

int cuda_paged_decode_fits(int D, int G) {
    return (D == 32 || D == 64 || D == 128 || D == 256) && G >= 1 && G <= PD_MAX_G;
}

/* How many clusters of n CTAs (1 .. PD_MAX_SPLIT) of kernel k can be
 * resident at once: a cluster's CTAs share one GPC, so wide CTAs in large
 * clusters may fit fewer clusters than the CTA count suggests. 0 where the
 * GPU refuses that size (past the portable 8 on some). Asked once a kernel
 * and device (which also sets the kernel's non-portable attribute and,
 * through cuda_kernel_per_sm, its shared-memory limit of smem bytes). */
static int pd_clusters_resident(const ops_ctx *ctx, pd_kernel k, int nw, size_t smem, int n) {
    static struct {
        pd_kernel k;
        int dev, resident[PD_MAX_SPLIT + 1];
    } seen[64];
    static int n_seen;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_seen && !(seen[i].k == k && seen[i].dev == ctx->gpu)) i++;
    if (i == n_seen) {
        if (n_seen == 64) DK_ABORT("paged_decode: more than 64 kernels and devices to plan for");
        seen[i].k = k, seen[i].dev = ctx->gpu;
        cuda_kernel_per_sm(ctx, (const void *)k, nw * 32, smem);
        const int wide = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
        for (int c = 1; c <= PD_MAX_SPLIT; c++) {
            int clusters = 0;
            if (c <= 8 || wide) {
                cudaLaunchConfig_t cfg = {};
                cudaLaunchAttribute attr[1];
                attr[0].id = cudaLaunchAttributeClusterDimension;
                attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = c, attr[0].val.clusterDim.z = 1;
                cfg.gridDim = dim3(1, c), cfg.blockDim = dim3(nw * 32), cfg.attrs = attr, cfg.numAttrs = 1;
                cfg.dynamicSmemBytes = smem;
                if (cudaOccupancyMaxActiveClusters(&clusters, k, &cfg) != cudaSuccess) clusters = 0;
            }
            seen[i].resident[c] = clusters;
        }
        (void)cudaGetLastError(); /* a refusal above is an answer, not an error */
        n_seen++;
    }
    const int r = seen[i].resident[n];
    pthread_mutex_unlock(&lock);
    return r;
}

/* The largest cluster a kernel can be launched with: PD_MAX_SPLIT where the
 * GPU schedules such clusters of its CTAs, else the portable 8. */
static int pd_cluster_max(const ops_ctx *ctx, pd_kernel k, int nw, size_t smem) {
    return pd_clusters_resident(ctx, k, nw, smem, PD_MAX_SPLIT) > 0 ? PD_MAX_SPLIT : 8;
}

/* Warps a CTA and splits: the most warps in flight, on average over the
 * waves (units x splits x warps / waves). Each split gets at least one
 * step of keys a warp; a batch that already fills the GPU is not split,
 * and there the waves decide: Qwen3-8B at batch 64 (512 units of 4 query
 * heads) holds one 8-warp CTA an SM (172 registers a thread), three of 4
 * warps (2 waves, the second a third full) or one of 16 warps (capped at
 * 128 registers): 1024, 1024 and 2048 warps on average, and on an H100
 * the layer's attention took 115.8, 117.0 and 84.2 us (bench_generate
 * --ops 8b 64 640). The rule it replaced ranked every plan past one wave
 * alike and kept the first tried, 8 warps.
 *
 * Splits merged in a cluster must be resident together, one cluster a
 * (token, KV head) inside one GPC, and with one wide CTA an SM that caps
 * them well below the SMs: batch 1 on an H100 (8 KV heads, 16 warps a CTA)
 * got clusters of 9, 72 CTAs on 132 SMs, and the profile showed those SMs
 * issue-bound (65% issue slots busy, few waits on memory). So where few
 * (token, KV head) units leave the cluster plan under 3/4 of the warps a
 * wave holds and each split still has PD_GMERGE_MIN_KEYS keys, the splits
 * fill the GPU instead and write partials that paged_attention_merge adds
 * (gmerge: one more launch, no residency rule). Never with groups of
 * shared pages (grouped): their partials take the scratch, and the decode
 * kernel adds them in its own merge. A benchmark may pin the plan
 * (ctx->tuning.decode_warps, decode_splits and decode_merge, ops.h). */
#define PD_MAX_GSPLIT 64
#define PD_GMERGE_MIN_KEYS 512
int cuda_paged_decode_plan(const ops_ctx *ctx, long T, int Hkv, int D, int G, int max_ctx, int grouped, int *nw,
                           int *lm_out, int *gmerge) {
    const int forced_nw = ctx->tuning.decode_warps, forced_splits = ctx->tuning.decode_splits;
    const int forced_merge = ctx->tuning.decode_merge;
    if ((forced_nw != 0 && forced_nw != 4 && forced_nw != 8 && forced_nw != 16) || forced_splits < 0)
        DK_ABORT("ops_tuning.decode_warps = %d, decode_splits = %d: expected 0, 4, 8 or 16 warps and splits >= 0",
                 forced_nw, forced_splits);
    if (forced_merge < 0 || forced_merge > 2)
        DK_ABORT("ops_tuning.decode_merge = %d: expected 0 (chosen), 1 (in a cluster) or 2 (a second kernel)",
                 forced_merge);
    const int lm = pd_load_mode(ctx, T, Hkv, G);
    *lm_out = lm;
    if (forced_nw == 4 || (forced_nw > 4 && pd_wide_fits(D, pd_g_max(G), forced_nw, lm == PD_REGS))) {
        *nw = forced_nw;
        const int gm = forced_merge == 2 && !grouped;
        /* Asked either way: it sets the kernel's limits for the launch. */
        const int ccap =
            pd_cluster_max(ctx, kernel_for(D, G, forced_nw, lm), forced_nw, pd_smem_of(G, forced_nw, lm));
        const int cap = gm ? PD_MAX_GSPLIT : ccap;
        const int n = forced_splits < 1 ? 1 : forced_splits > cap ? cap : forced_splits;
        *gmerge = gm && n > 1;
        return n;
    }
    const long units = T * Hkv;
    int best_nw = 4, best_n = 1, g_nw = 4, g_n = 1;
    long best_warps = -1, g_warps = -1;
    /* 8 first, so that a tie keeps the smaller CTA of the two wide ones. */
    static const int widths[] = {8, 16, 4};
    for (int wi = 0; wi < 3; wi++) {
        const int w = widths[wi];
        if (w > 4 && !pd_wide_fits(D, pd_g_max(G), w, lm == PD_REGS)) continue;
        const pd_kernel k = kernel_for(D, G, w, lm);
        const size_t smem = pd_smem_of(G, w, lm);
        const long cap = pd_cluster_max(ctx, k, w, smem); /* first: it sets the kernel's limits */
        const long slots = (long)cuda_sm_count(ctx) * cuda_kernel_per_sm(ctx, (const void *)k, w * 32, smem);
        const long step = (long)w * (32 / (D / 8)) * pd_unroll(pd_g_max(G)); /* keys a CTA step */
        const long most = (max_ctx + step - 1) / step;
        long n = slots / units;
        if (n > most) n = most;
        long ng = n < PD_MAX_GSPLIT ? n : PD_MAX_GSPLIT; /* the same without the cluster's rules */
        if (n > cap) n = cap;
        /* Fewer splits until the clusters are resident together. */
        while (n > 1 && pd_clusters_resident(ctx, k, w, smem, (int)n) < units) n--;
        if (n < 1) n = 1;
        if (ng < 1) ng = 1;
        const long waves = slots > 0 ? (units * n + slots - 1) / slots : 0;
        const long warps = waves > 0 ? units * n * w / waves : 0;
        if (warps > best_warps) best_warps = warps, best_nw = w, best_n = (int)n;
        /* Without clusters, warps within 1/16 of each other are a tie, won
         * by the wider CTA (fewer splits to write and merge): Qwen3-1.7B
         * at batch 1, 32k context on an H100 ran a layer in 98.3 us with
         * 16 warps x 16 splits against 102.2 with 8 x 33. */
        const long gwarps = units <= slots ? units * ng * w : 0;
        const bool more = 16 * gwarps > 17 * g_warps, tie = 17 * gwarps >= 16 * g_warps && w > g_nw;
        if (g_warps < 0 || more || tie) g_warps = gwarps, g_nw = w, g_n = (int)ng;
    }
    int gm = forced_merge == 2 ||
             (forced_merge == 0 && units < cuda_sm_count(ctx) && 4 * best_warps < 3 * g_warps &&
              max_ctx / g_n >= PD_GMERGE_MIN_KEYS);
    if (grouped || g_n < 2) gm = 0;
    *gmerge = gm;
    *nw = gm ? g_nw : best_nw;
    return gm ? g_n : best_n;
}

/* One step of keys for every warp of a CTA, at the smaller unroll. */
int cuda_paged_decode_chunk_align(int D, int nw) { return nw * (32 / (D / 8)) * 2; }

/* The plan has set the kernel's limits (its shared memory, clusters past
 * 8) through pd_cluster_max; only a cluster split is checked again. */
void cuda_paged_decode_launch(ops_ctx *ctx, const pa_args *a, int nw, int lm) {
    const pd_kernel k = kernel_for(a->D, a->G, nw, lm);
    const size_t smem = pd_smem_of(a->G, nw, lm);
    if (a->nsplit > 1 && !a->gmerge) {
        const int cap = pd_cluster_max(ctx, k, nw, smem);
        if (a->nsplit > cap) DK_ABORT("paged_decode: %d splits exceed the cluster size %d", a->nsplit, cap);
    }
    cuda_launch_pdl_cluster(ctx_stream(ctx), cuda_pdl_rows(ctx, a->T), a->gmerge ? 1 : a->nsplit, k,
                            dim3((unsigned)((long)a->T * a->Hkv), (unsigned)a->nsplit), dim3((unsigned)nw * 32), smem,
                            *a);
}
