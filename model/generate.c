/* generate.c: the generation engine (generate.h): conversations, the page
 * allocator's policy, the continuous-batching scheduler and the stop rules.
 *
 * One step: pick the live sequences' tokens that are not cached yet (one per
 * decoding sequence, a chunk of a prefill), make sure their pages exist,
 * pack every piece of per-step metadata (tokens, positions, cache slots,
 * query offsets, context lengths, block table, sampling settings) into one
 * host buffer, upload it with a single copy, run the forward, and download
 * the sampled tokens and their logprobs with a single copy. Host work per
 * step is proportional to the batch, never to the cache. While a decode
 * step runs, the next one is already queued behind it (its input tokens are
 * the ones the running step samples, still on the device), so that host
 * work and the launch overlap the GPU's instead of separating steps; a
 * sequence that ends on the running step has its row of the step ahead
 * dropped.
 *
 * Prefix sharing keeps one invariant: a page held by more than one sequence
 * is full and is never written again. Sequences take only whole pages that
 * lie before their last token; the one case that would rewrite a cached
 * position (a run that must recompute a conversation's last token for its
 * logits) first gives up a shared page and recomputes it into its own. */
#include "model/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "model/gen_forward.h"
#include "model/gen_graph.h"
#include "model/kv_cache.h"
#include "model/kv_prefix.h"

/* One sequence's share of a step. */
typedef struct {
    gen_seq *s;
    int take;    /* tokens processed this step: positions n_cached .. n_cached + take - 1 */
    int logits;  /* its last token's logits are computed (all new tokens are in the step) */
} step_entry;

/* What one step reads and writes outside the forward. */
typedef struct {
    char *meta_host;     /* step metadata: page-locked host staging ... */
    void *meta_dev;      /* ... and its device copy, same layout */
    void *out_dev;       /* [rows] int32 tokens, then [rows] fp32 logprobs */
    int32_t *out_host;   /* their copy on the host (page-locked) */
    ops_event *done;     /* recorded behind that copy */
} step_buf;

/* A queued step: its buffer and logit rows. */
typedef struct {
    int buf;
    int rows;
    int sample;
} step_run;

struct gen_engine {
    model *m;
    ops_ctx *ctx;
    gen_config cfg;
    kv_cache kv;
    kv_prefix prefix;    /* full pages by content (cfg.prefix_sharing) */
    gen_forward fwd;
    gen_graphs graphs;   /* decode-step graphs (cfg.cuda_graphs) */
    int max_pages_seq;   /* block-table width for a max_context sequence */
    gen_stats stats;
    long tick;           /* steps so far: the clock of last_used */
    gen_seq *head;       /* every sequence of the engine */
    int next_id;

    /* The current run. */
    gen_seq **queue;     /* waiting, FIFO; preempted sequences re-enter at the front */
    int q_len;
    gen_seq **live;      /* admission order */
    int n_live;
    step_entry *entries;

    /* Step buffers, used by steps in turn: one can be packed and queued
     * while the step before still runs on the other. */
    step_buf buf[2];
    int next_buf;
    size_t meta_bytes;
};

const char *gen_stop_name(gen_stop s) {
    switch (s) {
    case GEN_RUNNING: return "running";
    case GEN_STOP_TOKEN: return "stop_token";
    case GEN_STOP_CHECK: return "stop_check";
    case GEN_STOP_BUDGET: return "budget";
    case GEN_STOP_CONTEXT: return "context";
    }
    return "unknown";
}

void gen_config_defaults(gen_config *gc) {
    if (gc->page_size <= 0) gc->page_size = 16;
    if (gc->max_batch <= 0) gc->max_batch = 64;
    if (gc->max_step_tokens <= 0) gc->max_step_tokens = 2048;
    if (gc->max_context <= 0) gc->max_context = 4096;
    if (!(gc->cache_fraction > 0.0)) gc->cache_fraction = 0.9;
    if (gc->prefix_sharing == 0) gc->prefix_sharing = 1;
    if (gc->group_reads == 0) gc->group_reads = 1;
}

static int pages_for(int tokens, int page_size) { return (tokens + page_size - 1) / page_size; }

size_t gen_page_bytes(const model_config *mc, const ops_ctx *ctx, int page_size) {
    return kv_cache_page_bytes(mc, page_size, ops_act_size(ctx));
}

size_t gen_scratch_bytes(const model_config *mc, const gen_config *gc_in, dk_device device) {
    gen_config gc = *gc_in;
    gen_config_defaults(&gc);
    if (device != DK_DEVICE_CPU) return 0; /* the CUDA ops fit their needs into the context's minimum */
    /* The CPU causal attention op of a fresh-prefill step keeps one
     * [min(64, L), L] fp32 strip for the longest sequence L of the step. */
    if (gc.paged_prefill) return 0;
    size_t L = (size_t)gc.max_step_tokens, rows = L < 64 ? L : 64;
    return rows * L * sizeof(float);
}

const gen_config *gen_get_config(const gen_engine *e) { return &e->cfg; }
const gen_stats *gen_get_stats(const gen_engine *e) { return &e->stats; }
int gen_free_pages(const gen_engine *e) { return e->kv.n_free; }

/* ---- creation ------------------------------------------------------------------ */

static size_t meta_capacity(const gen_engine *e) {
    const size_t T = (size_t)e->cfg.max_step_tokens, B = (size_t)e->cfg.max_batch;
    const size_t TF = T < GEN_FUSED_QKV_TOKENS ? T : GEN_FUSED_QKV_TOKENS;
    const size_t G = (size_t)(e->m->cfg.n_heads / e->m->cfg.n_kv_heads);
    /* tokens, pos, slots; cu_q, lens; rows; block table; q|k|v gather;
     * then the groups' first, end, len and block table, and skip. */
    return B * sizeof(sample_params) +
           sizeof(int32_t) * (3 * T + 2 * B + 1 + B + B * (size_t)e->max_pages_seq + TF * (G + 2) +
                              4 * B + B * (size_t)e->max_pages_seq);
}

