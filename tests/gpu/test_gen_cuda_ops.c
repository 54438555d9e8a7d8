/* test_gen_cuda_ops.c: the CUDA generation ops (ops_kv_write,
 * ops_paged_attention, ops_qkv_to_cache, ops_sample) against the CPU
 * reference ops on the same data. Exits 77 where no CUDA GPU (or no CUDA op
 * table) is available.
 *
 * Inputs are drawn in fp32 and rounded to bf16 once, so both backends see the
 * same values. Tolerances and why:
 * - kv_write moves bf16 values: exact.
 * - paged attention: the tensor-core kernel rounds P to bf16 for the P.V
 *   product (relative 2^-9 per weight) and every kernel rounds its output to
 *   bf16 (2^-9), on outputs of size <= max|v| = ~4: max abs error 2e-2; a
 *   mean abs error above 2e-3 would mean a systematic error, not rounding.
 *   Each shape runs with the kernel the op picks and then with the warp
 *   (few-queries) and tensor-core kernels pinned: D = 32, 64, 128, 256; GQA
 *   1..8; decode, multi-tile continuation prefill, contexts long enough to
 *   split and merge; page sizes 1, 3, 16, 64; and the plain kernel for
 *   D = 16, 48.
 * - sample: same fp32 logits in, so the same token except where two
 *   candidates differ by an ulp-level amount (expf / logf differ by an ulp
 *   between the two math libraries): at least 99.9% of draws agree, greedy
 *   always; logprobs agree to 2e-5. The GPU's empirical frequencies pass the
 *   same chi-square test as the CPU's, with top-k / top-p over a 151936-token
 *   vocabulary.
 * - grouped reads (ops_kv_groups: sequences sharing leading pages read
 *   them once a group): the same bounds against the CPU op, which checks
 *   the groups, and against the GPU without groups; bitwise repeatable.
 * - the warp kernel's three ways of loading rows (ops_tuning.decode_prefetch)
 *   give the same bits under one pinned plan; its splits merged by a second
 *   kernel (decode_merge 2, 3 and 24 splits) meet the CPU bounds above and
 *   repeat bitwise.
 * - a pinned paged attention kernel or decode plan out of range
 *   (ops_tuning.paged_kernel, decode_warps, decode_prefetch, decode_merge)
 *   aborts naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/util.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "../unit/test_ops_common.h"
#include "tests/expect_abort.h"

static ops_ctx cpu, gpu;

/* The paged attention kernel the GPU context's calls take (ops_tuning). */
static void pin_paged_kernel(int kind) { gpu.tuning.paged_kernel = kind; }

/* Rounds to bf16 (nearest even), in place: the values both backends see. */
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
        memcpy(&x[i], &u, 4);
    }
}

static void *gpu_act(const float *h, size_t n) {
    void *d = ops_alloc(&gpu, n * 2);
    ops_upload_act(&gpu, d, h, n);
    return d;
}

static void *gpu_copy(const void *h, size_t bytes) {
    void *d = ops_alloc(&gpu, bytes ? bytes : 4);
    ops_upload(&gpu, d, h, bytes);
    ops_sync(&gpu);
    return d;
}

/* ---- kv_write + paged attention ---------------------------------------------------- */

