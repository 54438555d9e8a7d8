/* gen_graph.h: decode steps of the generation engine replayed from captured
 * graphs (ops_graph). A decode step at a small batch is hundreds of small
 * kernels whose launches cost as much as their work; the first step of a
 * shape is captured, later steps of the same shape replay it with one
 * launch. A step's shape is everything its kernels are launched with: the
 * counts of gen_step and every pointer in it. Per-step values (tokens,
 * positions, block tables, sampling counters) live in device buffers the
 * engine uploads before the launch, so a replay computes the new step. The
 * engine rounds block-table widths up to GEN_GRAPH_PAGE_BUCKET pages so
 * that a growing context changes the shape only every so many tokens. */
#ifndef DK_GEN_GRAPH_H
#define DK_GEN_GRAPH_H

#include <stdint.h>

#include "kernels/ops.h"
#include "model/gen_forward.h"

#define GEN_GRAPH_SLOTS 16
#define GEN_GRAPH_PAGE_BUCKET 16

typedef struct gen_graph_slot {
    gen_step key;       /* the step it was captured for */
    ops_graph *g;
    uint64_t used;      /* tick of its last launch, for eviction */
} gen_graph_slot;

typedef struct gen_graphs {
    gen_graph_slot slot[GEN_GRAPH_SLOTS];
    uint64_t tick;
    int disabled;       /* a capture failed: every step runs directly */
} gen_graphs;

typedef enum {
    GEN_GRAPH_NONE = 0,  /* nothing ran: the caller runs gen_forward_run */
    GEN_GRAPH_REPLAYED,  /* a graph of this shape was launched */
    GEN_GRAPH_CAPTURED,  /* the shape was new: captured, then launched */
} gen_graph_result;

/* Runs the step through a graph (captured now when its shape is new), or
 * nothing when graphs are out of reach (CPU, a failed capture: said once on
 * stderr, and graphs stay off). */
gen_graph_result gen_graphs_run(gen_graphs *gg, gen_forward *f, const gen_step *st);
void gen_graphs_free(gen_graphs *gg, ops_ctx *ctx);

#endif
