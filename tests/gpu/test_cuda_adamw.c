/* test_cuda_adamw.c: the AdamW step on the CUDA backend against the CPU
 * backend over three consecutive steps (bias correction changes with t),
 * with weight decay and a grad_scale, at lengths that reach the float4 path
 * and its scalar tail (n % 4 != 0) and with unaligned buffers (scalar path).
 *
 * Both backends evaluate the same fp32 expression in the same order from the
 * same step scalars (formed in double), and the CUDA kernel uses
 * round-to-nearest intrinsics so nothing is fused into a multiply-add: the
 * masters and moments are expected bit-identical to the CPU's on an x86-64
 * host (gcc does not contract there without -march flags). The check allows
 * 2 fp32 ulps (4e-7 relative, 1e-30 absolute) so a host compiler that does
 * fuse cannot fail it, and reports how many elements matched exactly. The
 * bf16 parameters must be exactly the nearest bf16 of the new masters. */
#include "tests/gpu/test_cuda_common.h"

static void run_case(ctx_pair *p, size_t n, int shift) {
    ops_ctx *g = &p->gpu;
    float *master = rand_normal(n, 1.0f, 0.0f), *m = dk_calloc(n ? n : 1, sizeof(float));
    float *v = dk_calloc(n ? n : 1, sizeof(float));
    dev_buf dp = dev_act(g, master, n, shift), dm = dev_f32(g, master, n, shift);
    dev_buf dmo = dev_f32(g, m, n, shift), dv = dev_f32(g, v, n, shift), dg = dev_f32(g, NULL, n, shift);
    float *cpu_param = dk_malloc((n ? n : 1) * sizeof(float));
    double worst = 0.0;
    size_t exact = 0, total = 0;
    for (int t = 1; t <= 3; t++) {
        float *grad = rand_normal(n, 0.01f, 0.0f);
        ops_upload(g, dg.p, grad, n * sizeof(float));
        const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
        ops_adamw(g, dp.p, dm.p, dg.p, dmo.p, dv.p, n, lr, b1, b2, eps, wd, t, gs);
        ops_adamw(&p->cpu, cpu_param, master, grad, m, v, n, lr, b1, b2, eps, wd, t, gs);
        float *gm = get_f32(g, dm.p, n), *gmo = get_f32(g, dmo.p, n), *gv = get_f32(g, dv.p, n);
        float *gp = get_act(g, dp.p, n);
        double r = fmax(tol_ratio(gm, master, n, 1e-30, 4e-7),
                        fmax(tol_ratio(gmo, m, n, 1e-30, 4e-7), tol_ratio(gv, v, n, 1e-30, 4e-7)));
        worst = fmax(worst, r);
        for (size_t i = 0; i < n; i++) {
            exact += gm[i] == master[i] && gmo[i] == m[i] && gv[i] == v[i];
            total++;
        }
        int param_ok = 1;
        for (size_t i = 0; i < n; i++)
            if (gp[i] != bf16_round(gm[i])) param_ok = 0;
        CHECK(r <= 1.0, "adamw n=%zu shift=%d t=%d: tolerance ratio %.3g", n, shift, t, r);
        CHECK(param_ok, "adamw n=%zu shift=%d t=%d: bf16 params are not the rounded masters", n, shift, t);
        free(grad), free(gm), free(gmo), free(gv), free(gp);
    }
    printf("adamw n=%zu shift=%d: worst tolerance ratio %.3g, %zu of %zu elements bit-identical to the CPU\n", n,
           shift, worst, exact, total);
    dev_free(g, &dp), dev_free(g, &dm), dev_free(g, &dmo), dev_free(g, &dv), dev_free(g, &dg);
    free(master), free(m), free(v), free(cpu_param);
}

int main(void) {
    ctx_pair p;
    pair_init(&p, 0);
    rng_seed(13);
    const size_t sizes[] = {1, 3, 4, 17, 1000003, 4194304};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int shift = 0; shift < 2; shift++) run_case(&p, sizes[s], shift);
    pair_free(&p);
    return test_finish("test_cuda_adamw");
}
