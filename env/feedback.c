/* feedback.c: the feedback text of feedback.h, built in a growing buffer. */
#include "env/feedback.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/feedback_hint.h"

void kg_feedback_config_default(kg_feedback_config *c) {
    c->max_error_chars = 2000;
    c->top_kernels = 5;
    c->max_name_chars = 80;
    c->max_tokens = 0;
}

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->p = dk_realloc(b->p, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static int is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

char *kg_truncate_middle(const char *s, size_t max_chars) {
    size_t n = strlen(s);
    if (n <= max_chars) return dk_strdup(s);
    char marker[96];
    /* The marker's own length depends on the count; 32 bytes of slack cover it. */
    size_t budget = max_chars > 64 ? max_chars - 64 : max_chars / 2;
    size_t head = budget / 2, tail = budget - head;
    while (head > 0 && is_continuation((unsigned char)s[head])) head--;
    size_t tail_start = n - tail;
    while (tail_start < n && is_continuation((unsigned char)s[tail_start])) tail_start++;
    snprintf(marker, sizeof marker, "\n[... %zu bytes omitted ...]\n", tail_start - head);
    size_t out_len = head + strlen(marker) + (n - tail_start);
    char *out = dk_malloc(out_len + 1);
    memcpy(out, s, head);
    memcpy(out + head, marker, strlen(marker));
    memcpy(out + head + strlen(marker), s + tail_start, n - tail_start);
    out[out_len] = '\0';
    return out;
}

/* The error text, trimmed of trailing blank space and middle-truncated. */
static void add_error(sbuf *b, const kg_feedback_config *c, const char *err) {
    size_t n = strlen(err);
    while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' ' || err[n - 1] == '\t' || err[n - 1] == '\r')) n--;
    if (n == 0) return;
    char *trim = dk_malloc(n + 1);
    memcpy(trim, err, n);
    trim[n] = '\0';
    char *t = kg_truncate_middle(trim, c->max_error_chars > 0 ? (size_t)c->max_error_chars : 0);
    sb_printf(b, "%s\n", t);
    free(t);
    free(trim);
}

static void add_correctness(sbuf *b, const kg_result *r) {
    sb_printf(b, "Compiled: yes. Correct: %s", r->correct && r->status != KG_STATUS_INCORRECT ? "yes" : "no");
    if (isfinite(r->max_abs_diff)) sb_printf(b, " (max abs diff %.3g)", r->max_abs_diff);
    sb_printf(b, ".\n");
    /* Accepted outside the task's tolerance: say what accepted it, so the
     * model knows its rounding is as good as the reference's, not better. */
    if (r->correct && r->correct_rule == KG_RULE_FP64_BUDGET && isfinite(r->error_ratio))
        sb_printf(b, "Accepted by the fp64 error budget: outside atol/rtol of the fp32 reference, but as close to "
                     "an fp64 evaluation as the reference is (error ratio %.2g of 1).\n", r->error_ratio);
}

static void add_timing(sbuf *b, const kg_result *r) {
    if (!r->timing_available || !isfinite(r->speedup)) {
        sb_printf(b, "Speedup: not measured (timing is unavailable on this evaluator).\n");
        return;
    }
    sb_printf(b, "Speedup: %.2fx over the PyTorch reference", r->speedup);
    if (r->runtime.valid && r->ref_runtime.valid) {
        sb_printf(b, " (yours %.4g ms, reference %.4g ms", r->runtime.mean, r->ref_runtime.mean);
        if (r->runtime.trials > 0) sb_printf(b, ", mean of %d trials", r->runtime.trials);
        sb_printf(b, ")");
    }
    sb_printf(b, ".\n");
}