static void check_paged(const char *what, int n_seqs, const int *lens, const int *nq, int Hq, int Hkv, int D,
                        int P) {
    rng_seed((uint64_t)(n_seqs * 7919 + Hq * 131 + D * 17 + P));
    int Tq = 0, maxp = 0, total_pages = 0;
    for (int s = 0; s < n_seqs; s++) {
        Tq += nq[s];
        int np = (lens[s] + P - 1) / P;
        if (np > maxp) maxp = np;
        total_pages += np;
    }
    const int n_pages = total_pages + 5;
    const size_t kvrow = (size_t)Hkv * D, qrow = (size_t)Hq * D;
    const size_t cache_n = (size_t)n_pages * P * kvrow;
    /* Cache contents: every slot random (unused slots too, as garbage). */
    float *kc = rand_normal(cache_n, 1.0f, 0.0f), *vc = rand_normal(cache_n, 1.0f, 0.0f);
    round_bf16(kc, cache_n);
    round_bf16(vc, cache_n);
    /* Pages in reverse order, so sequences interleave in memory. */
    int32_t *bt = dk_calloc((size_t)n_seqs * maxp, sizeof(int32_t));
    for (int s = 0, next = n_pages - 1; s < n_seqs; s++)
        for (int p = 0; p < (lens[s] + P - 1) / P; p++) bt[s * maxp + p] = next--;
    int32_t *cq = dk_malloc((size_t)(n_seqs + 1) * sizeof(int32_t)), *cl = dk_malloc((size_t)n_seqs * sizeof(int32_t));
    cq[0] = 0;
    for (int s = 0; s < n_seqs; s++) cq[s + 1] = cq[s] + nq[s], cl[s] = lens[s];
    const int T = Tq;
    float *q = rand_normal((size_t)T * qrow, 1.0f, 0.0f);
    round_bf16(q, (size_t)T * qrow);

    /* The new tokens' k/v are written by kv_write on both backends. */
    float *kn = rand_normal((size_t)T * kvrow, 1.0f, 0.0f), *vn = rand_normal((size_t)T * kvrow, 1.0f, 0.0f);
    round_bf16(kn, (size_t)T * kvrow);
    round_bf16(vn, (size_t)T * kvrow);
    int32_t *slots = dk_malloc((size_t)T * sizeof(int32_t));
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < nq[s]; i++) {
            int pos = lens[s] - nq[s] + i;
            slots[cq[s] + i] = bt[s * maxp + pos / P] * P + pos % P;
        }
    float *kc_c = dk_malloc(cache_n * 4), *vc_c = dk_malloc(cache_n * 4);
    memcpy(kc_c, kc, cache_n * 4);
    memcpy(vc_c, vc, cache_n * 4);
    ops_kv_write(&cpu, kc_c, vc_c, kn, vn, slots, T, Hkv, D);
    void *d_kc = gpu_act(kc, cache_n), *d_vc = gpu_act(vc, cache_n);
    void *d_kn = gpu_act(kn, (size_t)T * kvrow), *d_vn = gpu_act(vn, (size_t)T * kvrow);
    int32_t *d_slots = gpu_copy(slots, (size_t)T * 4);
    ops_kv_write(&gpu, d_kc, d_vc, d_kn, d_vn, d_slots, T, Hkv, D);
    float *kc_g = dk_malloc(cache_n * 4), *vc_g = dk_malloc(cache_n * 4);
    ops_download_act(&gpu, kc_g, d_kc, cache_n);
    ops_download_act(&gpu, vc_g, d_vc, cache_n);
    int kv_same = !memcmp(kc_g, kc_c, cache_n * 4) && !memcmp(vc_g, vc_c, cache_n * 4);

    float *out_c = dk_malloc((size_t)T * qrow * 4), *out_g = dk_malloc((size_t)T * qrow * 4);
    const float scale = 1.0f / sqrtf((float)D);
    ops_paged_attention(&cpu, out_c, q, kc_c, vc_c, bt, maxp, cl, cq, n_seqs, T, Hq, Hkv, D, P, scale, NULL);
    void *d_q = gpu_act(q, (size_t)T * qrow), *d_out = ops_alloc(&gpu, (size_t)T * qrow * 2);
    int32_t *d_bt = gpu_copy(bt, (size_t)n_seqs * maxp * 4), *d_cq = gpu_copy(cq, (size_t)(n_seqs + 1) * 4);
    int32_t *d_cl = gpu_copy(cl, (size_t)n_seqs * 4);
    CHECK(kv_same, "%s: kv_write differs from the CPU op", what);
    /* The kernel the op picks, then each kernel that can serve the shape
     * pinned in turn (the warp kernel for few queries, the tensor-core one). */
    static const int kinds[] = {OPS_PAGED_AUTO, OPS_PAGED_DECODE, OPS_PAGED_MMA};
    static const char *kind_names[] = {"auto", "warp", "mma"};
    for (int k = 0; k < 3; k++) {
        if (k > 0 && D % 32 != 0) continue; /* the plain kernel serves these */
        if (kinds[k] == OPS_PAGED_DECODE && Hq / Hkv > 8) continue;
        pin_paged_kernel(kinds[k]);
        ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n_seqs, T, Hq, Hkv, D, P, scale,
                            NULL);
        pin_paged_kernel(OPS_PAGED_AUTO);
        ops_download_act(&gpu, out_g, d_out, (size_t)T * qrow);
        double mx = max_abs_diff(out_g, out_c, (size_t)T * qrow), mean = 0.0;
        for (size_t i = 0; i < (size_t)T * qrow; i++) mean += fabs((double)out_g[i] - out_c[i]);
        mean /= (double)T * qrow;
        printf("  %-34s Hq %2d Hkv %d D %3d page %2d T %4d: kv_write %s, attention (%s) max|diff| %.2e mean %.2e\n",
               what, Hq, Hkv, D, P, T, kv_same ? "exact" : "DIFFERENT", kind_names[k], mx, mean);
        CHECK(mx <= 2e-2 && mean <= 2e-3, "%s (%s kernel): paged attention max|diff| %.3e mean %.3e", what,
              kind_names[k], mx, mean);
        if (kinds[k] == OPS_PAGED_DECODE) {
            /* The warp kernel merges its splits in a cluster, in split
             * order: a second launch gives the same bits. */
            float *again = dk_malloc((size_t)T * qrow * 4);
            pin_paged_kernel(OPS_PAGED_DECODE);
            ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n_seqs, T, Hq, Hkv, D, P, scale,
                                NULL);
            pin_paged_kernel(OPS_PAGED_AUTO);
            ops_download_act(&gpu, again, d_out, (size_t)T * qrow);
            CHECK(!memcmp(again, out_g, (size_t)T * qrow * 4), "%s (warp kernel): a second launch differs", what);
            /* How a warp's rows load (direct, next rows in registers, a
             * shared-memory ring) changes when keys arrive, not the
             * arithmetic: under one pinned plan (4 warps, 3 splits; the
             * chosen plan may differ with the mode) the same bits every
             * way, and within the tolerance of the CPU op. */
            static const int modes[] = {-1, 1, 2};
            static const char *const mode_names[] = {"direct", "registers", "ring"};
            float *lm_out[3];
            gpu.tuning.decode_warps = 4, gpu.tuning.decode_splits = 3;
            for (int i = 0; i < 3; i++) {
                lm_out[i] = dk_malloc((size_t)T * qrow * 4);
                gpu.tuning.decode_prefetch = modes[i];
                pin_paged_kernel(OPS_PAGED_DECODE);
                ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n_seqs, T, Hq, Hkv, D, P,
                                    scale, NULL);
                pin_paged_kernel(OPS_PAGED_AUTO);
                ops_download_act(&gpu, lm_out[i], d_out, (size_t)T * qrow);
            }
            gpu.tuning.decode_prefetch = 0, gpu.tuning.decode_warps = 0, gpu.tuning.decode_splits = 0;
            for (int i = 1; i < 3; i++) {
                const double lm_mx = max_abs_diff(lm_out[i], out_c, (size_t)T * qrow);
                CHECK(!memcmp(lm_out[0], lm_out[i], (size_t)T * qrow * 4),
                      "%s (warp kernel, 4 warps, 3 splits): %s loads change the output", what, mode_names[i]);
                CHECK(lm_mx <= 2e-2, "%s (warp kernel, 4 warps, 3 splits, %s loads): max|diff| %.3e", what,
                      mode_names[i], lm_mx);
            }
            for (int i = 0; i < 3; i++) free(lm_out[i]);
            /* Splits merged by a second kernel from partials in the
             * scratch (ops_tuning.decode_merge 2; past the cluster size
             * too): within the CPU op's tolerance, and the same bits on a
             * second launch. */
            static const int gsplits[] = {3, 24};
            for (int i = 0; i < 2; i++) {
                float *gm_out[2] = {dk_malloc((size_t)T * qrow * 4), dk_malloc((size_t)T * qrow * 4)};
                gpu.tuning.decode_warps = 4, gpu.tuning.decode_splits = gsplits[i], gpu.tuning.decode_merge = 2;
                for (int r = 0; r < 2; r++) {
                    pin_paged_kernel(OPS_PAGED_DECODE);
                    ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n_seqs, T, Hq, Hkv, D,
                                        P, scale, NULL);
                    pin_paged_kernel(OPS_PAGED_AUTO);
                    ops_download_act(&gpu, gm_out[r], d_out, (size_t)T * qrow);
                }
                gpu.tuning.decode_warps = 0, gpu.tuning.decode_splits = 0, gpu.tuning.decode_merge = 0;
                double gm_mean = 0.0;
                for (size_t e = 0; e < (size_t)T * qrow; e++) gm_mean += fabs((double)gm_out[0][e] - out_c[e]);
                gm_mean /= (double)T * qrow;
                const double gm_mx = max_abs_diff(gm_out[0], out_c, (size_t)T * qrow);
                CHECK(gm_mx <= 2e-2 && gm_mean <= 2e-3,
                      "%s (warp kernel, 4 warps, %d splits merged by a second kernel): max|diff| %.3e mean %.3e",
                      what, gsplits[i], gm_mx, gm_mean);
                CHECK(!memcmp(gm_out[0], gm_out[1], (size_t)T * qrow * 4),
                      "%s (warp kernel, %d splits merged by a second kernel): a second launch differs", what,
                      gsplits[i]);
                free(gm_out[0]), free(gm_out[1]);
            }
            free(again);
        }
    }

    void *dbufs[] = {d_kc, d_vc, d_kn, d_vn, d_slots, d_q, d_out, d_bt, d_cq, d_cl};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) ops_free(&gpu, dbufs[i]);
    free(kc), free(vc), free(bt), free(cq), free(cl), free(q), free(kn), free(vn), free(slots);
    free(kc_c), free(vc_c), free(kc_g), free(vc_g), free(out_c), free(out_g);
}

