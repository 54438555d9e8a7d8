/* prompts.h: the user messages of a rollout. The first turn states the task
 * (the reference PyTorch source) and asks for an optimized Triton `ModelNew`
 * in one python block; each later turn carries KernelGym's feedback on the
 * previous answer and asks for an improved version.
 *
 * Both are templates a user can replace with a file. A template field is
 * {key}, key a name from the template's list below; its value is inserted
 * verbatim (never scanned again, so braces in source code are safe). "{{"
 * and "}}" give literal braces; a brace that starts no {key} is literal too
 * (so "d = {}" needs no escaping). An unknown {key} is an error naming it:
 * it is almost always a typo.
 *
 *   first turn   {source} the task file, {name} its name, {id}, {level},
 *                {bottleneck} the reference's time per op ("Reference time by
 *                op: ...", env/feedback_hint.h) and a blank line, or "" 
 *   follow-up    {feedback} KernelGym's text, {turn} the number (1-based) of
 *                the turn being asked for, {max_turns} */
#ifndef DK_RL_PROMPTS_H
#define DK_RL_PROMPTS_H

#include "common/error.h"

typedef enum { PROMPT_FIRST = 0, PROMPT_FOLLOWUP = 1 } prompt_kind;

/* The built-in template of a kind. */
const char *prompt_default(prompt_kind k);
/* The keys a kind's template may use (NULL-terminated). */
const char *const *prompt_keys(prompt_kind k);

/* Replaces the {key} fields of tmpl by values[i] for keys[i] (n pairs).
 * *out is malloc'ed. Errors (DK_ERR_USAGE) name the unknown key and its line
 * in the template. */
dk_status prompt_render(const char *tmpl, const char *const *keys, const char *const *values, int n, char **out);

/* Reads a template file (one trailing newline dropped) and checks that it
 * uses only the kind's keys; errors name the path and line. */
dk_status prompt_load(const char *path, prompt_kind k, char **out);

/* The two messages from their templates (NULL: the default). */
/* bottleneck: the text of kg_hint_bottleneck_json, or NULL / "" when unknown. */
dk_status prompt_first(const char *tmpl, const char *id, const char *name, int level, const char *source,
                       const char *bottleneck, char **out);
dk_status prompt_followup(const char *tmpl, const char *feedback, int turn, int max_turns, char **out);

#endif
