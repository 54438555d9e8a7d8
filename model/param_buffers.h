/* param_buffers.h: host-side storage for a param_buffers set (params.h) and
 * the random initialisation used when a run starts from scratch instead of
 * from a checkpoint. */
#ifndef DK_MODEL_PARAM_BUFFERS_H
#define DK_MODEL_PARAM_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "model/params.h"

/* Allocates zeroed host buffers: the embedding, N_LAYERS layer buffers, the
 * final norm and, unless TIED, the lm head; ELEM_SIZE bytes per element.
 * Aborts when the host is out of memory. */
void param_buffers_alloc_host(param_buffers *b, const param_layout *pl, int n_layers, int tied, size_t elem_size);
void param_buffers_free_host(param_buffers *b);

/* Fills fp32 host buffers: every weight matrix (embedding, projections, lm
 * head) with normal(0, STD) values, norms with 1, biases with 0. Each value
 * depends only on (seed, tensor, element index), so the result does not
 * depend on how the buffers are later sharded or on the order of the calls. */
void param_init_random(param_buffers *b, const param_layout *pl, const model_config *c, uint64_t seed, float std);

#endif
