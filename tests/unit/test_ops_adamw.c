/* test_ops_adamw.c: ops_adamw on the CPU backend against torch.optim.AdamW
 * (foreach=False) over six steps (tests/fixtures/ops/adamw.txt): gradients of
 * changing size (0.1x, 1x, 10x), a step with zero gradients, elements whose
 * gradients are ~1e-8 (where sqrt(v) ~ eps, so eps's placement shows), weight
 * decay, and grad_scale = 0.37 (torch is given the already scaled gradient).
 * Run twice:
 * with master == param (the CPU layout) and with a separate act param buffer,
 * which must equal the master after every step.
 *
 * Tolerance: the parameters are compared after every step in units of the
 * learning rate, |p - p_torch| / lr < 1e-4. Both sides do the same fp32
 * element arithmetic with step scalars formed in double, so they agree to a
 * few ulps of p (~1e-7 / 1e-2 = 1e-5 in these units); a wrong bias
 * correction, decay or epsilon placement moves a step by >= 1e-2 of lr. The
 * moments m and v are compared to 1e-6 relative. */
#include "tests/unit/test_ops_common.h"

#define TOL_STEP 1e-4
#define TOL_MOMENT 1e-6

static void run(const fixture *fx, int separate_param) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) DK_ABORT("ops_ctx_init: %s", dk_error());
    const float *d = fx_get(fx, "dims", 8);
    int n = (int)d[0], steps = (int)d[1];
    float lr = d[2], b1 = d[3], b2 = d[4], eps = d[5], wd = d[6], gs = d[7];
    float *master = fx_copy(fx, "p0", n), *m = dk_calloc(n, 4), *v = dk_calloc(n, 4);
    float *param = separate_param ? rand_normal(n, 1e3f, 0.0f) : master;
    double worst = 0.0;
    for (int s = 0; s < steps; s++) {
        char key[32];
        snprintf(key, sizeof key, "grad%d", s);
        const float *g = fx_get(fx, key, n);
        ops_adamw(&ctx, param, master, g, m, v, n, lr, b1, b2, eps, wd, s + 1, gs);
        snprintf(key, sizeof key, "p%d", s + 1);
        double e = max_abs_diff(master, fx_get(fx, key, n), n) / lr;
        CHECK(e < TOL_STEP, "adamw step %d (separate param %d): |p - torch| / lr = %.3g", s + 1, separate_param, e);
        if (separate_param)
            CHECK(max_abs_diff(param, master, n) == 0.0, "adamw step %d: param differs from master", s + 1);
        if (e > worst) worst = e;
    }
    double em = rel_err(m, fx_get(fx, "m", n), n), ev = rel_err(v, fx_get(fx, "v", n), n);
    printf("adamw vs torch, %d steps, n=%d, separate param %d: max |p - torch| / lr %.3g, m %.3g, v %.3g\n", steps,
           n, separate_param, worst, em, ev);
    CHECK(em < TOL_MOMENT && ev < TOL_MOMENT, "adamw moments: m %.3g v %.3g", em, ev);
    if (separate_param) free(param);
    free(master), free(m), free(v);
    ops_ctx_free(&ctx);
}

int main(void) {
    fixture fx = fx_load("adamw");
    rng_seed(1);
    run(&fx, 0);
    run(&fx, 1);
    fx_free(&fx);
    return test_finish("test_ops_adamw");
}
