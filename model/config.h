/* config.h: the transformer's shape. One struct covers the Qwen3 family (the
 * Dr. Kernel bases) and, through flags, Qwen2/2.5 (qkv bias, no q/k norm) and
 * Llama-style models. Filled from a Hugging Face config.json (hf_config.c) or
 * from the [model] section of a run config. */
#ifndef DK_MODEL_CONFIG_H
#define DK_MODEL_CONFIG_H

#include <stddef.h>

#include "common/error.h"

typedef enum { DK_ARCH_QWEN3 = 0, DK_ARCH_QWEN2 = 1, DK_ARCH_LLAMA = 2 } dk_arch;
enum { DK_N_ARCH = DK_ARCH_LLAMA + 1 };
/* The families' names (config.json's model_type), indexed by dk_arch: read by
 * model_arch_name, model_arch_parse and the run config's model.arch key. */
extern const char *const model_arch_names[DK_N_ARCH];

typedef struct model_config {
    dk_arch arch;
    int vocab_size;
    int hidden_size;         /* C */
    int intermediate_size;   /* I */
    int n_layers;
    int n_heads;             /* Hq */
    int n_kv_heads;          /* Hkv */
    int head_dim;            /* D (Qwen3 sets it explicitly; else hidden / heads) */
    int max_position;        /* max_position_embeddings */
    float rope_theta;
    float rms_eps;
    int tie_embeddings;      /* lm head shares the embedding table */
    int qkv_bias;            /* Qwen2: q/k/v projections carry a bias */
    int o_bias;              /* attention output bias (some Llama variants) */
    int qk_norm;             /* Qwen3: RMSNorm per head on q and k before RoPE */
    int bos_token_id;        /* -1 when absent */
    int eos_token_id;        /* first of the list when config.json gives several */
} model_config;

const char *model_arch_name(dk_arch a);
dk_status model_arch_parse(const char *s, dk_arch *out);
/* Checks the shape is consistent (divisibility, positivity); names the field. */
dk_status model_config_validate(const model_config *c);
/* Reads DIR/config.json; the error names the file and the field. */
dk_status model_config_from_hf(const char *dir, model_config *out);
/* Writes a config.json that transformers loads (architectures, model_type,
 * torch_dtype = dtype). */
dk_status model_config_to_hf(const model_config *c, const char *path, const char *dtype);
size_t model_config_n_params(const model_config *c);

#endif
