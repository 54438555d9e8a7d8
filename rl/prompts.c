/* prompts.c: the default first-turn and follow-up templates and the {key}
 * substitution that renders them (prompts.h). */
#include "rl/prompts.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const char first_default[] =
    "You are given a PyTorch program, `{name}`. Its `Model` class is the reference implementation; "
    "`get_inputs()` builds the forward inputs and `get_init_inputs()` the constructor arguments.\n"
    "\n"
    "```python\n"
    "{source}\n"
    "```\n"
    "\n"
    "{bottleneck}"
    "Write `ModelNew`, a faster drop-in replacement for `Model` that runs on an NVIDIA GPU:\n"
    "- the same constructor arguments and `forward` signature, and outputs that match `Model`'s "
    "within floating-point tolerance;\n"
    "- the real work done by your own Triton kernels (`@triton.jit`), launched from `forward`; fuse "
    "operations where you can, since every round trip through memory costs time;\n"
    "- parameters created in the same order and with the same shapes as in `Model` (keep its "
    "`nn.Linear` / `nn.Conv*` modules to hold the weights), so that both models start from the same "
    "weights;\n"
    "- no shortcuts: do not call the reference, cache outputs between calls, launch work on other "
    "CUDA streams, or fall back to PyTorch when a kernel fails.\n"
    "\n"
    "Reply with the complete module (imports, kernels and `class ModelNew`) in a single ```python "
    "code block. A short explanation before the block is welcome.";

static const char followup_default[] =
    "KernelGym evaluated your `ModelNew`:\n"
    "\n"
    "{feedback}\n"
    "\n"
    "Write an improved `ModelNew` (turn {turn} of {max_turns}). If the evaluation reports an error or "
    "a mismatch, fix that first. If your kernel is correct, make it faster: move more of the time "
    "spent in PyTorch's own kernels into your Triton kernels, fuse further, and tune block sizes. "
    "Reply with the complete module in a single ```python code block.";

static const char *const first_keys[] = {"source", "name", "id", "level", "bottleneck", NULL};
static const char *const followup_keys[] = {"feedback", "turn", "max_turns", NULL};

const char *prompt_default(prompt_kind k) {
    return k == PROMPT_FIRST ? first_default : followup_default;
}

const char *const *prompt_keys(prompt_kind k) {
    return k == PROMPT_FIRST ? first_keys : followup_keys;
}

/* Length of an identifier at p ([A-Za-z_][A-Za-z0-9_]*), 0 if none. */
static size_t ident_len(const char *p) {
    if (!(isalpha((unsigned char)*p) || *p == '_')) return 0;
    size_t n = 1;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    return n;
}

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = dk_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Renders (out != NULL) or only checks (out == NULL) a template. */
static dk_status render(const char *tmpl, const char *const *keys, const char *const *values, int n, char **out) {
    buf b = {0};
    put(&b, "", 0);
    int line = 1;
    for (const char *p = tmpl; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            put(&b, p, 1);
            p += 2;
            continue;
        }
        size_t k = p[0] == '{' ? ident_len(p + 1) : 0;
        if (k == 0 || p[1 + k] != '}') {
            line += *p == '\n';
            put(&b, p++, 1);
            continue;
        }
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (strlen(keys[i]) == k && strncmp(keys[i], p + 1, k) == 0) found = i;
        if (found < 0) {
            char known[256] = "";
            for (int i = 0; i < n; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s{%s}", i ? ", " : "", keys[i]);
            free(b.p);
            return dk_fail(DK_ERR_USAGE, "line %d: unknown template key {%.*s} (this template knows %s)", line, (int)k,
                           p + 1, known);
        }
        if (values) put(&b, values[found], strlen(values[found]));
        p += k + 2;
    }
    if (out) *out = b.p;
    else free(b.p);
    return DK_OK;
}

dk_status prompt_render(const char *tmpl, const char *const *keys, const char *const *values, int n, char **out) {
    return render(tmpl, keys, values, n, out);
}

static int count_keys(const char *const *keys) {
    int n = 0;
    while (keys[n]) n++;
    return n;
}

dk_status prompt_load(const char *path, prompt_kind k, char **out) {
    char *text;
    size_t len;
    DK_TRY(dk_read_file(path, &text, &len));
    if (len && text[len - 1] == '\n') text[--len] = 0;
    if (len && text[len - 1] == '\r') text[--len] = 0;
    const char *const *keys = prompt_keys(k);
    dk_status s = render(text, keys, NULL, count_keys(keys), NULL);
    if (s != DK_OK) {
        free(text);
        return dk_wrap(s, "%s: ", path);
    }
    *out = text;
    return DK_OK;
}

dk_status prompt_first(const char *tmpl, const char *id, const char *name, int level, const char *source,
                       const char *bottleneck, char **out) {
    char lv[16];
    snprintf(lv, sizeof lv, "%d", level);
    /* A known bottleneck is its own paragraph; an unknown one leaves no trace. */
    size_t bl = bottleneck ? strlen(bottleneck) : 0;
    while (bl > 0 && bottleneck[bl - 1] == '\n') bl--;
    char *b = dk_malloc(bl + 3);
    memcpy(b, bl ? bottleneck : "", bl);
    strcpy(b + bl, bl ? "\n\n" : "");
    const char *values[] = {source, name, id, lv, b};
    dk_status st = render(tmpl ? tmpl : first_default, first_keys, values, 5, out);
    free(b);
    return st;
}

dk_status prompt_followup(const char *tmpl, const char *feedback, int turn, int max_turns, char **out) {
    char t[16], m[16];
    snprintf(t, sizeof t, "%d", turn);
    snprintf(m, sizeof m, "%d", max_turns);
    const char *values[] = {feedback, t, m};
    return render(tmpl ? tmpl : followup_default, followup_keys, values, 3, out);
}