static void test_paged(void) {
    {   /* decode: one query per sequence, mixed context lengths */
        int lens[] = {1, 17, 300, 64, 129, 1000, 5, 77}, nq[] = {1, 1, 1, 1, 1, 1, 1, 1};
        check_paged("decode", 8, lens, nq, 16, 8, 128, 16);
        check_paged("decode", 8, lens, nq, 8, 1, 64, 3);
        check_paged("decode", 8, lens, nq, 4, 4, 32, 1);
        check_paged("decode, 5 heads per KV head", 8, lens, nq, 40, 8, 128, 16);
        check_paged("decode, 4 heads per KV head", 8, lens, nq, 32, 8, 128, 16);
        check_paged("decode, head dim 256", 8, lens, nq, 8, 4, 256, 16);
        check_paged("decode (plain kernel)", 8, lens, nq, 4, 2, 16, 16);
        check_paged("decode (plain kernel)", 8, lens, nq, 6, 3, 48, 64);
    }
    {   /* a full batch of 5-head groups: the op picks the tensor-core kernel */
        int lens[40], nq[40];
        for (int i = 0; i < 40; i++) lens[i] = 1 + (i * 97) % 700, nq[i] = 1;
        check_paged("decode, 5 heads, 40 sequences", 40, lens, nq, 40, 8, 128, 16);
        check_paged("decode, 6 heads, 40 sequences", 40, lens, nq, 48, 8, 64, 16);
    }
    {   /* one long sequence: split along the context and merged */
        int lens[] = {5000}, nq[] = {1};
        check_paged("decode, long context (split)", 1, lens, nq, 16, 8, 128, 16);
        check_paged("decode, long context (split)", 1, lens, nq, 16, 2, 64, 16);
        check_paged("decode, long context (plain)", 1, lens, nq, 4, 2, 16, 16);
    }
    {   /* continuation prefill: several queries, multi-tile, causal inside */
        int lens[] = {700, 40, 333}, nq[] = {200, 40, 33};
        check_paged("continuation prefill", 3, lens, nq, 16, 8, 128, 16);
        check_paged("continuation prefill", 3, lens, nq, 12, 4, 64, 3);
        check_paged("continuation prefill (plain)", 3, lens, nq, 4, 2, 16, 16);
    }
    {   /* a prompt prefill long enough to split, with a short neighbour */
        int lens[] = {3, 2100}, nq[] = {3, 5};
        check_paged("few queries, long context", 2, lens, nq, 16, 8, 128, 16);
    }
}