dk_status gen_create(gen_engine **out, model *m, const gen_config *gc_in) {
    *out = NULL;
    gen_config gc = *gc_in;
    gen_config_defaults(&gc);
    const model_config *mc = &m->cfg;
    ops_ctx *ctx = m->ctx;
    if (gc.max_batch > gc.max_step_tokens)
        return dk_fail(DK_ERR_USAGE,
                       "generation: max_batch = %d exceeds max_step_tokens = %d (every live sequence must fit one "
                       "decode step)",
                       gc.max_batch, gc.max_step_tokens);
    if (gc.max_context > mc->max_position)
        return dk_fail(DK_ERR_USAGE, "generation: max_context = %d exceeds the model's max_position = %d",
                       gc.max_context, mc->max_position);
    if (gc.prefix_sharing != 1 && gc.prefix_sharing != -1)
        return dk_fail(DK_ERR_USAGE, "generation: prefix_sharing = %d must be 1 (on), -1 (off) or 0 (the default)",
                       gc.prefix_sharing);
    if (gc.group_reads != 1 && gc.group_reads != -1)
        return dk_fail(DK_ERR_USAGE, "generation: group_reads = %d must be 1 (on), -1 (off) or 0 (the default)",
                       gc.group_reads);
    if (gc.cache_fraction > 1.0)
        return dk_fail(DK_ERR_USAGE, "generation: cache_fraction = %g must be in (0, 1]", gc.cache_fraction);
    const size_t page_bytes = gen_page_bytes(mc, ctx, gc.page_size);
    if (gc.n_pages <= 0) {
        size_t budget = gc.cache_bytes;
        if (!budget) budget = (size_t)(gc.cache_fraction * (double)gc.free_bytes);
        if (!budget)
            return dk_fail(DK_ERR_USAGE,
                           "generation: no KV cache size: set n_pages, cache_bytes, or cache_fraction with free_bytes");
        size_t n = budget / page_bytes;
        if (n > (size_t)INT32_MAX) n = INT32_MAX;
        gc.n_pages = (int)n;
    }
    const int seq_pages = pages_for(gc.max_context, gc.page_size);
    if (gc.n_pages < seq_pages)
        return dk_fail(DK_ERR_USAGE,
                       "generation: a KV cache of %d pages (%zu bytes each) cannot hold one sequence of max_context "
                       "= %d tokens (%d pages of %d tokens)",
                       gc.n_pages, page_bytes, gc.max_context, seq_pages, gc.page_size);
    size_t need_scratch = gen_scratch_bytes(mc, &gc, ctx->device);
    if (ctx->scratch_size < need_scratch)
        return dk_fail(DK_ERR_USAGE,
                       "generation: ops scratch of %zu bytes is too small for max_step_tokens = %d (needs %zu; "
                       "gen_scratch_bytes gives it)",
                       ctx->scratch_size, gc.max_step_tokens, need_scratch);

    gen_engine *e = dk_calloc(1, sizeof *e);
    e->m = m;
    e->ctx = ctx;
    e->cfg = gc;
    e->max_pages_seq = seq_pages;
    dk_status s = kv_cache_create(&e->kv, ctx, mc, gc.page_size, gc.n_pages);
    if (s != DK_OK) {
        free(e);
        return s;
    }
    kv_prefix_init(&e->prefix, gc.n_pages, gc.page_size);
    gen_forward_init(&e->fwd, m, &e->kv, gc.max_step_tokens, gc.max_batch);
    e->queue = dk_calloc((size_t)gc.max_batch + 1, sizeof(gen_seq *));
    e->live = dk_calloc((size_t)gc.max_batch, sizeof(gen_seq *));
    e->entries = dk_calloc((size_t)gc.max_batch, sizeof(step_entry));
    e->meta_bytes = meta_capacity(e);
    for (int b = 0; b < 2; b++) {
        step_buf *sb = &e->buf[b];
        sb->meta_host = ops_host_alloc(ctx, e->meta_bytes);
        sb->meta_dev = ops_alloc(ctx, e->meta_bytes);
        sb->out_dev = ops_alloc(ctx, 2 * (size_t)gc.max_batch * sizeof(int32_t));
        sb->out_host = ops_host_alloc(ctx, 2 * (size_t)gc.max_batch * sizeof(int32_t));
        sb->done = ops_event_new(ctx);
    }
    *out = e;
    return DK_OK;
}

void gen_free(gen_engine *e) {
    if (!e) return;
    while (e->head) gen_seq_free(e, e->head);
    gen_graphs_free(&e->graphs, e->ctx);
    gen_forward_free(&e->fwd);
    kv_cache_free(&e->kv);
    kv_prefix_free(&e->prefix);
    for (int b = 0; b < 2; b++) {
        step_buf *sb = &e->buf[b];
        ops_free(e->ctx, sb->meta_dev);
        ops_free(e->ctx, sb->out_dev);
        ops_host_free(e->ctx, sb->meta_host);
        ops_host_free(e->ctx, sb->out_host);
        ops_event_free(e->ctx, sb->done);
    }
    free(e->queue);
    free(e->live);
    free(e->entries);
    free(e);
}

/* ---- sequences ----------------------------------------------------------------- */

gen_seq *gen_seq_new(gen_engine *e, uint64_t seed) {
    gen_seq *s = dk_calloc(1, sizeof *s);
    s->id = e->next_id++;
    s->seed = seed;
    s->pages = dk_calloc((size_t)e->max_pages_seq, sizeof(int32_t));
    s->next = e->head;
    if (e->head) e->head->prev = s;
    e->head = s;
    return s;
}

