/* generate.h: the generation engine for rollouts (docs/DESIGN.md §6).
 *
 * A conversation is a gen_seq: its tokens (prompt, sampled turns, appended
 * feedback), a logprob for every token the engine sampled, and the KV pages
 * that hold its cached keys and values. The engine keeps those pages across
 * turns, so after gen_seq_append only the new tokens are prefilled.
 *
 * gen_run decodes a set of sequences with continuous batching over a paged
 * KV cache of fixed size: sequences are admitted while pages last and wait
 * otherwise; every step runs one forward over all live sequences (the
 * decoding ones contribute one token, the ones still prefilling a chunk of
 * their new tokens); a finished sequence leaves at once and a waiting one
 * takes its place. When the cache runs out mid-decode, pages are taken first
 * from conversations that are not part of the run, then from the most
 * recently admitted live sequence, which goes back to the queue and later
 * recomputes its cache: memory pressure slows a run down, it never fails it.
 *
 * Prefix sharing (gen_config.prefix_sharing): conversations that begin with
 * the same tokens, such as the samples of one task, hold the same KV pages
 * for them, prefilled once. The engine finds them itself: every full page of
 * known tokens is entered in a table keyed by its tokens and the page before
 * it (model/kv_prefix.h), and a sequence admitted without cache takes, page
 * by page, the ready pages that hold its tokens. Only whole pages are shared
 * and never written again: the tokens after the last whole shared page (and
 * always the last token, whose logits are needed) are prefilled by each
 * sequence into pages of its own, so no page is ever copied. A sequence
 * whose next page is still being prefilled by another waits a step in the
 * queue instead of prefilling it twice. Pages are reference-counted: a
 * preempted or evicted sequence gives up its references, and a page returns
 * to the pool when its last holder lets it go.
 *
 * Grouped reads (gen_config.group_reads): in a decode step, adjacent
 * sequences whose leading pages are the same pages form a group
 * (ops_kv_groups), and the attention reads those pages once for the whole
 * group instead of once per sequence: 16 samples of a 2k-token prompt read
 * it once a step. The groups are a reading plan only; the attention is the
 * same, and the CPU backend checks each step's groups against its pages.
 *
 * Sampling (kernels/ops.h ops_sample): temperature, top-k, top-p or greedy,
 * from a counter-based generator keyed by (sequence seed, token position),
 * so a sequence's tokens do not depend on what else ran in its batch. Each
 * sampled token's logprob under the full tempered softmax is recorded: the
 * quantity the trainer's forward recomputes for the PPO ratio.
 *
 * A turn ends on a stop token (kept in the sequence), on the caller's stop
 * check (stop strings: the engine does not know the tokenizer, so the caller
 * decodes and matches), on the turn's token budget, or at the context limit.
 *
 * Everything runs through the op table, so the engine works on the CPU
 * backend (fp32; tests and CI) and the CUDA backend alike. */
#ifndef DK_MODEL_GENERATE_H
#define DK_MODEL_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/model.h"

typedef struct gen_config {
    int page_size;          /* tokens per KV page (16 when 0) */
    int n_pages;            /* > 0: exactly this many pages; else sized from the two below */
    size_t cache_bytes;     /* > 0: KV cache budget in bytes (all layers, K and V) */
    double cache_fraction;  /* else: this fraction of free_bytes */
    size_t free_bytes;      /* device memory free for the cache (the caller's query) */
    int max_batch;          /* most sequences decoded together */
    int max_step_tokens;    /* most tokens in one forward (prefill chunk); plans the activations */
    int max_context;        /* longest conversation, prompt and every turn included */
    int paged_prefill;      /* 0: a step of fresh prompts only attends with the training
                               attention op (ops_attention_forward); 1: always paged */
    int cuda_graphs;        /* 1: decode steps replay captured graphs (model/gen_graph.h);
                               the CPU backend ignores it */
    int sync_steps;         /* 1: every step is waited for before the next is queued;
                               0: a decode step is queued while the one before runs */
    int prefix_sharing;     /* 1: share the pages of common prefixes (the default when 0);
                               -1: every sequence prefills its own */
    int group_reads;        /* 1: a decode step's attention reads the pages that adjacent
                               sequences share once per group (ops_kv_groups; the
                               default when 0); -1: once per sequence */
} gen_config;

/* Why a sequence's last turn ended. */
typedef enum {
    GEN_RUNNING = 0,   /* not finished yet (only seen inside gen_run) */
    GEN_STOP_TOKEN,    /* sampled a stop token (it is the turn's last token) */
    GEN_STOP_CHECK,    /* the caller's stop check said so (stop strings) */
    GEN_STOP_BUDGET,   /* the turn sampled max_new_tokens tokens */
    GEN_STOP_CONTEXT,  /* the conversation reached the context limit */
} gen_stop;

const char *gen_stop_name(gen_stop s);

/* One conversation. The caller reads the public part; the engine owns the
 * memory and the rest. tokens[i] for i < n_tokens; sampled[i] = 1 where the
 * engine sampled tokens[i] (then logprobs[i] is its logprob; 0 elsewhere). */
typedef struct gen_seq {
    int id;                 /* creation order in the engine */
    uint64_t seed;
    int32_t *tokens;
    float *logprobs;
    uint8_t *sampled;
    int n_tokens;
    int turn_start;         /* tokens[turn_start .. n_tokens-1] were sampled by the last gen_run */
    gen_stop stop;          /* how the last gen_run ended this sequence */

    /* engine-private */
    int cap;
    int n_cached;           /* tokens[0 .. n_cached-1] have their K/V in the cache */
    int32_t *pages;         /* KV pages, in position order */
    int n_pages;
    int n_entered;          /* pages[0 .. n_entered-1] are in the prefix table (pending or ready) */
    int n_ready;            /* pages[0 .. n_ready-1] are in it ready */
    int in_run;             /* 1: queued or live in the current gen_run */
    long last_used;         /* step of the last forward that used its pages (eviction order) */
    long planned_at;        /* step number + 1 of the step that last took its tokens */
    struct gen_seq *prev, *next; /* the engine's list of sequences */
} gen_seq;