/* ---- grouped reads ---------------------------------------------------------------------- */

/* A decode step whose sequences come in groups that share leading pages
 * (ops_kv_groups): group j has size[j] sequences (1: none) sharing
 * shared[j] pages, each then its own suffix of 1 + (37 * s) % own keys.
 * The GPU with the groups against the CPU op (which checks the groups and
 * computes every key of every sequence), at the tolerances above, and
 * against the GPU without them; a second launch gives the same bits. */
static void check_grouped(const char *what, int n_groups, const int *size, const int *shared, int own, int Hq,
                          int Hkv, int D, int P) {
    rng_seed((uint64_t)(n_groups * 104729 + Hq * 131 + D * 17 + own));
    int n = 0, maxp = 0, n_pages = 0;
    for (int j = 0; j < n_groups; j++) n += size[j];
    int *lens = dk_malloc((size_t)n * sizeof(int));
    for (int j = 0, s = 0; j < n_groups; j++)
        for (int k = 0; k < size[j]; k++, s++) {
            lens[s] = shared[j] * P + 1 + (37 * s) % own;
            const int np = (lens[s] + P - 1) / P;
            if (np > maxp) maxp = np;
            n_pages += np - (k > 0 ? shared[j] : 0);
        }
    const size_t kvrow = (size_t)Hkv * D, qrow = (size_t)Hq * D, cache_n = (size_t)n_pages * P * kvrow;
    float *kc = rand_normal(cache_n, 1.0f, 0.0f), *vc = rand_normal(cache_n, 1.0f, 0.0f);
    float *q = rand_normal((size_t)n * qrow, 1.0f, 0.0f);
    round_bf16(kc, cache_n), round_bf16(vc, cache_n), round_bf16(q, (size_t)n * qrow);
    /* Pages handed out in reverse; a group's members hold its first
     * sequence's leading pages. */
    int32_t *bt = dk_calloc((size_t)n * maxp, sizeof(int32_t)), *gbt = dk_calloc((size_t)n * maxp, sizeof(int32_t));
    int32_t *first = dk_malloc((size_t)n * 4), *end = dk_malloc((size_t)n * 4), *glen = dk_malloc((size_t)n * 4);
    int32_t *skip = dk_calloc((size_t)n, 4), *cq = dk_malloc((size_t)(n + 1) * 4), *cl = dk_malloc((size_t)n * 4);
    int ng = 0, max_len = 0;
    for (int j = 0, s = 0, next = n_pages - 1; j < n_groups; j++) {
        const int s0 = s;
        for (int k = 0; k < size[j]; k++, s++)
            for (int p = 0; p < (lens[s] + P - 1) / P; p++)
                bt[s * maxp + p] = k > 0 && p < shared[j] ? bt[s0 * maxp + p] : next--;
        if (size[j] < 2) continue;
        first[ng] = s0, end[ng] = s, glen[ng] = shared[j] * P;
        memcpy(gbt + (size_t)ng * maxp, bt + (size_t)s0 * maxp, (size_t)shared[j] * 4);
        for (int k = s0; k < s; k++) skip[k] = glen[ng];
        if (glen[ng] > max_len) max_len = glen[ng];
        ng++;
    }
    for (int s = 0; s <= n; s++) cq[s] = s;
    for (int s = 0; s < n; s++) cl[s] = lens[s];
    const float scale = 1.0f / sqrtf((float)D);
    ops_kv_groups gh = {.n = ng, .max_len = max_len, .first = first, .end = end, .len = glen, .block_table = gbt,
                        .skip = skip};
    float *out_c = dk_malloc((size_t)n * qrow * 4), *out_p = dk_malloc((size_t)n * qrow * 4);
    ops_paged_attention(&cpu, out_c, q, kc, vc, bt, maxp, cl, cq, n, n, Hq, Hkv, D, P, scale, &gh);
    ops_paged_attention(&cpu, out_p, q, kc, vc, bt, maxp, cl, cq, n, n, Hq, Hkv, D, P, scale, NULL);
    CHECK(!memcmp(out_c, out_p, (size_t)n * qrow * 4), "%s: the CPU op's result depends on the groups", what);

    void *d_kc = gpu_act(kc, cache_n), *d_vc = gpu_act(vc, cache_n), *d_q = gpu_act(q, (size_t)n * qrow);
    void *d_out = ops_alloc(&gpu, (size_t)n * qrow * 2);
    int32_t *d_bt = gpu_copy(bt, (size_t)n * maxp * 4), *d_cq = gpu_copy(cq, (size_t)(n + 1) * 4);
    int32_t *d_cl = gpu_copy(cl, (size_t)n * 4), *d_gbt = gpu_copy(gbt, (size_t)n * maxp * 4);
    int32_t *d_first = gpu_copy(first, (size_t)n * 4), *d_end = gpu_copy(end, (size_t)n * 4);
    int32_t *d_glen = gpu_copy(glen, (size_t)n * 4), *d_skip = gpu_copy(skip, (size_t)n * 4);
    ops_kv_groups gd = {.n = ng, .max_len = max_len, .first = d_first, .end = d_end, .len = d_glen,
                        .block_table = d_gbt, .skip = d_skip};
    float *out_g = dk_malloc((size_t)n * qrow * 4), *out_u = dk_malloc((size_t)n * qrow * 4);
    float *again = dk_malloc((size_t)n * qrow * 4);
    ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n, n, Hq, Hkv, D, P, scale, &gd);
    ops_download_act(&gpu, out_g, d_out, (size_t)n * qrow);
    ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n, n, Hq, Hkv, D, P, scale, &gd);
    ops_download_act(&gpu, again, d_out, (size_t)n * qrow);
    ops_paged_attention(&gpu, d_out, d_q, d_kc, d_vc, d_bt, maxp, d_cl, d_cq, n, n, Hq, Hkv, D, P, scale, NULL);
    ops_download_act(&gpu, out_u, d_out, (size_t)n * qrow);
    const size_t N = (size_t)n * qrow;
    double mx = max_abs_diff(out_g, out_c, N), mxu = max_abs_diff(out_g, out_u, N), mean = 0.0;
    for (size_t i = 0; i < N; i++) mean += fabs((double)out_g[i] - out_c[i]);
    mean /= (double)N;
    printf("  grouped %-32s %2d seqs in %d groups (max %4d keys shared) Hq %2d Hkv %d D %3d: max|diff| %.2e mean "
           "%.2e vs CPU, %.2e vs ungrouped\n",
           what, n, ng, max_len, Hq, Hkv, D, mx, mean, mxu);
    CHECK(ng > 0, "%s: no group formed", what);
    CHECK(mx <= 2e-2 && mean <= 2e-3, "%s: grouped paged attention max|diff| %.3e mean %.3e", what, mx, mean);
    CHECK(mxu <= 2e-2, "%s: grouped and ungrouped differ by %.3e", what, mxu);
    CHECK(!memcmp(again, out_g, N * 4), "%s: a second grouped launch differs", what);
    void *dbufs[] = {d_kc, d_vc, d_q, d_out, d_bt, d_cq, d_cl, d_gbt, d_first, d_end, d_glen, d_skip};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) ops_free(&gpu, dbufs[i]);
    free(lens), free(kc), free(vc), free(q), free(bt), free(gbt), free(first), free(end), free(glen), free(skip);
    free(cq), free(cl), free(out_c), free(out_p), free(out_g), free(out_u), free(again);
}