static void seq_reserve(gen_seq *s, int n) {
    if (n <= s->cap) return;
    int cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    s->tokens = dk_realloc(s->tokens, (size_t)cap * sizeof(int32_t));
    s->logprobs = dk_realloc(s->logprobs, (size_t)cap * sizeof(float));
    s->sampled = dk_realloc(s->sampled, (size_t)cap);
    s->cap = cap;
}

dk_status gen_seq_append(gen_engine *e, gen_seq *s, const int32_t *tokens, int n) {
    if (n < 0) return dk_fail(DK_ERR_USAGE, "gen_seq_append: sequence %d: negative token count %d", s->id, n);
    const int V = e->m->cfg.vocab_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return dk_fail(DK_ERR_USAGE, "gen_seq_append: sequence %d: token %d = %d is outside the vocabulary [0, %d)",
                           s->id, i, tokens[i], V);
    if (s->n_tokens + n > e->cfg.max_context)
        return dk_fail(DK_ERR_USAGE,
                       "gen_seq_append: sequence %d would hold %d tokens, more than max_context = %d", s->id,
                       s->n_tokens + n, e->cfg.max_context);
    seq_reserve(s, s->n_tokens + n);
    memcpy(s->tokens + s->n_tokens, tokens, (size_t)n * sizeof(int32_t));
    memset(s->logprobs + s->n_tokens, 0, (size_t)n * sizeof(float));
    memset(s->sampled + s->n_tokens, 0, (size_t)n);
    s->n_tokens += n;
    return DK_OK;
}

/* Drops s's hold on its pages from index `from` on; a page nobody else
 * holds leaves the prefix table and returns to the pool. */
static void seq_give_pages(gen_engine *e, gen_seq *s, int from) {
    for (int i = from; i < s->n_pages; i++)
        if (e->kv.refs[s->pages[i]] == 1) kv_prefix_remove(&e->prefix, s->pages[i]);
    if (s->n_pages > from) kv_cache_give(&e->kv, s->pages + from, s->n_pages - from);
    s->n_pages = from;
    if (s->n_cached > from * e->cfg.page_size) s->n_cached = from * e->cfg.page_size;
    if (s->n_entered > from) s->n_entered = from;
    if (s->n_ready > from) s->n_ready = from;
}

static void seq_release_pages(gen_engine *e, gen_seq *s) { seq_give_pages(e, s, 0); }

void gen_seq_drop_cache(gen_engine *e, gen_seq *s) { seq_release_pages(e, s); }

void gen_seq_free(gen_engine *e, gen_seq *s) {
    if (!s) return;
    seq_release_pages(e, s);
    if (s->prev) s->prev->next = s->next;
    else e->head = s->next;
    if (s->next) s->next->prev = s->prev;
    free(s->tokens);
    free(s->logprobs);
    free(s->sampled);
    free(s->pages);
    free(s);
}

/* ---- page policy --------------------------------------------------------------- */

/* Drops the cache of the least recently used conversation outside the run;
 * 0 when there is none. */
static int evict_idle(gen_engine *e) {
    gen_seq *victim = NULL;
    for (gen_seq *s = e->head; s; s = s->next)
        if (!s->in_run && s->n_pages > 0 && (!victim || s->last_used < victim->last_used)) victim = s;
    if (!victim) return 0;
    e->stats.evictions++;
    e->stats.recomputed_tokens += victim->n_cached;
    seq_release_pages(e, victim);
    return 1;
}

/* Drops the cache of the waiting sequence nearest the back of the queue that
 * holds pages; 0 when there is none. */
static int evict_waiting(gen_engine *e) {
    for (int i = e->q_len - 1; i >= 0; i--) {
        gen_seq *s = e->queue[i];
        if (s->n_pages == 0) continue;
        e->stats.evictions++;
        e->stats.recomputed_tokens += s->n_cached;
        seq_release_pages(e, s);
        return 1;
    }
    return 0;
}

static void queue_push_front(gen_engine *e, gen_seq *s) {
    memmove(e->queue + 1, e->queue, (size_t)e->q_len * sizeof(gen_seq *));
    e->queue[0] = s;
    e->q_len++;
}

/* Sends the most recently admitted live sequence that is not yet part of
 * the step being planned back to the front of the
 * queue without its cache; `self` is the sequence asking, taken last. */
static gen_seq *preempt_one(gen_engine *e, gen_seq *self) {
    int victim = -1;
    for (int i = e->n_live - 1; i >= 0 && victim < 0; i--) {
        gen_seq *s = e->live[i];
        if (s != self && s->planned_at != e->tick + 1) victim = i;
    }
    if (victim < 0) {
        for (int i = 0; i < e->n_live; i++)
            if (e->live[i] == self) victim = i;
    }
    gen_seq *s = e->live[victim];
    memmove(e->live + victim, e->live + victim + 1, (size_t)(e->n_live - victim - 1) * sizeof(gen_seq *));
    e->n_live--;
    e->stats.preemptions++;
    e->stats.recomputed_tokens += s->n_cached;
    seq_release_pages(e, s);
    queue_push_front(e, s);
    return s;
}

/* Gives s pages for its first `tokens` positions when the pool allows,
 * taking idle conversations' pages if needed; 0 when they are not there. */
