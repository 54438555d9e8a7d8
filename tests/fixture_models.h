/* fixture_models.h: the configs of the tiny models that
 * tests/make_safetensors_fixtures.py writes (vocab 64, hidden 16,
 * intermediate 32, 2 layers, 4 heads, 2 kv heads; per architecture the
 * head_dim, norms, biases and tying of its fixture), for the C tests that
 * read those fixtures or write models of the same shapes. bos / eos are -1;
 * a test that needs them sets them. */
#ifndef DK_TESTS_FIXTURE_MODELS_H
#define DK_TESTS_FIXTURE_MODELS_H

#include <string.h>

#include "model/config.h"

static inline model_config fixture_model_config(dk_arch arch) {
    model_config c;
    memset(&c, 0, sizeof c);
    c.arch = arch;
    c.vocab_size = 64;
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = arch == DK_ARCH_QWEN3 ? 8 : 4;
    c.max_position = 128;
    c.rope_theta = 10000.0f;
    c.rms_eps = 1e-6f;
    c.qk_norm = arch == DK_ARCH_QWEN3;
    c.qkv_bias = arch != DK_ARCH_QWEN3;
    c.o_bias = arch == DK_ARCH_LLAMA;
    c.tie_embeddings = arch == DK_ARCH_QWEN2;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

#endif
