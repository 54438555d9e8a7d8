/* params.h: the parameter layout. Memory is planned, not discovered: the
 * model's parameters live in a few flat buffers whose layout is computed from
 * the config up front (docs/DESIGN.md §12). Each decoder layer is ONE flat buffer
 * (the unit ZeRO-3 shards and gathers); the embedding table, the final norm
 * and the (untied) lm head are the other units. Per-tensor pointers are views
 * at fixed element offsets into these buffers. The same layout indexes the
 * parameters, their fp32 gradients, the fp32 masters and the AdamW moments.
 *
 * Order of one layer's buffer (element offsets; absent tensors have size 0):
 *   attn_norm[C], wq[Hq*D, C], wk[Hkv*D, C], wv[Hkv*D, C],
 *   bq[Hq*D], bk[Hkv*D], bv[Hkv*D]          (qkv_bias)
 *   q_norm[D], k_norm[D]                    (qk_norm)
 *   wo[C, Hq*D], bo[C]                      (o_bias)
 *   mlp_norm[C], w_gate_up[2I, C] (gate rows first, then up rows), w_down[C, I]
 * Weights are [out, in] as in PyTorch's nn.Linear, so y = x W^T. */
#ifndef DK_MODEL_PARAMS_H
#define DK_MODEL_PARAMS_H

#include <stddef.h>

#include "model/config.h"

typedef enum {
    P_ATTN_NORM = 0, P_WQ, P_WK, P_WV, P_BQ, P_BK, P_BV, P_Q_NORM, P_K_NORM,
    P_WO, P_BO, P_MLP_NORM, P_W_GATE_UP, P_W_DOWN,
    P_LAYER_COUNT
} dk_layer_tensor;

typedef struct {
    size_t off[P_LAYER_COUNT];  /* element offset inside the layer buffer */
    size_t size[P_LAYER_COUNT]; /* element count (0 = absent) */
    int rows[P_LAYER_COUNT];    /* 2-D shape as stored ([out, in]); vectors have rows = 1 */
    int cols[P_LAYER_COUNT];
    size_t layer_size;          /* elements in one layer buffer */
    size_t embed_size;          /* V * C */
    size_t final_norm_size;     /* C */
    size_t lm_head_size;        /* V * C, or 0 when tied */
} param_layout;

void param_layout_init(param_layout *pl, const model_config *c);
const char *param_layer_tensor_name(dk_layer_tensor t); /* our short name, e.g. "wq" */

/* The model's parameter storage: one set of flat buffers. `model_params`
 * holds act-typed buffers (weights) or fp32 buffers (gradients, masters,
 * moments) depending on what it is used for; elem_size says which. */
typedef struct {
    void *embed;
    void **layers;  /* n_layers buffers of layer_size elements */
    void *final_norm;
    void *lm_head;  /* NULL when tied */
    int n_layers;
    size_t elem_size;
} param_buffers;

/* Pointer to tensor t of layer l inside a buffer set. */
static inline void *param_layer_ptr(const param_buffers *b, const param_layout *pl, int l, dk_layer_tensor t) {
    return (char *)b->layers[l] + pl->off[t] * b->elem_size;
}

#endif