static int grow_pages(gen_engine *e, gen_seq *s, int tokens) {
    const int need = pages_for(tokens, e->cfg.page_size);
    if (need > e->max_pages_seq)
        DK_ABORT("generation: sequence %d needs %d pages, beyond the block table's %d", s->id, need, e->max_pages_seq);
    while (s->n_pages < need) {
        int32_t p = kv_cache_take(&e->kv);
        if (p < 0) {
            if (evict_idle(e)) continue;
            return 0;
        }
        s->pages[s->n_pages++] = p;
        /* A page whose tokens are all known is entered at once, pending:
         * another sequence with the same tokens then waits for this one's
         * prefill instead of repeating it. */
        const int P = e->cfg.page_size, i = s->n_pages - 1;
        if (e->cfg.prefix_sharing > 0 && (i + 1) * P <= s->n_tokens && i == s->n_entered) {
            kv_prefix_add(&e->prefix, p, i ? s->pages[i - 1] : -1, s->tokens + (size_t)i * P);
            s->n_entered++;
        }
    }
    return 1;
}

/* After a step: the pages of s that its cache now fills with known tokens
 * are ready to share (entered now if they were not: pages filled by decode
 * steps, or by the rest of a prompt appended after a turn). */
static void enter_full_pages(gen_engine *e, gen_seq *s) {
    if (e->cfg.prefix_sharing < 0) return;
    const int P = e->cfg.page_size;
    int full = (s->n_cached < s->n_tokens ? s->n_cached : s->n_tokens) / P;
    if (full > s->n_pages) full = s->n_pages;
    for (int i = s->n_ready; i < full; i++) {
        const int32_t p = s->pages[i];
        if (kv_prefix_state(&e->prefix, p) == KV_PREFIX_ABSENT)
            kv_prefix_add(&e->prefix, p, i ? s->pages[i - 1] : -1, s->tokens + (size_t)i * P);
        if (kv_prefix_state(&e->prefix, p) == KV_PREFIX_PENDING) kv_prefix_ready(&e->prefix, p);
    }
    if (s->n_ready < full) s->n_ready = full;
    if (s->n_entered < s->n_ready) s->n_entered = s->n_ready;
}

/* Gives s, page by page, the ready pages of the prefix table that hold its
 * next whole pages of tokens before its last one (that one is always
 * processed: its logits are needed). Only a sequence whose cache ends on a
 * page boundary takes pages. Returns 1 when its next page is being prefilled
 * by a live sequence: s waits for it rather than prefill it again. */
static int share_prefix(gen_engine *e, gen_seq *s) {
    const int P = e->cfg.page_size;
    if (e->cfg.prefix_sharing < 0 || s->n_cached != s->n_pages * P) return 0;
    while ((s->n_pages + 1) * P <= s->n_tokens - 1) {
        const int i = s->n_pages;
        int ready;
        const int32_t p = kv_prefix_find(&e->prefix, i ? s->pages[i - 1] : -1, s->tokens + (size_t)i * P, &ready);
        if (p < 0) return 0;
        if (!ready) {
            /* Only a live sequence prefills: with none, s prefills it itself. */
            if (e->n_live == 0) return 0;
            e->stats.share_waits++;
            return 1;
        }
        kv_cache_ref(&e->kv, p);
        s->pages[s->n_pages++] = p;
        s->n_cached += P;
        s->n_entered = s->n_ready = s->n_pages;
        e->stats.shared_tokens += P;
        e->stats.shared_pages++;
    }
    return 0;
}

/* Makes s process its last token again (its logits are needed): a cached
 * last token is uncached. Its page is written again, so a page others hold
 * is given up first and its positions recomputed into a page of s's own;
 * a page only s holds leaves the table until it is full again. */
static void seq_redo_last(gen_engine *e, gen_seq *s) {
    if (s->n_cached < s->n_tokens) return;
    const int i = (s->n_tokens - 1) / e->cfg.page_size;
    if (e->kv.refs[s->pages[i]] > 1) {
        seq_give_pages(e, s, i);
        return;
    }
    kv_prefix_remove(&e->prefix, s->pages[i]);
    if (s->n_entered > i) s->n_entered = i;
    if (s->n_ready > i) s->n_ready = i;
    s->n_cached--;
}

dk_status gen_check_pages(const gen_engine *e) {
    const int N = e->kv.n_pages;
    int32_t *held = dk_calloc((size_t)N, sizeof(int32_t));
    dk_status st = DK_OK;
    for (const gen_seq *s = e->head; s; s = s->next)
        for (int i = 0; i < s->n_pages; i++) held[s->pages[i]]++;
    int n_held = 0;
    for (int p = 0; p < N && st == DK_OK; p++) {
        n_held += held[p] > 0;
        if (held[p] != e->kv.refs[p])
            st = dk_fail(DK_ERR_RUNTIME, "kv pages: page %d has %d references but %d holders", p, e->kv.refs[p],
                         held[p]);
        else if (!held[p] && kv_prefix_state(&e->prefix, p) != KV_PREFIX_ABSENT)
            st = dk_fail(DK_ERR_RUNTIME, "kv pages: page %d is free but still in the prefix table", p);
    }
    if (st == DK_OK && n_held + e->kv.n_free != N)
        st = dk_fail(DK_ERR_RUNTIME, "kv pages: %d held and %d free of %d pages", n_held, e->kv.n_free, N);
    for (int i = 0; i < e->kv.n_free && st == DK_OK; i++)
        if (held[e->kv.free_list[i]])
            st = dk_fail(DK_ERR_RUNTIME, "kv pages: page %d is on the free list and held", e->kv.free_list[i]);
    free(held);
    return st;
}

/* ---- steps ----------------------------------------------------------------------- */

/* The groups of a decode step (ops_kv_groups): runs of adjacent entries
 * whose leading pages are the same pages, at least two sequences and one
 * page. A run grows while the next sequence holds all of the pages the run
 * shares so far (the first follower sets how many), and only pages wholly
 * before a sequence's new tokens count. Fills the arrays (first, end, len:
 * [n]; bt: [n, maxp]; skip: [n entries]) and returns the group count. */
