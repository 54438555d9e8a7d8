/* weights.h: a model's parameters to and from a Hugging Face checkpoint
 * directory. Maps the HF tensor names (model.layers.{i}.self_attn.q_proj.weight,
 * ...) onto the flat layout of params.h, stacking gate_proj and up_proj into
 * w_gate_up (gate rows first) on the way in and splitting them on the way out,
 * so transformers or vLLM can load what drkernel saves and drkernel can start
 * from any Qwen3 / Qwen2 / Llama checkpoint. */
#ifndef DK_MODEL_WEIGHTS_H
#define DK_MODEL_WEIGHTS_H

#include <stddef.h>

#include "common/error.h"
#include "model/config.h"
#include "model/params.h"

/* Fills HOST (fp32 host buffers, elem_size 4, allocated for this layout) from
 * DIR (model.safetensors or a sharded set with its index). A missing tensor, a
 * wrong shape or an unexpected tensor fails with a message naming the file and
 * the HF tensor name; `*.rotary_emb.inv_freq` buffers are ignored. With tied
 * embeddings the checkpoint may omit lm_head.weight (or carry a copy equal to
 * the embedding); untied needs it. */
dk_status weights_load_hf(const char *dir, const model_config *c, const param_layout *pl, param_buffers *host);

/* Writes HOST under HF names to DIR as DTYPE ("bf16" | "fp16" | "fp32"):
 * model.safetensors, or shards of at most MAX_SHARD_BYTES (0 = one file) plus
 * model.safetensors.index.json, and config.json, so that transformers'
 * from_pretrained(DIR) loads it. Creates DIR when needed. */
dk_status weights_save_hf(const char *dir, const model_config *c, const param_layout *pl, const param_buffers *host,
                          const char *dtype, size_t max_shard_bytes);

#endif