static void test_grouped(void) {
    {   /* the RL shape in small: samples of a few prompts, a loner between */
        const int size[] = {6, 1, 5, 4}, shared[] = {8, 0, 3, 20};
        check_grouped("rollout groups", 4, size, shared, 90, 16, 8, 128, 16);
        check_grouped("rollout groups, 4 heads per KV head", 4, size, shared, 90, 32, 8, 128, 16);
        check_grouped("rollout groups, 5 heads per KV head", 4, size, shared, 90, 40, 8, 128, 16);
        check_grouped("rollout groups, MHA, head dim 64", 4, size, shared, 90, 8, 8, 64, 16);
        check_grouped("rollout groups, 8 heads per KV head", 4, size, shared, 90, 16, 2, 128, 16);
    }
    {   /* 16 samples: the group's tile holds 16 x G rows (two tiles at G = 5) */
        const int size[] = {16, 16}, shared[] = {130, 64};
        check_grouped("16 samples of 2k prompts", 2, size, shared, 300, 16, 8, 128, 16);
        check_grouped("16 samples, 5 heads per KV head", 2, size, shared, 300, 40, 8, 128, 16);
    }
    {   /* two sequences with long own suffixes: the decode kernel splits too */
        const int size[] = {2}, shared[] = {40};
        check_grouped("long own suffix (split decode)", 1, size, shared, 4000, 16, 8, 128, 16);
        check_grouped("long shared prefix, pages of 64", 1, size, shared, 50, 16, 8, 128, 64);
    }
}

/* ---- qkv_to_cache ---------------------------------------------------------------------- */

/* The fused q|k|v tail against the CPU op (the unfused ops run in turn).
 * The GPU rounds the normed value and the rotated one to bf16 (2^-9
 * relative each); the CPU keeps fp32: |diff| <= 1e-2 (1 + |cpu|). v rows and
 * untouched cache slots are copies: exact. */