static int build_groups(const gen_engine *e, const step_entry *en, int n, int maxp, int32_t *first, int32_t *end,
                        int32_t *len, int32_t *bt, int32_t *skip, int *max_len) {
    const int P = e->cfg.page_size;
    int ng = 0;
    *max_len = 0;
    memset(skip, 0, (size_t)n * sizeof(int32_t));
    for (int i = 0; i < n;) {
        const gen_seq *a = en[i].s;
        int common = -1, j = i + 1;
        for (; j < n; j++) {
            const gen_seq *b = en[j].s;
            int lim = b->n_cached / P < a->n_cached / P ? b->n_cached / P : a->n_cached / P, c = 0;
            if (common >= 0 && lim > common) lim = common;
            while (c < lim && b->pages[c] == a->pages[c]) c++;
            if (c == 0 || (common >= 0 && c < common)) break;
            common = c;
        }
        if (common <= 0) {
            i++;
            continue;
        }
        first[ng] = i, end[ng] = j, len[ng] = common * P;
        memcpy(bt + (size_t)ng * maxp, a->pages, (size_t)common * sizeof(int32_t));
        memset(bt + (size_t)ng * maxp + common, 0, (size_t)(maxp - common) * sizeof(int32_t));
        for (int k = i; k < j; k++) skip[k] = common * P;
        if (common * P > *max_len) *max_len = common * P;
        ng++;
        i = j;
    }
    return ng;
}

/* Moves each entry whose first page is shared to just after the last
 * entry before it with the same first page, the order otherwise kept: the
 * samples of a task stay adjacent, and so one group (build_groups), when
 * preemptions or the caller's order have spread them over the batch. */
static void gather_groups(const gen_engine *e, step_entry *en, int n) {
    const int P = e->cfg.page_size;
    for (int i = 1; i < n; i++) {
        const gen_seq *s = en[i].s;
        if (s->n_cached < P || e->kv.refs[s->pages[0]] < 2) continue;
        int j = i - 1;
        while (j >= 0 && !(en[j].s->n_cached >= P && en[j].s->pages[0] == s->pages[0])) j--;
        if (j < 0 || j == i - 1) continue;
        const step_entry t = en[i];
        memmove(en + j + 2, en + j + 1, (size_t)(i - j - 1) * sizeof *en);
        en[j + 1] = t;
    }
}

/* Packs, uploads and queues one step over entries[0..n-1] in the next
 * step buffer. The step's input tokens are the sequences' own, or with
 * tokens_dev the rows a step before sampled, still on the device (a step
 * queued ahead: one token per entry, row i for entry i). The cache
 * bookkeeping (n_cached) moves at once; with sample, the sampled tokens
 * and logprobs reach the buffer's out_host once step_wait returns. */
