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
#include "model/safetensors.h"

/* The units of params.h in their global order: the embedding (0), decoder
 * layer l (1 + l), the final norm (n_layers + 1) and, when untied, the lm
 * head (n_layers + 2). ZeRO-3 shards each one (dist/shard.h). */
int weights_n_units(const model_config *c);
size_t weights_unit_size(const model_config *c, const param_layout *pl, int unit);
float *weights_unit_ptr(const model_config *c, const param_buffers *b, int unit); /* fp32 host buffers */

/* One HF tensor: a contiguous range [offset, offset + numel) of one unit.
 * w_gate_up is two slots (gate_proj rows, then up_proj rows); a tied head has
 * none (the embedding is the head). */
typedef struct {
    char name[96];
    int unit;
    size_t offset, numel;
    int ndim;
    int64_t shape[2];
} weights_slot;

/* At most this many slots for the config. */
int weights_max_slots(const model_config *c);
/* Fills S in HF file order, which is also (unit, offset) order: the slots
 * tile every unit front to back. Returns the count. */
int weights_slots(const model_config *c, const param_layout *pl, weights_slot *s);
/* The slots as safetensors entries (names point into S); data is the slot's
 * range of HOST, or NULL without HOST. Free the result. */
st_entry *weights_entries(const model_config *c, const weights_slot *s, int n, const param_buffers *host);

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

/* Writes DIR/config.json (creating DIR) for weights saved as DT. */
dk_status weights_save_config(const char *dir, const model_config *c, st_dtype dt);

#endif
