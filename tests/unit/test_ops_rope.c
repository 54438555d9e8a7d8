/* test_ops_rope.c: rotary embedding on the CPU backend.
 * - forward against transformers' Qwen3RotaryEmbedding + apply_rotary_pos_emb
 *   (tests/fixtures/ops/rope.txt): packed sequences whose positions restart at
 *   0, Qwen3's theta = 1e6 with head dim 128 at positions up to 32767, and
 *   Llama's theta with an odd head count;
 * - backward against finite differences of L = sum(r * rope(x));
 * - backward(forward(x)) = x, and position 0 is the identity, exactly.
 *
 * Tolerances. Forward vs HF: both form the angle as one fp32 product
 * pos * inv_freq and evaluate cos/sin to within an ulp, so below position
 * 4096 the outputs agree to a few fp32 roundings of O(1) values: 1e-6
 * absolute. inv_freq itself is where the two may differ: the op rounds
 * theta^(2i/D) correctly, while torch's vectorised fp32 pow can be one ulp
 * off (it is for i = 37 at theta = 1e6, D = 128), which at position 32767
 * turns the angle by ~1e-6 rad; beyond 4096 the bound is therefore 1e-5.
 * Finite differences: RoPE is linear, so central differences have no
 * truncation error and only fp32 rounding noise (~1e-5 at h = 1e-2) remains:
 * 1e-3 relative. Round trip: a rotation by +a then -a in fp32, 1e-6. */
#include "tests/unit/test_ops_common.h"

#define TOL_FWD 1e-6
#define TOL_FWD_FAR 1e-5 /* positions >= 4096 */
#define TOL_FD 1e-3
#define TOL_ROUNDTRIP 1e-6

typedef struct {
    ops_ctx *ctx;
    float *x, *r, *tmp;
    const int32_t *pos;
    int T, H, D;
    float theta;
} rope_case;

static double rope_loss(void *p) {
    rope_case *c = p;
    size_t n = (size_t)c->T * c->H * c->D;
    memcpy(c->tmp, c->x, n * sizeof(float));
    ops_rope_forward(c->ctx, c->tmp, c->pos, c->T, c->H, c->D, c->theta);
    return dot_f64(c->r, c->tmp, n);
}

int main(void) {
    ops_ctx ctx;
    if (ops_ctx_init(&ctx, DK_DEVICE_CPU, 0, 0) != DK_OK) {
        fprintf(stderr, "ops_ctx_init: %s\n", dk_error());
        return 1;
    }

    fixture fx = fx_load("rope");
    for (int k = 0; k < 3; k++) {
        char key[64];
#define KEY(s) (snprintf(key, sizeof key, "rope%d.%s", k, s), key)
        const float *d = fx_get(&fx, KEY("dims"), 4);
        int T = (int)d[0], H = (int)d[1], D = (int)d[2];
        float theta = d[3];
        size_t n = (size_t)T * H * D;
        int32_t *pos = fx_ints(&fx, KEY("pos"), T);
        float *x = fx_copy(&fx, KEY("x"), n);
        const float *want = fx_get(&fx, KEY("out"), n);
        ops_rope_forward(&ctx, x, pos, T, H, D, theta);
        double near = 0.0, far = 0.0;
        for (int t = 0; t < T; t++) {
            double e = max_abs_diff(x + (size_t)t * H * D, want + (size_t)t * H * D, (size_t)H * D);
            if (pos[t] < 4096) near = fmax(near, e);
            else far = fmax(far, e);
        }
        printf("rope vs transformers T=%d H=%d D=%d theta=%g: max abs diff %.3g (pos < 4096), %.3g (pos >= 4096)\n",
               T, H, D, theta, near, far);
        CHECK(near < TOL_FWD && far < TOL_FWD_FAR, "rope fixture %d: max abs diff %.3g near, %.3g far", k, near, far);

        /* position 0 is the identity; the backward undoes the forward */
        const float *x0 = fx_get(&fx, KEY("x"), n);
        int exact0 = 1;
        for (int t = 0; t < T; t++)
            if (pos[t] == 0) exact0 &= memcmp(x + (size_t)t * H * D, x0 + (size_t)t * H * D, H * D * 4) == 0;
        CHECK(exact0, "rope fixture %d: position 0 must leave x unchanged", k);
        ops_rope_backward(&ctx, x, pos, T, H, D, theta);
        double rt = max_abs_diff(x, x0, n);
        printf("rope round trip: max abs diff %.3g\n", rt);
        CHECK(rt < TOL_ROUNDTRIP, "rope fixture %d: backward(forward(x)) differs from x by %.3g", k, rt);
        free(pos), free(x);
#undef KEY
    }
    fx_free(&fx);

    /* finite differences: dL/dx = rope_backward(r) */
    rng_seed(3);
    const int shapes[][3] = {{5, 3, 8}, {4, 2, 130}, {3, 1, 2}};
    const int32_t pos_all[] = {0, 1, 2, 100, 7};
    for (int s = 0; s < 3; s++) {
        int T = shapes[s][0], H = shapes[s][1], D = shapes[s][2];
        size_t n = (size_t)T * H * D;
        rope_case c = {&ctx, rand_normal(n, 1.0f, 0.0f), rand_normal(n, 1.0f, 0.0f), dk_malloc(n * 4), pos_all,
                       T, H, D, 10000.0f};
        float *g = dk_malloc(n * 4);
        memcpy(g, c.r, n * 4);
        ops_rope_backward(&ctx, g, pos_all, T, H, D, c.theta);
        double e = fd_check(c.x, n, g, rope_loss, &c, 1e-2f);
        printf("rope FD T=%d H=%d D=%d: rel err %.3g\n", T, H, D, e);
        CHECK(e < TOL_FD, "rope FD T=%d H=%d D=%d: rel err %.3g", T, H, D, e);
        free(c.x), free(c.r), free(c.tmp), free(g);
    }

    ops_ctx_free(&ctx);
    return test_finish("test_ops_rope");
}
