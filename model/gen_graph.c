/* gen_graph.c: the decode-step graph cache of gen_graph.h: up to
 * GEN_GRAPH_SLOTS shapes, the least recently launched one replaced. */
#include "model/gen_graph.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"

static int same_step(const gen_step *a, const gen_step *b) {
    return a->T == b->T && a->n_seqs == b->n_seqs && a->n_rows == b->n_rows && a->max_pages == b->max_pages &&
           a->fresh == b->fresh && a->gather == b->gather && a->sample == b->sample && a->tokens == b->tokens &&
           a->pos == b->pos && a->slots == b->slots && a->cu_q == b->cu_q && a->ctx_lens == b->ctx_lens &&
           a->block_table == b->block_table && a->rows == b->rows && a->qkv_rows == b->qkv_rows &&
           a->params == b->params && a->out_tokens == b->out_tokens && a->out_logprobs == b->out_logprobs &&
           !memcmp(&a->groups, &b->groups, sizeof a->groups);
}

typedef struct {
    gen_forward *f;
    const gen_step *st;
} capture_args;

static void capture_body(void *user) {
    capture_args *a = user;
    gen_forward_run(a->f, a->st);
}

gen_graph_result gen_graphs_run(gen_graphs *gg, gen_forward *f, const gen_step *st) {
    if (gg->disabled) return GEN_GRAPH_NONE;
    ops_ctx *ctx = f->m->ctx;
    gg->tick++;
    gen_graph_slot *victim = &gg->slot[0];
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        gen_graph_slot *s = &gg->slot[i];
        if (s->g && same_step(&s->key, st)) {
            s->used = gg->tick;
            ops_graph_launch(ctx, s->g);
            return GEN_GRAPH_REPLAYED;
        }
        if (!s->g || (victim->g && s->used < victim->used)) victim = s;
    }
    /* The engine may have a step queued ahead, perhaps the victim's graph:
     * the capture starts on an idle stream and nothing replaced still runs. */
    ops_sync(ctx);
    capture_args a = {f, st};
    ops_graph *g = ops_graph_capture(ctx, capture_body, &a);
    if (!g) {
        fprintf(stderr, "generation: decode steps run without graphs: %s\n", dk_error());
        gg->disabled = 1;
        return GEN_GRAPH_NONE;
    }
    if (victim->g) ops_graph_free(ctx, victim->g);
    victim->key = *st;
    victim->g = g;
    victim->used = gg->tick;
    ops_graph_launch(ctx, g);
    return GEN_GRAPH_CAPTURED;
}

void gen_graphs_free(gen_graphs *gg, ops_ctx *ctx) {
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        if (gg->slot[i].g) ops_graph_free(ctx, gg->slot[i].g);
        gg->slot[i].g = NULL;
    }
}