static void check_qkv_to_cache(const char *what, int T, int Hq, int Hkv, int D, int norm, int max_pos) {
    rng_seed((uint64_t)(T * 31 + Hq * 7 + D + norm));
    const size_t Q = (size_t)Hq * D, KV = (size_t)Hkv * D, row = Q + 2 * KV;
    const int n_slots = 2 * T + 3;
    float *qkv = rand_normal((size_t)T * row, 1.5f, 0.0f), *wq = rand_normal((size_t)D, 0.3f, 1.0f);
    float *wk = rand_normal((size_t)D, 0.3f, 1.0f);
    float *kc = rand_normal((size_t)n_slots * KV, 1.0f, 0.0f), *vc = rand_normal((size_t)n_slots * KV, 1.0f, 0.0f);
    round_bf16(qkv, (size_t)T * row), round_bf16(wq, D), round_bf16(wk, D);
    round_bf16(kc, (size_t)n_slots * KV), round_bf16(vc, (size_t)n_slots * KV);
    int32_t *pos = dk_malloc((size_t)T * 4), *slots = dk_malloc((size_t)T * 4);
    for (int t = 0; t < T; t++) {
        pos[t] = (int32_t)(rng_next() % (uint64_t)(max_pos + 1));
        slots[t] = t % 5 == 3 ? -1 : 2 * t + 1; /* some tokens not cached */
    }
    float *q_c = dk_malloc((size_t)T * Q * 4), *kc_c = dk_malloc((size_t)n_slots * KV * 4);
    float *vc_c = dk_malloc((size_t)n_slots * KV * 4);
    memcpy(kc_c, kc, (size_t)n_slots * KV * 4), memcpy(vc_c, vc, (size_t)n_slots * KV * 4);
    ops_qkv_to_cache(&cpu, q_c, kc_c, vc_c, qkv, norm ? wq : NULL, norm ? wk : NULL, pos, slots, T, Hq, Hkv, D,
                     1e-6f, 1e6f);
    void *d_qkv = gpu_act(qkv, (size_t)T * row), *d_wq = gpu_act(wq, D), *d_wk = gpu_act(wk, D);
    void *d_kc = gpu_act(kc, (size_t)n_slots * KV), *d_vc = gpu_act(vc, (size_t)n_slots * KV);
    void *d_q = ops_alloc(&gpu, (size_t)T * Q * 2);
    int32_t *d_pos = gpu_copy(pos, (size_t)T * 4), *d_slots = gpu_copy(slots, (size_t)T * 4);
    ops_qkv_to_cache(&gpu, d_q, d_kc, d_vc, d_qkv, norm ? d_wq : NULL, norm ? d_wk : NULL, d_pos, d_slots, T, Hq,
                     Hkv, D, 1e-6f, 1e6f);
    float *q_g = dk_malloc((size_t)T * Q * 4), *kc_g = dk_malloc((size_t)n_slots * KV * 4);
    float *vc_g = dk_malloc((size_t)n_slots * KV * 4);
    ops_download_act(&gpu, q_g, d_q, (size_t)T * Q);
    ops_download_act(&gpu, kc_g, d_kc, (size_t)n_slots * KV);
    ops_download_act(&gpu, vc_g, d_vc, (size_t)n_slots * KV);
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)T * Q; i++) worst = fmax(worst, fabs((double)q_g[i] - q_c[i]) / (1.0 + fabs(q_c[i])));
    for (size_t i = 0; i < (size_t)n_slots * KV; i++)
        worst = fmax(worst, fabs((double)kc_g[i] - kc_c[i]) / (1.0 + fabs(kc_c[i])));
    const int v_same = !memcmp(vc_g, vc_c, (size_t)n_slots * KV * 4);
    printf("  qkv_to_cache %-22s T %3d Hq %2d Hkv %d D %3d: q/k worst |diff|/(1+|cpu|) %.2e, v cache %s\n", what, T,
           Hq, Hkv, D, worst, v_same ? "exact" : "DIFFERENT");
    CHECK(worst <= 1e-2, "qkv_to_cache %s: q/k differ from the CPU op by %.3e", what, worst);
    CHECK(v_same, "qkv_to_cache %s: v cache differs from the CPU op", what);
    void *dbufs[] = {d_qkv, d_wq, d_wk, d_kc, d_vc, d_q, d_pos, d_slots};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) ops_free(&gpu, dbufs[i]);
    free(qkv), free(wq), free(wk), free(kc), free(vc), free(pos), free(slots);
    free(q_c), free(kc_c), free(vc_c), free(q_g), free(kc_g), free(vc_g);
}

static void test_qkv_to_cache(void) {
    check_qkv_to_cache("decode, q/k norm", 1, 16, 8, 128, 1, 4000);
    check_qkv_to_cache("batch, q/k norm", 64, 16, 8, 128, 1, 40000);
    check_qkv_to_cache("batch, no norm", 33, 12, 4, 64, 0, 3000);
    check_qkv_to_cache("odd head dim", 7, 6, 3, 48, 1, 100);
}

/* ---- sample ---------------------------------------------------------------------------- */

/* top_k < 0: odd rows keep the -top_k best, even rows nothing truncated
 * (a batch that mixes the sliced and the one-block paths). */
