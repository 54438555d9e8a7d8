/* gen_cuda_common.h: what the CUDA engine tests (test_gen_cuda_engine.c,
 * test_gen_cuda_prefix.c) share: the tiny Qwen3 shape and the "peaked"
 * weights whose greedy tokens survive bf16 rounding. Header-only (static
 * functions) because every test_*.c is its own program; include it after
 * ../unit/test_ops_common.h. */
#ifndef DK_TEST_GEN_CUDA_COMMON_H
#define DK_TEST_GEN_CUDA_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "kernels/ops.h"
#include "model/model.h"

static model_config tiny(int head_dim) {
    model_config c = {
        .arch = DK_ARCH_QWEN3, .vocab_size = 1000, .hidden_size = 128, .intermediate_size = 256, .n_layers = 2,
        .n_heads = 4, .n_kv_heads = 2, .head_dim = head_dim, .max_position = 1024, .rope_theta = 10000.0f,
        .rms_eps = 1e-6f, .tie_embeddings = 0, .qk_norm = 1, .bos_token_id = -1, .eos_token_id = -1,
    };
    return c;
}

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "FAIL %s: %s\n", what, dk_error());
        exit(1);
    }
}

/* Random layers of std 0.05, embeddings of std 1, lm head row v = the
 * embedding of token (v * 7 + 3) mod V. */
static void init_peaked(model *m) {
    model_init_random(m, 3, 0.05f);
    const int V = m->cfg.vocab_size, C = m->cfg.hidden_size;
    rng_seed(17);
    float *e = rand_normal((size_t)V * C, 1.0f, 0.0f), *w = dk_malloc((size_t)V * C * sizeof(float));
    for (int v = 0; v < V; v++) memcpy(w + (size_t)v * C, e + (size_t)((v * 7 + 3) % V) * C, (size_t)C * sizeof(float));
    ops_upload_act(m->ctx, m->params.embed, e, (size_t)V * C);
    ops_upload_act(m->ctx, m->params.lm_head, w, (size_t)V * C);
    ops_sync(m->ctx);
    free(e), free(w);
}

#endif