static step_run step_launch(gen_engine *e, step_entry *en, int n, int sample, const gen_params *p,
                            const int32_t *tokens_dev) {
    const int P = e->cfg.page_size;
    int T = 0, rows = 0, maxp = 1, fresh = !e->cfg.paged_prefill;
    for (int i = 0; i < n; i++) {
        T += en[i].take;
        rows += en[i].logits;
        int np = pages_for(en[i].s->n_cached + en[i].take, P);
        if (np > maxp) maxp = np;
        if (en[i].s->n_cached != 0) fresh = 0;
    }
    /* Entries are put in group order first, also in a step that still
     * prefills: the decode steps queued ahead of it (tokens_dev) keep the
     * order of the step whose rows they read. */
    if (e->cfg.group_reads > 0 && sample && !tokens_dev && n >= 2) gather_groups(e, en, n);
    /* A decode step (one sampled token per sequence) may replay a graph; its
     * block table is widened to a bucket so the shape holds for a while.
     * Widened with graphs off too: the decode kernel plans its splits of
     * the context from the table's width (max_pages * page_size), so a
     * step launched directly gets the arguments, and the bits, of the
     * same step replayed from a graph. */
    const int decode = sample && rows == T && T == n && !fresh;
    const int graph = e->cfg.cuda_graphs && decode;
    const int grouping = e->cfg.group_reads > 0 && decode && n >= 2;
    if (decode) {
        maxp = (maxp + GEN_GRAPH_PAGE_BUCKET - 1) / GEN_GRAPH_PAGE_BUCKET * GEN_GRAPH_PAGE_BUCKET;
        if (maxp > e->max_pages_seq) maxp = e->max_pages_seq;
    }
    /* The buffer was last used two steps ago, and that step has been waited
     * for: its upload and its copy back are done. */
    const int b = e->next_buf;
    e->next_buf ^= 1;
    step_buf *sb = &e->buf[b];
    /* Layout: sample_params first (8-byte aligned), then the int32 arrays. */
    sample_params *prm = (sample_params *)sb->meta_host;
    int32_t *ints = (int32_t *)(sb->meta_host + (size_t)rows * sizeof(sample_params));
    int32_t *tok = ints, *pos = tok + T, *slot = pos + T, *cu = slot + T, *lens = cu + n + 1, *rowv = lens + n;
    int32_t *bt = rowv + rows, *qkv_rows = bt + (size_t)n * maxp;
    const int n_qkv = gen_forward_qkv_rows(&e->m->cfg, T, qkv_rows);
    /* Groups only in decode steps (one new token a sequence), whose
     * sequences have cached pages to share. */
    int32_t *g_first = qkv_rows + n_qkv, *g_end = g_first + n, *g_len = g_end + n, *g_bt = g_len + n;
    int32_t *g_skip = g_bt + (size_t)n * maxp;
    int n_groups = 0, g_max_len = 0;
    if (grouping) {
        n_groups = build_groups(e, en, n, maxp, g_first, g_end, g_len, g_bt, g_skip, &g_max_len);
        /* The longest group sizes the launch (a graph's shape): rounded up
         * like the block table, so a graph holds while groups come and go. */
        const int bucket = GEN_GRAPH_PAGE_BUCKET * P;
        g_max_len = (g_max_len + bucket - 1) / bucket * bucket;
        if (g_max_len > maxp * P) g_max_len = maxp * P;
    }
    size_t used = (size_t)((char *)(n_groups ? g_skip + n : qkv_rows + n_qkv) - sb->meta_host);
    if (used > e->meta_bytes) DK_ABORT("generation: step metadata of %zu bytes exceeds the planned %zu", used, e->meta_bytes);

    int t = 0, r = 0;
    cu[0] = 0;
    for (int i = 0; i < n; i++) {
        gen_seq *s = en[i].s;
        for (int j = 0; j < en[i].take; j++, t++) {
            int ps = s->n_cached + j;
            tok[t] = tokens_dev ? 0 : s->tokens[ps];
            pos[t] = ps;
            slot[t] = s->pages[ps / P] * P + ps % P;
        }
        cu[i + 1] = t;
        lens[i] = s->n_cached + en[i].take;
        int np = pages_for(lens[i], P);
        memcpy(bt + (size_t)i * maxp, s->pages, (size_t)np * sizeof(int32_t));
        memset(bt + (size_t)i * maxp + np, 0, (size_t)(maxp - np) * sizeof(int32_t));
        if (en[i].logits) {
            rowv[r] = t - 1;
            /* The sampled token's index in the sequence is the draw's counter. */
            if (sample) {
                prm[r] = (sample_params){.temperature = p->temperature, .top_p = p->top_p, .top_k = p->top_k,
                                         .seed = s->seed, .counter = (uint64_t)lens[i]};
            }
            r++;
        }
        s->last_used = e->tick;
    }
    /* Up beside the step before, which uses the other buffer (this one's
     * last step has been waited for); not packed again before this step
     * has been. */
    ops_upload_lane(e->ctx, sb->meta_dev, sb->meta_host, used);

    char *dev = sb->meta_dev;
    const size_t off_ints = (size_t)rows * sizeof(sample_params);
#define DEV(ptr) ((int32_t *)(dev + off_ints + (size_t)((ptr) - ints) * sizeof(int32_t)))
    gen_step st = {
        .T = T, .n_seqs = n, .n_rows = rows, .max_pages = maxp, .fresh = fresh, .gather = rows != T,
        .sample = sample, .tokens = tokens_dev ? tokens_dev : DEV(tok), .pos = DEV(pos), .slots = DEV(slot),
        .cu_q = DEV(cu), .ctx_lens = DEV(lens), .block_table = DEV(bt), .rows = DEV(rowv), .qkv_rows = DEV(qkv_rows),
        .params = (const sample_params *)dev,
        .out_tokens = (int32_t *)sb->out_dev, .out_logprobs = (float *)((int32_t *)sb->out_dev + rows),
    };
    if (n_groups) {
        st.groups = (ops_kv_groups){.n = n_groups, .max_len = g_max_len, .first = DEV(g_first), .end = DEV(g_end),
                                    .len = DEV(g_len), .block_table = DEV(g_bt), .skip = DEV(g_skip)};
        e->stats.grouped_steps++;
        for (int j = 0; j < n_groups; j++) {
            e->stats.group_skipped += (long)(g_end[j] - g_first[j] - 1) * g_len[j];
            if (g_end[j] - g_first[j] > e->stats.group_max) e->stats.group_max = g_end[j] - g_first[j];
        }
    }
#undef DEV
    /* On the CPU the widened block table is all a graph step changes. */
    const gen_graph_result gr = graph && e->ctx->device == DK_DEVICE_CUDA ? gen_graphs_run(&e->graphs, &e->fwd, &st)
                                                                           : GEN_GRAPH_NONE;
    if (gr == GEN_GRAPH_NONE) gen_forward_run(&e->fwd, &st);
    e->stats.graph_captures += gr == GEN_GRAPH_CAPTURED;
    e->stats.graph_replays += gr == GEN_GRAPH_REPLAYED;
    /* Down beside the step after, which writes the other buffer. */
    if (sample && rows) ops_download_lane(e->ctx, sb->out_host, sb->out_dev, 2 * (size_t)rows * sizeof(int32_t), sb->done);
    e->stats.steps++;
    e->tick++;
    for (int i = 0; i < n; i++) {
        en[i].s->n_cached += en[i].take;
        e->stats.prefill_tokens += en[i].take - (sample ? en[i].logits : 0);
        enter_full_pages(e, en[i].s);
    }
    return (step_run){.buf = b, .rows = rows, .sample = sample};
}

/* Waits for a queued step: its sampled tokens and logprobs are in
 * e->buf[run->buf].out_host afterwards (tokens, then logprobs, `rows` of
 * each); a step without them is waited for with the whole stream. */
static void step_wait(gen_engine *e, const step_run *run) {
    double t0 = dk_now();
    if (run->sample && run->rows) ops_event_sync(e->ctx, e->buf[run->buf].done);
    else ops_sync(e->ctx);
    e->stats.wait_s += dk_now() - t0;
}

/* Queues and waits for one step; returns its number of logit rows. */
static int run_step(gen_engine *e, step_entry *en, int n, int sample, const gen_params *p) {
    const step_run run = step_launch(e, en, n, sample, p, NULL);
    step_wait(e, &run);
    return run.rows;
}

/* ---- runs ---------------------------------------------------------------------- */

static int is_stop_token(const gen_params *p, int32_t t) {
    for (int i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] == t) return 1;
    return 0;
}