static void compare_sample(const char *what, int n, int V, float T, int top_k, float top_p) {
    rng_seed((uint64_t)(V + top_k * 7 + n));
    float *z = rand_normal((size_t)n * V, 2.0f, 0.0f);
    sample_params *prm = dk_malloc((size_t)n * sizeof(sample_params));
    for (int r = 0; r < n; r++) {
        const int k = top_k >= 0 ? top_k : (r & 1 ? -top_k : 0);
        prm[r] = (sample_params){.temperature = T, .top_p = top_p, .top_k = k, .seed = 5, .counter = (uint64_t)r};
    }
    float *zc = dk_malloc((size_t)n * V * 4);
    memcpy(zc, z, (size_t)n * V * 4);
    int32_t *tc = dk_malloc((size_t)n * 4), *tg = dk_malloc((size_t)n * 4);
    float *lc = dk_malloc((size_t)n * 4), *lg = dk_malloc((size_t)n * 4);
    double t0 = dk_now();
    ops_sample(&cpu, tc, lc, zc, prm, n, V);
    double cpu_s = dk_now() - t0;
    float *d_z = gpu_copy(z, (size_t)n * V * 4);
    sample_params *d_p = gpu_copy(prm, (size_t)n * sizeof(sample_params));
    int32_t *d_t = ops_alloc(&gpu, (size_t)n * 4);
    float *d_l = ops_alloc(&gpu, (size_t)n * 4);
    ops_sample(&gpu, d_t, d_l, d_z, d_p, n, V);
    ops_download(&gpu, tg, d_t, (size_t)n * 4);
    ops_download(&gpu, lg, d_l, (size_t)n * 4);
    /* The last row again, alone (its logits afresh: the op may use them as
     * scratch): a row's token and logprob bits must not depend on the rows
     * sampled beside it. */
    int32_t t1;
    float l1;
    float *d_z1 = gpu_copy(z + (size_t)(n - 1) * V, (size_t)V * 4);
    ops_sample(&gpu, d_t, d_l, d_z1, d_p + (n - 1), 1, V);
    ops_download(&gpu, &t1, d_t, 4);
    ops_download(&gpu, &l1, d_l, 4);
    ops_free(&gpu, d_z1);
    int same = 0;
    double lp = 0.0;
    for (int r = 0; r < n; r++) {
        same += tc[r] == tg[r];
        if (tc[r] == tg[r]) lp = fmax(lp, fabs((double)lc[r] - lg[r]));
    }
    /* A checksum of the GPU's tokens and logprobs, to compare builds. */
    const uint32_t bits = crc32c_extend(crc32c_extend(0, tg, (size_t)n * 4), lg, (size_t)n * 4);
    printf("  sample %-8s n %5d V %6d T %.1f top_k %4d top_p %.2f: same token %d/%d, logprob max|diff| %.1e, "
           "GPU bits %08x (cpu %.0f ms)\n",
           what, n, V, (double)T, top_k, (double)top_p, same, n, lp, bits, cpu_s * 1e3);
    CHECK(T == 0.0f ? same == n : same >= n - n / 1000, "%s: GPU and CPU drew the same token in %d of %d rows",
          what, same, n);
    CHECK(lp <= 2e-5, "%s: logprob differs by %.3e", what, lp);
    CHECK(t1 == tg[n - 1] && memcmp(&l1, &lg[n - 1], 4) == 0,
          "%s: the last row alone drew %d (logprob %.9g), in the batch %d (%.9g)", what, t1, (double)l1, tg[n - 1],
          (double)lg[n - 1]);
    ops_free(&gpu, d_z), ops_free(&gpu, d_p), ops_free(&gpu, d_t), ops_free(&gpu, d_l);
    free(z), free(prm), free(zc), free(tc), free(tg), free(lc), free(lg);
}

/* Chi-square of GPU draws of one logit vector against the truncated softmax
 * (kept set computed here by sorting in double). */
static const double *sort_y;
static int by_y_desc(const void *a, const void *b) {
    double ya = sort_y[*(const int *)a], yb = sort_y[*(const int *)b];
    return ya != yb ? (ya > yb ? -1 : 1) : *(const int *)a - *(const int *)b;
}

