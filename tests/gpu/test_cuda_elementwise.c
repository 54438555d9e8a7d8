/* test_cuda_elementwise.c: the CUDA backend's memory and whole-buffer ops
 * against the CPU backend and against exact host arithmetic:
 * - ops_upload_act / ops_download_act round fp32 to the nearest bf16 (ties
 *   to even), at any element offset, including halfway cases, signed zeros,
 *   infinities, subnormals and NaN; exact comparison;
 * - ops_cast_f32_to_act / ops_cast_act_to_f32 on the device give the same
 *   bits as the host rounding; exact;
 * - ops_add (bf16 y += x): the fp32 sum of two bf16 values rounded once,
 *   exactly what the host computes; exact;
 * - ops_sumsq: against a long-double sum; fp64 accumulation in a different
 *   order differs by a few units of 2^-52 per term, so 1e-12 relative;
 *   two calls give the same bits (deterministic reduction);
 * every op at lengths 0, 1, 7, 8, 9, 1000003 and with 16-byte aligned and
 * unaligned pointers (the vector and the scalar paths). */
#include "tests/gpu/test_cuda_common.h"

static const size_t sizes[] = {0, 1, 7, 8, 9, 4096, 1000003};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void check_casts(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    /* Special values first, then randoms over a wide exponent range. */
    const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 65504.0f,
                              3.0e38f, 1.00390625f /* halfway, even below */, 1.01171875f /* halfway, odd below */,
                              1.0039063f, 3.3895314e38f};
    const size_t ns = sizeof specials / sizeof specials[0];
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = sizes[si];
        for (int shift = 0; shift < 2; shift++) {
            float *x = rand_normal(n, 1.0f, 0.0f);
            for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(rng_next() % 40) - 20);
            for (size_t i = 0; i < n && i < ns; i++) x[i] = specials[i];
            float *want = copy_f32(x, n);
            round_bf16(want, n);

            /* host -> act -> host */
            dev_buf a = dev_act(g, x, n, shift);
            float *back = get_act(g, a.p, n);
            int nan_ok = 1;
            for (size_t i = 0; i < n; i++)
                if (isnan(want[i]) != isnan(back[i])) nan_ok = 0;
            for (size_t i = 0; i < n; i++)
                if (isnan(want[i])) back[i] = want[i] = 0.0f;
            CHECK(nan_ok && bits_equal(back, want, n), "upload/download act n=%zu shift=%d", n, shift);

            /* device casts: fp32 -> act and act -> fp32 */
            dev_buf f = dev_f32(g, x, n, shift);
            dev_buf a2 = dev_act(g, NULL, n, shift);
            ops_cast_f32_to_act(g, a2.p, f.p, n);
            float *c1 = get_act(g, a2.p, n);
            dev_buf f2 = dev_f32(g, NULL, n, shift);
            ops_cast_act_to_f32(g, f2.p, a2.p, n);
            float *c2 = get_f32(g, f2.p, n);
            int ok = 1;
            for (size_t i = 0; i < n; i++) {
                if (isnan(x[i])) {
                    ok &= isnan(c1[i]) && isnan(c2[i]);
                    c1[i] = c2[i] = want[i];
                }
            }
            CHECK(ok && bits_equal(c1, want, n) && bits_equal(c2, want, n), "device casts n=%zu shift=%d", n,
                  shift);
            dev_free(g, &a), dev_free(g, &f), dev_free(g, &a2), dev_free(g, &f2);
            free(x), free(want), free(back), free(c1), free(c2);
        }
    }
    printf("casts and act transfers: exact at %zu lengths, aligned and unaligned\n", NSIZES);
}

static void check_add(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = sizes[si];
        for (int shift = 0; shift < 2; shift++) {
            float *y = rand_bf16(n, 2.0f, 0.5f), *x = rand_bf16(n, 1.0f, 0.0f);
            dev_buf dy = dev_act(g, y, n, shift), dx = dev_act(g, x, n, shift);
            ops_add(g, dy.p, dx.p, n);
            float *got = get_act(g, dy.p, n);
            for (size_t i = 0; i < n; i++) y[i] = bf16_round(y[i] + x[i]);
            CHECK(bits_equal(got, y, n), "add n=%zu shift=%d: max diff %.3g", n, shift, max_abs_diff(got, y, n));
            dev_free(g, &dy), dev_free(g, &dx);
            free(y), free(x), free(got);
        }
    }
    printf("add: exact\n");
}

static void check_sumsq(ctx_pair *p) {
    ops_ctx *g = &p->gpu;
    double worst = 0.0;
    const size_t big[] = {0, 1, 3, 5, 1000, 1000003, 50000017};
    for (size_t si = 0; si < sizeof big / sizeof big[0]; si++) {
        size_t n = big[si];
        for (int shift = 0; shift < 4; shift++) {
            if (n > 2000000 && shift) continue;
            /* Mixed magnitudes, as gradients are. */
            float *x = rand_normal(n, 1.0f, 0.0f);
            for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(rng_next() % 24) - 12);
            long double ref = 0.0L;
            for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
            dev_buf d = dev_f32(g, x, n, shift);
            double s1 = ops_sumsq(g, d.p, n), s2 = ops_sumsq(g, d.p, n);
            double e = ref > 0 ? fabs((double)(s1 - ref)) / (double)ref : fabs(s1);
            if (e > worst) worst = e;
            CHECK(e <= 1e-12, "sumsq n=%zu shift=%d: %.17g vs %.17Lg (rel %.3g)", n, shift, s1, ref, e);
            CHECK(memcmp(&s1, &s2, sizeof s1) == 0, "sumsq n=%zu: two calls differ (%.17g, %.17g)", n, s1, s2);
            dev_free(g, &d);
            free(x);
        }
    }
    printf("sumsq: worst relative error %.3g against long double (tolerance 1e-12), repeat bit-identical\n", worst);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(11);
    check_casts(&p);
    check_add(&p);
    check_sumsq(&p);
    pair_free(&p);
    return test_finish("test_cuda_elementwise");
}