/* Appends a sampled token and decides whether the turn ends. */
static gen_stop accept_token(gen_engine *e, gen_seq *s, int32_t token, float logprob, const gen_params *p,
                             int max_ctx) {
    seq_reserve(s, s->n_tokens + 1);
    s->tokens[s->n_tokens] = token;
    s->logprobs[s->n_tokens] = logprob;
    s->sampled[s->n_tokens] = 1;
    s->n_tokens++;
    e->stats.decode_tokens++;
    if (is_stop_token(p, token)) return GEN_STOP_TOKEN;
    if (p->stop_fn && p->stop_fn(p->stop_user, s)) return GEN_STOP_CHECK;
    if (s->n_tokens - s->turn_start >= p->max_new_tokens) return GEN_STOP_BUDGET;
    if (s->n_tokens >= max_ctx) return GEN_STOP_CONTEXT;
    return GEN_RUNNING;
}

/* Moves waiting sequences to the live set while the batch and the pages
 * allow: a sequence first takes the shared pages that hold its prefix, and
 * is admitted when its uncached tokens plus the next one fit. One whose next
 * shared page is still being prefilled is passed over for now. When nothing
 * is live, the queue's cached pages are given up too, so the front always
 * gets in (a max_context sequence fits the cache), and nobody waits. */
static void admit(gen_engine *e) {
    int qi = 0;
    while (qi < e->q_len && e->n_live < e->cfg.max_batch) {
        gen_seq *s = e->queue[qi];
        if (share_prefix(e, s)) {
            qi++; /* waits for a page another is prefilling; the ones behind it may go first */
            continue;
        }
        int ok = grow_pages(e, s, s->n_tokens + 1 < e->cfg.max_context ? s->n_tokens + 1 : e->cfg.max_context);
        while (!ok && e->n_live == 0 && evict_waiting(e)) {
            ok = grow_pages(e, s, s->n_tokens + 1 < e->cfg.max_context ? s->n_tokens + 1 : e->cfg.max_context);
        }
        if (!ok) {
            if (e->n_live == 0)
                DK_ABORT("generation: sequence %d cannot get %d pages from an empty batch (%d free of %d)", s->id,
                         pages_for(s->n_tokens + 1, e->cfg.page_size), e->kv.n_free, e->kv.n_pages);
            return;
        }
        memmove(e->queue + qi, e->queue + qi + 1, (size_t)(e->q_len - qi - 1) * sizeof(gen_seq *));
        e->q_len--;
        e->live[e->n_live++] = s;
    }
}

/* Plans one sequence's share of the step: all its uncached tokens up to the
 * budget. A sequence whose next page is not there takes it from idle
 * conversations, then from waiting ones, and finally preempts the most
 * recently admitted live sequence not yet in the step (itself when no other
 * is left). Returns 0 when s itself was preempted. */
static int plan_one(gen_engine *e, gen_seq *s, int *n, int *budget) {
    int take = s->n_tokens - s->n_cached;
    if (take > *budget) take = *budget;
    while (!grow_pages(e, s, s->n_cached + take)) {
        if (evict_waiting(e)) continue;
        if (preempt_one(e, s) == s) return 0;
    }
    s->planned_at = e->tick + 1;
    e->entries[(*n)++] = (step_entry){.s = s, .take = take, .logits = s->n_cached + take == s->n_tokens};
    *budget -= take;
    return 1;
}

/* Chooses this step's tokens: first one token for every decoding sequence,
 * so a long prefill never stalls them, then prefill chunks in admission
 * order while the step's token budget lasts. Returns the number of entries. */
static int plan_step(gen_engine *e) {
    int budget = e->cfg.max_step_tokens, n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_live && budget > 0; i++) {
            gen_seq *s = e->live[i];
            int decoding = s->n_tokens - s->n_cached == 1;
            if (s->planned_at == e->tick + 1 || decoding != (pass == 0)) continue;
            int before = e->n_live;
            plan_one(e, s, &n, &budget);
            if (e->n_live != before) i = -1; /* preemption reordered the list: rescan, planned ones skip */
        }
    }
    return n;
}

/* Takes a waited-for step's sampled tokens for its sequences still running
 * (a step queued ahead may hold rows of sequences that ended on the step
 * before: those are counted and dropped). Returns the number that ended. */
static int accept_step(gen_engine *e, const step_run *run, int ne, const gen_params *p, int max_ctx) {
    const int32_t *tok = e->buf[run->buf].out_host;
    const float *lp = (const float *)(tok + run->rows);
    int r = 0, ended = 0;
    for (int i = 0; i < ne; i++) {
        if (!e->entries[i].logits) continue;
        gen_seq *s = e->entries[i].s;
        if (s->stop != GEN_RUNNING) {
            e->stats.ahead_dropped++;
        } else {
            s->stop = accept_token(e, s, tok[r], lp[r], p, max_ctx);
            ended += s->stop != GEN_RUNNING;
        }
        r++;
    }
    return ended;
}

/* Plans the step after the one just queued over entries[0..ne-1], before
 * that one's tokens are known: one token for each entry, its pages grown.
 * 0 (nothing to queue) unless every live sequence is in the step with its
 * last token (the sampled one is the next input), nothing waits to be
 * admitted, the token sampled cannot end a turn by budget or context (a
 * stop token still may: the step ahead is then partly dropped), and the
 * pages for one more token are free. */
static int plan_ahead(gen_engine *e, int ne, const gen_params *p, int max_ctx) {
    if (e->cfg.sync_steps || e->q_len > 0 || ne != e->n_live) return 0;
    for (int i = 0; i < ne; i++) {
        const gen_seq *s = e->entries[i].s;
        if (!e->entries[i].logits || s->n_cached != s->n_tokens) return 0;
        if (s->n_tokens + 1 - s->turn_start >= p->max_new_tokens || s->n_tokens + 1 >= max_ctx) return 0;
    }
    for (int i = 0; i < ne; i++) {
        gen_seq *s = e->entries[i].s;
        if (!grow_pages(e, s, s->n_tokens + 1)) return 0;
        e->entries[i].take = 1;
    }
    return 1;
}