/* Called after every sampled token of a live sequence; nonzero ends its
 * turn with GEN_STOP_CHECK. The new tokens are seq->tokens[seq->turn_start
 * .. seq->n_tokens-1]. */
typedef int (*gen_stop_fn)(void *user, const gen_seq *seq);

typedef struct gen_params {
    float temperature;      /* 0: greedy */
    float top_p;            /* (0, 1]; 1: off */
    int top_k;              /* 0: off */
    int max_new_tokens;     /* the turn's token budget, > 0 */
    int max_context;        /* 0: the engine's; else a lower limit for this run */
    const int32_t *stop_tokens; /* e.g. EOS and <|im_end|>; may be NULL */
    int n_stop_tokens;
    gen_stop_fn stop_fn;    /* may be NULL */
    void *stop_user;
} gen_params;

/* Counters since gen_create, for logs and benchmarks. */
typedef struct gen_stats {
    long steps;             /* forwards */
    long prefill_tokens;    /* tokens processed without being sampled from */
    long decode_tokens;     /* tokens sampled */
    long preemptions;       /* live sequences sent back to the queue for lack of pages */
    long evictions;         /* idle conversations whose cache was dropped */
    long recomputed_tokens; /* tokens prefilled again after a preemption or eviction */
    double wait_s;          /* wall time the host waited for steps to finish */
    long ahead_steps;       /* steps queued while the step before still ran */
    long ahead_dropped;     /* their rows dropped: the sequence ended on the step before */
    long graph_captures;    /* decode-step shapes captured (cuda_graphs) */
    long graph_replays;     /* decode steps run by replaying a captured graph */
    long shared_tokens;     /* prefix sharing: tokens whose K/V a sequence took from pages
                               another had prefilled (prefill saved) */
    long shared_pages;      /* ... the pages it took */
    long share_waits;       /* admissions put off a step because the next shared page was
                               still being prefilled */
    long grouped_steps;     /* decode steps with groups (group_reads) */
    long group_skipped;     /* ... cached tokens whose K/V the groups' sequences did not
                               read each for themselves (summed over steps, per layer) */
    int group_max;          /* ... the most sequences in one group */
} gen_stats;

typedef struct gen_engine gen_engine;

/* Fills unset fields (0) of a config with the defaults above and derives
 * nothing else; a convenience for callers that set only a few fields. */
void gen_config_defaults(gen_config *gc);

/* Bytes of ops scratch the engine's ops need with this config, on this
 * backend (the CPU attention op keeps score strips there); give the ctx at
 * least this (and the model's own need) when creating it. */
size_t gen_scratch_bytes(const model_config *mc, const gen_config *gc, dk_device device);

/* Bytes of one KV page over all layers (K and V), on this ctx's backend. */
size_t gen_page_bytes(const model_config *mc, const ops_ctx *ctx, int page_size);

/* Plans and allocates the cache, the activations of one step and the
 * metadata buffers. The model's parameters are used in place (m must outlive
 * the engine; a weight update between runs is seen by the next one, but the
 * cached K/V of existing conversations then belong to the old weights). Fails
 * naming the field on a bad config, a cache too small for one sequence of
 * max_context tokens, or too little ops scratch. */
dk_status gen_create(gen_engine **out, model *m, const gen_config *gc);
void gen_free(gen_engine *e);

const gen_config *gen_get_config(const gen_engine *e); /* with defaults and the page count filled in */
const gen_stats *gen_get_stats(const gen_engine *e);
int gen_free_pages(const gen_engine *e);

/* A new, empty conversation whose draws are keyed by seed. */
gen_seq *gen_seq_new(gen_engine *e, uint64_t seed);
/* Appends tokens (prompt, or feedback after a turn) to be prefilled by the
 * next gen_run or gen_logits. Fails naming the token on an id outside the
 * vocabulary or on a conversation that would exceed max_context. */
dk_status gen_seq_append(gen_engine *e, gen_seq *s, const int32_t *tokens, int n);
/* Releases the conversation's pages and memory. */
void gen_seq_free(gen_engine *e, gen_seq *s);
/* Drops the conversation's cached K/V (its pages return to the pool) and
 * keeps its tokens; a later run prefills it again. */
void gen_seq_drop_cache(gen_engine *e, gen_seq *s);

/* Checks the page bookkeeping: every page's reference count equals the
 * number of sequences holding it, the free pages are exactly those held by
 * none, and the prefix table holds only held pages. For tests; fails naming
 * the first page that is wrong. */
dk_status gen_check_pages(const gen_engine *e);

/* Samples one turn for each of seqs[0..n-1] (distinct, each with at least
 * one token) until each stops; sequences that already sit at the context
 * limit stop at once with GEN_STOP_CONTEXT. Fails only on bad arguments. */
dk_status gen_run(gen_engine *e, gen_seq **seqs, int n, const gen_params *p);

/* The next-token logits (fp32, host, [vocab_size]) after seq's current
 * tokens, prefilling what is not cached; nothing is sampled. It takes no
 * shared pages (what it prefills is its own computation; other sequences may
 * share it afterwards). For tests and for scoring. */
dk_status gen_logits(gen_engine *e, gen_seq *s, float *logits);

#endif