static void add_profile(sbuf *b, const kg_feedback_config *c, const kg_result *r) {
    if (!r->has_profile) return;
    if (isfinite(r->coverage))
        sb_printf(b, "Coverage: %.1f%% of the forward's GPU time is in your own kernels.\n", 100.0 * r->coverage);
    if (r->side_streams) sb_printf(b, "Warning: kernels were launched on streams other than the current one.\n");
    int n = r->n_kernels < c->top_kernels ? r->n_kernels : c->top_kernels;
    if (n <= 0) return;
    sb_printf(b, "Top kernels by GPU time:\n");
    for (int i = 0; i < n; i++) {
        const kg_kernel *k = &r->kernels[i];
        int name_len = (int)strlen(k->name);
        int cut = c->max_name_chars > 3 && name_len > c->max_name_chars;
        sb_printf(b, "  %d. [%s] %.*s%s  %.1f us", i + 1, k->candidate ? "yours" : "torch",
                  cut ? c->max_name_chars - 3 : name_len, k->name, cut ? "..." : "",
                  isfinite(k->time_us) ? k->time_us : 0.0);
        if (k->calls > 0) sb_printf(b, " (%d call%s)", k->calls, k->calls == 1 ? "" : "s");
        sb_printf(b, "\n");
    }
    if (r->n_kernels > n)
        sb_printf(b, "  (%d more kernel%s not shown)\n", r->n_kernels - n, r->n_kernels - n == 1 ? "" : "s");
}

/* The hint of the failure's class and, for a mismatch, where it is: these
 * come right after the status line so a token budget keeps them. */
static void add_hint(sbuf *b, const kg_result *r) {
    const char *h = kg_hint_text(kg_hint_classify(r));
    if (h[0]) sb_printf(b, "%s\n", h);
    char *m = NULL;
    kg_hint_mismatch(r, &m);
    if (m) sb_printf(b, "%s", m);
    free(m);
}

static void add_bottleneck(sbuf *b, const kg_feedback_config *c, const kg_result *r) {
    char *t = NULL;
    kg_hint_bottleneck(r, c->top_kernels, &t);
    if (t) sb_printf(b, "%s", t);
    free(t);
}

char *kg_feedback_build(const kg_feedback_config *c, const kg_result *r) {
    sbuf b = {0};
    sb_printf(&b, "%s", "");
    /* A hack reason wins over whatever else the run found. */
    switch (r->hack ? KG_STATUS_HACK : r->status) {
    case KG_STATUS_OK:
        add_correctness(&b, r);
        add_timing(&b, r);
        add_bottleneck(&b, c, r);
        add_profile(&b, c, r);
        break;
    case KG_STATUS_COMPILE_ERROR:
        sb_printf(&b, "Compile error: ModelNew failed to load, build or compile.\n");
        add_hint(&b, r);
        add_error(&b, c, r->error);
        break;
    case KG_STATUS_INCORRECT:
        add_correctness(&b, r);
        add_hint(&b, r);
        add_error(&b, c, r->error);
        add_bottleneck(&b, c, r);
        break;
    case KG_STATUS_HACK:
        sb_printf(&b, "Rejected: the evaluation found reward hacking");
        for (int i = 0; i < r->n_hack_reasons; i++) sb_printf(&b, "%s%s", i ? ", " : ": ", r->hack_reasons[i]);
        sb_printf(&b, ".\n");
        add_error(&b, c, r->error);
        break;
    case KG_STATUS_TIMEOUT:
        sb_printf(&b, "Timeout: the evaluation did not finish within its time limit.\n");
        add_hint(&b, r);
        add_error(&b, c, r->error);
        break;
    case KG_STATUS_CRASH:
        sb_printf(&b, "Crash: the evaluation process died.\n");
        add_hint(&b, r);
        add_error(&b, c, r->error);
        break;
    case KG_STATUS_ERROR:
        sb_printf(&b, "Evaluation error: the job could not be evaluated.\n");
        add_hint(&b, r);
        add_error(&b, c, r->error);
        break;
    default:
        sb_printf(&b, "No result: the evaluation did not finish before the deadline.\n");
        break;
    }
    /* Drop the final newline: the caller decides how the text is framed. */
    if (b.len > 0 && b.p[b.len - 1] == '\n') b.p[--b.len] = '\0';
    if (c->max_tokens <= 0) return b.p;
    char *fit = kg_feedback_fit(b.p, c->max_tokens);
    free(b.p);
    return fit;
}