static void gpu_chi2(int V, float T, int top_k, float top_p, int N) {
    enum { BATCH = 1000 };
    rng_seed(77);
    float *z = rand_normal((size_t)V, 1.0f, 0.0f);
    double *y = dk_malloc((size_t)V * 8), *prob = dk_calloc((size_t)V, 8);
    int *idx = dk_malloc((size_t)V * sizeof(int));
    for (int i = 0; i < V; i++) y[i] = (double)(z[i] / T), idx[i] = i;
    sort_y = y;
    qsort(idx, (size_t)V, sizeof(int), by_y_desc);
    int keep = top_k > 0 && top_k < V ? top_k : V;
    double m = y[idx[0]], tot = 0.0;
    for (int i = 0; i < keep; i++) tot += exp(y[idx[i]] - m);
    if (top_p < 1.0f) {
        double cum = 0.0;
        int n = 0;
        while (n < keep) {
            cum += exp(y[idx[n]] - m) / tot;
            n++;
            if (cum >= top_p) break;
        }
        keep = n;
    }
    double s = 0.0;
    for (int i = 0; i < keep; i++) s += exp(y[idx[i]] - m);
    for (int i = 0; i < keep; i++) prob[idx[i]] = exp(y[idx[i]] - m) / s;

    float *rows = dk_malloc((size_t)BATCH * V * 4);
    sample_params *prm = dk_malloc((size_t)BATCH * sizeof(sample_params));
    for (int r = 0; r < BATCH; r++) memcpy(rows + (size_t)r * V, z, (size_t)V * 4);
    float *d_z = ops_alloc(&gpu, (size_t)BATCH * V * 4);
    sample_params *d_p = ops_alloc(&gpu, (size_t)BATCH * sizeof(sample_params));
    int32_t *d_t = ops_alloc(&gpu, (size_t)BATCH * 4);
    float *d_l = ops_alloc(&gpu, (size_t)BATCH * 4);
    int32_t *tok = dk_malloc((size_t)N * 4);
    for (int b0 = 0; b0 < N; b0 += BATCH) {
        for (int r = 0; r < BATCH; r++)
            prm[r] = (sample_params){.temperature = T, .top_p = top_p, .top_k = top_k, .seed = 21,
                                     .counter = (uint64_t)(b0 + r)};
        ops_upload(&gpu, d_z, rows, (size_t)BATCH * V * 4);
        ops_upload(&gpu, d_p, prm, (size_t)BATCH * sizeof(sample_params));
        ops_sample(&gpu, d_t, d_l, d_z, d_p, BATCH, V);
        ops_download(&gpu, tok + b0, d_t, (size_t)BATCH * 4);
    }
    long *count = dk_calloc((size_t)V, sizeof(long));
    int outside = 0;
    for (int r = 0; r < N; r++) {
        if (tok[r] < 0 || tok[r] >= V || prob[tok[r]] == 0.0) outside++;
        else count[tok[r]]++;
    }
    double chi2 = 0.0, pe = 0.0, po = 0.0;
    int bins = 0;
    for (int i = 0; i < V; i++) {
        if (prob[i] == 0.0) continue;
        double e = prob[i] * N;
        if (e < 5.0) {
            pe += e, po += count[i];
            continue;
        }
        chi2 += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (pe > 0.0) chi2 += (po - pe) * (po - pe) / pe, bins++;
    int dof = bins - 1;
    double a = 2.0 / (9.0 * (dof > 0 ? dof : 1)), c = 1.0 - a + 3.0902 * sqrt(a), crit = dof * c * c * c;
    printf("  GPU chi-square V %6d T %.1f top_k %3d top_p %.2f: kept %d, chi2 %.1f (dof %d, crit %.1f), outside %d\n",
           V, (double)T, top_k, (double)top_p, keep, chi2, dof, crit, outside);
    CHECK(outside == 0, "GPU drew %d tokens outside the truncated set", outside);
    CHECK(dof <= 0 || chi2 <= crit, "GPU chi-square %.1f exceeds %.1f", chi2, crit);
    ops_free(&gpu, d_z), ops_free(&gpu, d_p), ops_free(&gpu, d_t), ops_free(&gpu, d_l);
    free(z), free(y), free(prob), free(idx), free(rows), free(prm), free(tok), free(count);
}

static void test_sample(void) {
    compare_sample("greedy", 256, 151936, 0.0f, 0, 1.0f);
    compare_sample("full", 2048, 1000, 1.0f, 0, 1.0f);
    compare_sample("top-k", 2048, 1000, 0.8f, 40, 1.0f);
    compare_sample("top-p", 2048, 1000, 1.2f, 0, 0.9f);
    compare_sample("both", 512, 151936, 1.0f, 100, 0.95f);
    /* A vocabulary over 4096 without truncation takes the sliced path,
     * launched programmatically at up to 8 rows (the decode of a small
     * batch) and the ordinary way past them. */
    compare_sample("full", 256, 151936, 1.0f, 0, 1.0f);
    compare_sample("full", 5, 151936, 0.7f, 0, 1.0f);
    compare_sample("greedy", 3, 151936, 0.0f, 0, 1.0f);
    compare_sample("full", 64, 5000, 0.6f, 0, 1.0f);
    compare_sample("mixed", 128, 151936, 0.9f, -50, 1.0f);
    compare_sample("top-p", 256, 151936, 0.7f, 0, 0.8f);
    gpu_chi2(64, 1.0f, 0, 1.0f, 40000);
    gpu_chi2(64, 0.7f, 10, 0.9f, 40000);
    gpu_chi2(151936, 0.25f, 30, 0.9f, 10000);
    gpu_chi2(20000, 0.2f, 0, 1.0f, 20000);
}

/* A decode step (4 sequences, one query each of 8 heads on 2 KV heads,
 * 16 cached tokens of D = 128) whose pinned kernel choice is out of range,
 * run in a child that aborts before any launch. */
typedef struct {
    void *q, *out, *kc, *vc;
    int32_t *bt, *lens, *cu;
    int *field; /* the gpu.tuning field the child sets to value before the call */
    int value;
} paged_call;

static void bad_tuning_call(void *arg) {
    paged_call *c = arg;
    *c->field = c->value;
    ops_paged_attention(&gpu, c->out, c->q, c->kc, c->vc, c->bt, 1, c->lens, c->cu, 4, 4, 8, 2, 128, 16,
                        0.0883883f, NULL);
}

static void test_tuning_errors(void) {
    const int32_t bt[4] = {0, 1, 2, 3}, lens[4] = {16, 16, 16, 16}, cu[5] = {0, 1, 2, 3, 4};
    const size_t qo = (size_t)4 * 8 * 128 * 2, kv = (size_t)4 * 16 * 2 * 128 * 2;
    paged_call c = {ops_alloc(&gpu, qo), ops_alloc(&gpu, qo), ops_alloc(&gpu, kv), ops_alloc(&gpu, kv),
                    gpu_copy(bt, sizeof bt), gpu_copy(lens, sizeof lens), gpu_copy(cu, sizeof cu), NULL, 0};
    const struct {
        const char *name;
        int *field, value;
    } bad[] = {{"paged_kernel", &gpu.tuning.paged_kernel, 4},
               {"decode_warps", &gpu.tuning.decode_warps, 6},
               {"decode_prefetch", &gpu.tuning.decode_prefetch, 3},
               {"decode_merge", &gpu.tuning.decode_merge, 3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char what[64], field[64];
        snprintf(what, sizeof what, "%s %d", bad[i].name, bad[i].value);
        snprintf(field, sizeof field, "ops_tuning.%s", bad[i].name);
        c.field = bad[i].field, c.value = bad[i].value;
        CHECK(expect_abort(what, bad_tuning_call, &c, field),
              "a decode step with %s = %d must abort naming the field", bad[i].name, bad[i].value);
    }
    void *bufs[] = {c.q, c.out, c.kc, c.vc, c.bt, c.lens, c.cu};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_free(&gpu, bufs[i]);
}

int main(void) {
    if (device_count() == 0 || !ops_cuda_available()) {
        printf("test_gen_cuda_ops: no CUDA GPU or no CUDA op table in this build, skipped\n");
        return 77;
    }
    if (ops_ctx_init(&cpu, DK_DEVICE_CPU, 0, 0) || ops_ctx_init(&gpu, DK_DEVICE_CUDA, 0, (size_t)256 << 20)) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    test_paged();
    test_grouped();
    test_qkv_to_cache();
    test_sample();
    test_tuning_errors();
    ops_ctx_free(&gpu);
    ops_ctx_free(&cpu);
    return test_finish("test_gen_cuda_ops");
}
