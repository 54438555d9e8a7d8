/* bench_shapes.h: the Qwen3 shapes the generation benchmarks run
 * (bench_generate, bench_generate_recipe), as in the models' config.json;
 * weights are random (bench_weights.h). Header-only: each benchmark is one
 * program. */
#ifndef DK_BENCH_SHAPES_H
#define DK_BENCH_SHAPES_H

#include <string.h>

#include "model/config.h"

#define BENCH_QWEN3(hidden, inter, layers, heads, tied)                                                          \
    {                                                                                                            \
        .arch = DK_ARCH_QWEN3, .vocab_size = 151936, .hidden_size = hidden, .intermediate_size = inter,         \
        .n_layers = layers, .n_heads = heads, .n_kv_heads = 8, .head_dim = 128, .max_position = 40960,          \
        .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tie_embeddings = tied, .qk_norm = 1, .bos_token_id = -1,   \
        .eos_token_id = -1,                                                                                      \
    }

static const model_config qwen3_1_7b = BENCH_QWEN3(2048, 6144, 28, 16, 1);
static const model_config qwen3_8b = BENCH_QWEN3(4096, 12288, 36, 32, 0);
static const model_config qwen3_14b = BENCH_QWEN3(5120, 17408, 40, 40, 0);

#undef BENCH_QWEN3

/* The shape a command line names: "1.7b", "8b" or "14b"; NULL otherwise. */
static inline const model_config *bench_shape_named(const char *name) {
    return !strcmp(name, "1.7b") ? &qwen3_1_7b : !strcmp(name, "8b") ? &qwen3_8b : !strcmp(name, "14b") ? &qwen3_14b
                                                                                                      : NULL;
}

#endif