static dk_status check_params(const gen_engine *e, const gen_params *p) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return dk_fail(DK_ERR_USAGE, "gen_run: temperature must be >= 0 and finite, got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return dk_fail(DK_ERR_USAGE, "gen_run: top_p must be in (0, 1], got %g", (double)p->top_p);
    if (p->top_k < 0) return dk_fail(DK_ERR_USAGE, "gen_run: top_k must be >= 0, got %d", p->top_k);
    if (p->max_new_tokens <= 0)
        return dk_fail(DK_ERR_USAGE, "gen_run: max_new_tokens must be positive, got %d", p->max_new_tokens);
    if (p->max_context < 0) return dk_fail(DK_ERR_USAGE, "gen_run: max_context must be >= 0, got %d", p->max_context);
    if (p->n_stop_tokens < 0 || (p->n_stop_tokens > 0 && !p->stop_tokens))
        return dk_fail(DK_ERR_USAGE, "gen_run: %d stop tokens but no array", p->n_stop_tokens);
    return DK_OK;
}

dk_status gen_run(gen_engine *e, gen_seq **seqs, int n, const gen_params *p) {
    DK_TRY(check_params(e, p));
    if (n < 0) return dk_fail(DK_ERR_USAGE, "gen_run: negative sequence count %d", n);
    const int max_ctx = p->max_context > 0 && p->max_context < e->cfg.max_context ? p->max_context : e->cfg.max_context;
    for (int i = 0; i < n; i++) {
        if (!seqs[i]) return dk_fail(DK_ERR_USAGE, "gen_run: sequence %d is NULL", i);
        if (seqs[i]->n_tokens == 0)
            return dk_fail(DK_ERR_USAGE, "gen_run: sequence %d (id %d) has no tokens; append a prompt first", i,
                           seqs[i]->id);
        if (seqs[i]->in_run)
            return dk_fail(DK_ERR_USAGE, "gen_run: sequence id %d is listed twice", seqs[i]->id);
        seqs[i]->in_run = 1;
    }
    /* The queue holds at most max_batch + 1 entries at a time; grow it to n. */
    e->queue = dk_realloc(e->queue, ((size_t)n + (size_t)e->cfg.max_batch + 1) * sizeof(gen_seq *));
    e->q_len = 0;
    e->n_live = 0;
    for (int i = 0; i < n; i++) {
        gen_seq *s = seqs[i];
        s->turn_start = s->n_tokens;
        s->stop = GEN_RUNNING;
        if (s->n_tokens >= max_ctx) {
            s->stop = GEN_STOP_CONTEXT;
            s->in_run = 0;
            continue;
        }
        /* The last token is processed again if cached: its logits are needed. */
        seq_redo_last(e, s);
        e->queue[e->q_len++] = s;
    }

    /* Every step of a run before has been waited for. Starting each run on
     * the same buffer keeps the decode graphs' pointers, and so their shapes,
     * the same from run to run: a run does not capture the other parity's. */
    e->next_buf = 0;
    while (e->q_len > 0 || e->n_live > 0) {
        admit(e);
        int ne = plan_step(e);
        if (ne == 0) continue; /* everything was preempted: admit again */
        step_run cur = step_launch(e, e->entries, ne, 1, p, NULL);
        /* While a step runs, the next one is queued behind it when it can
         * only be one more token for each of the same sequences (its input
         * tokens are the rows this one samples). The host plans, packs and
         * launches during the GPU's work instead of between steps. */
        for (;;) {
            step_run ahead = {.buf = -1};
            if (plan_ahead(e, ne, p, max_ctx)) {
                ahead = step_launch(e, e->entries, ne, 1, p, (const int32_t *)e->buf[cur.buf].out_dev);
                e->stats.ahead_steps++;
            }
            step_wait(e, &cur);
            const int stopped = accept_step(e, &cur, ne, p, max_ctx);
            if (ahead.buf < 0) break;
            if (stopped) {
                /* The step ahead ran for sequences that have just ended: their
                 * rows are dropped (the cache keeps the key and value of the
                 * last accepted token, which is what the step ahead wrote). */
                step_wait(e, &ahead);
                accept_step(e, &ahead, ne, p, max_ctx);
                break;
            }
            cur = ahead;
        }
        /* Finished sequences leave; the rest keep their order. */
        int k = 0;
        for (int i = 0; i < e->n_live; i++) {
            gen_seq *s = e->live[i];
            if (s->stop != GEN_RUNNING) s->in_run = 0;
            else e->live[k++] = s;
        }
        e->n_live = k;
    }
    return DK_OK;
}

dk_status gen_logits(gen_engine *e, gen_seq *s, float *logits) {
    if (s->n_tokens == 0) return dk_fail(DK_ERR_USAGE, "gen_logits: sequence %d has no tokens", s->id);
    seq_redo_last(e, s);
    s->in_run = 1;
    e->q_len = 0;
    e->n_live = 0;
    while (s->n_cached < s->n_tokens) {
        int take = s->n_tokens - s->n_cached;
        if (take > e->cfg.max_step_tokens) take = e->cfg.max_step_tokens;
        if (!grow_pages(e, s, s->n_cached + take)) {
            s->in_run = 0;
            DK_ABORT("gen_logits: sequence %d cannot get its pages (%d free of %d)", s->id, e->kv.n_free,
                     e->kv.n_pages);
        }
        step_entry en = {.s = s, .take = take, .logits = s->n_cached + take == s->n_tokens};
        run_step(e, &en, 1, 0, NULL);
    }
    s->in_run = 0;
    ops_download(e->ctx, logits, e->fwd.logits, (size_t)e->m->cfg.vocab_size * sizeof(float));
    return DK_OK;
}
