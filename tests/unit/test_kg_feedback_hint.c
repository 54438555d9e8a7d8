/* test_kg_feedback_hint.c: the hints of env/feedback_hint.h on hand-written
 * result JSONs, one per error class (illegal address, out of shared memory,
 * out of memory, output mismatch, wrong shape, NaN, timeout, and none), with
 * the texts CUDA, Triton and the harness (env/harness/compare.py,
 * error_budget.py, evaluate.py) print; the mismatch location, with and
 * without the fp64 budget, the fp64-budget acceptance line, and
 * the reference bottleneck (fields the harness may not send yet: their
 * absence must change nothing), and the token budget (bytes / 4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env/feedback.h"
#include "env/feedback_hint.h"
#include "env/result.h"

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        checks++;                                                             \
        if (!(cond)) {                                                        \
            failures++;                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
        }                                                                     \
    } while (0)

static void parse(const char *json, kg_result *r) {
    kg_result_init(r);
    if (kg_result_parse(json, r) != DK_OK) {
        fprintf(stderr, "FAIL parse %s: %s\n", json, dk_error());
        exit(1);
    }
}

static void expect_class(const char *json, kg_hint_class want) {
    kg_result r;
    parse(json, &r);
    kg_hint_class got = kg_hint_classify(&r);
    CHECK(got == want, "%s: class %s, expected %s", json, kg_hint_name(got), kg_hint_name(want));
    /* The feedback carries the class's hint sentence, right after its status line. */
    kg_feedback_config fc;
    kg_feedback_config_default(&fc);
    char *f = kg_feedback_build(&fc, &r);
    if (want != KG_HINT_NONE) {
        const char *h = strstr(f, kg_hint_text(want));
        const char *nl = strchr(f, '\n');
        CHECK(h && nl && h == nl + 1, "%s: hint not on the second line:\n%s", kg_hint_name(want), f);
    } else CHECK(!strstr(f, "Hint:"), "no hint expected:\n%s", f);
    free(f);
    kg_result_free(&r);
}

int main(void) {
    /* One case per class, with the texts CUDA, PyTorch and Triton print. */
    expect_class("{\"status\":\"crash\",\"error\":\"RuntimeError: CUDA error: an illegal memory access was "
                 "encountered\"}", KG_HINT_ILLEGAL_ADDRESS);
    expect_class("{\"status\":\"error\",\"error\":\"CUDA error: misaligned address\"}", KG_HINT_ILLEGAL_ADDRESS);
    expect_class("{\"status\":\"compile_error\",\"error\":\"triton.runtime.errors.OutOfResources: out of resource: "
                 "shared memory, Required: 262144, Hardware limit: 232448\"}", KG_HINT_OUT_OF_RESOURCES);
    expect_class("{\"status\":\"crash\",\"error\":\"CUDA error: too many resources requested for launch\"}",
                 KG_HINT_OUT_OF_RESOURCES);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"output mismatch in trial 0\"}",
                 KG_HINT_MISMATCH);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"output shape (4, 8) != reference (4, 16)\"}",
                 KG_HINT_SHAPE);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"in forward (eval mode, trial 0): output has "
                 "shape (3,), expected (2,)\"}", KG_HINT_SHAPE);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"eval mode, trial 0: output 1 has dtype "
                 "torch.float16, expected torch.float32\"}", KG_HINT_SHAPE);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"eval mode, trial 1: output differs from the "
                 "reference: max abs diff 20.8, 16 of 16 elements outside atol=0.0001 rtol=0.0001 and outside the fp64 "
                 "error budget (error ratio 154, K=8)\"}", KG_HINT_MISMATCH);
    expect_class("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"train mode, trial 0: output holds NaN where "
                 "the reference does not\"}", KG_HINT_NAN);
    expect_class("{\"status\":\"crash\",\"error\":\"CUDA fault in forward (eval mode, trial 0): CUDA out of memory. "
                 "Tried to allocate 80.00 GiB\"}", KG_HINT_OUT_OF_MEMORY);
    expect_class("{\"status\":\"crash\",\"error\":\"out of host memory (MemoryError) in forward (eval mode, trial 0); "
                 "the limit is 32 GB\"}", KG_HINT_OUT_OF_MEMORY);
    expect_class("{\"status\":\"timeout\",\"error\":\"killed after 120 s\"}", KG_HINT_TIMEOUT);
    expect_class("{\"status\":\"compile_error\",\"error\":\"SyntaxError: invalid syntax\"}", KG_HINT_NONE);
    expect_class("{\"status\":\"ok\",\"compiled\":true,\"correct\":true}", KG_HINT_NONE);

    kg_feedback_config fc;
    kg_feedback_config_default(&fc);

    /* Mismatch location: 12 of 4096 bad is 0.293%; 0.5 / (1e-4 + 1e-4 * |ref|)
     * reported by the harness as max_ratio 2500: a logic error. */
    kg_result r;
    parse("{\"status\":\"incorrect\",\"compiled\":true,\"correct\":false,\"max_abs_diff\":0.5,"
          "\"error\":\"output mismatch\",\"mismatch\":{\"first_index\":[3,1023],\"n_bad\":12,\"numel\":4096,"
          "\"max_abs_diff\":0.5,\"atol\":1e-4,\"rtol\":1e-4,\"max_ratio\":2500,\"pattern\":\"last column\"}}",
          &r);
    char *m = NULL;
    kg_hint_mismatch(&r, &m);
    const char *want_m = "Mismatch: 12 of 4096 elements (0.293%) are outside the tolerance; the first at index "
                         "[3, 1023]; pattern: last column. Largest error 0.5 against atol 0.0001, rtol 0.0001 "
                         "(2.5e+03x the tolerance: a logic error).\n";
    CHECK(m && !strcmp(m, want_m), "mismatch text:\n%s\nexpected:\n%s", m ? m : "(none)", want_m);
    char *f = kg_feedback_build(&fc, &r);
    CHECK(strstr(f, want_m) != NULL, "feedback lacks the mismatch:\n%s", f);
    free(f);
    free(m);
    kg_result_free(&r);

    /* A precision-sized miss (3x the tolerance) says so; absent keys are left out. */
    parse("{\"status\":\"incorrect\",\"mismatch\":{\"max_abs_diff\":3e-4,\"max_ratio\":3}}", &r);
    m = NULL;
    kg_hint_mismatch(&r, &m);
    CHECK(m && !strcmp(m, "Mismatch:. Largest error 0.0003 (3x the tolerance: a precision problem, keep fp32 inputs "
                          "and accumulate in fp32).\n"), "partial mismatch: %s", m ? m : "(none)");
    free(m);
    kg_result_free(&r);

    /* The harness's mismatch with the fp64 budget (the bf16 kernel of
     * tests/kernelgym/precision): the mode and trial, the three values at the
     * first bad element, and the error against the budget; 154 budgets is a
     * precision problem (under 1e4), where 3.6e4 tolerances alone would say
     * a logic error. */
    parse("{\"status\":\"incorrect\",\"compiled\":true,\"error\":\"eval mode, trial 0: output differs\","
          "\"mismatch\":{\"output\":0,\"first_index\":[0,0],\"candidate\":255.5,\"reference\":261.8125,"
          "\"fp64\":261.8257751464844,\"n_bad\":16,\"numel\":16,\"max_abs_diff\":20.84375,\"max_rel_diff\":4.71,"
          "\"atol\":0.0001,\"rtol\":0.0001,\"max_ratio\":36332.7,\"budget_ratio\":153.54,\"k\":8,"
          "\"pattern\":\"all elements wrong\",\"mode\":\"eval\",\"trial\":0}}", &r);
    m = NULL;
    kg_hint_mismatch(&r, &m);
    const char *want_b64 = "Mismatch (eval mode, trial 0): 16 of 16 elements (100%) are outside the tolerance and the "
                           "fp64 error budget; the first at index [0, 0]: 255.5 yours, reference 261.812, exact (fp64) "
                           "261.826; pattern: all elements wrong. Largest error 20.8 against atol 0.0001, rtol 0.0001 "
                           "(3.63e+04x the tolerance; 154x the fp64 error budget, 8 times the reference's own error "
                           "plus the tolerance: a precision problem, keep fp32 inputs and accumulate in fp32).\n";
    CHECK(m && !strcmp(m, want_b64), "fp64 mismatch text:\n%s\nexpected:\n%s", m ? m : "(none)", want_b64);
    f = kg_feedback_build(&fc, &r);
    CHECK(strstr(f, want_b64) && strstr(f, kg_hint_text(KG_HINT_MISMATCH)), "feedback lacks the fp64 mismatch:\n%s", f);
    free(f);
    free(m);
    kg_result_free(&r);
    /* A logic error against fp64: 2e4 budgets; a NaN value is printed as text. */
    parse("{\"status\":\"incorrect\",\"mismatch\":{\"first_index\":[7],\"candidate\":\"nan\",\"reference\":1.5,"
          "\"fp64\":1.5,\"max_abs_diff\":3,\"budget_ratio\":2e4}}", &r);
    m = NULL;
    kg_hint_mismatch(&r, &m);
    CHECK(m && !strcmp(m, "Mismatch:; the first at index [7]: nan yours, reference 1.5, exact (fp64) 1.5. Largest "
                          "error 3 (2e+04x the fp64 error budget: a logic error).\n"), "logic error: %s", m ? m : "(none)");
    free(m);
    kg_result_free(&r);

    /* A pass by the fp64 budget says so, with the ratio; one by the
     * tolerance says nothing more; the C result carries both fields. */
    parse("{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"max_abs_diff\":0.05,"
          "\"correct_rule\":\"fp64_budget\",\"error_ratio\":0.23}", &r);
    CHECK(r.correct_rule == KG_RULE_FP64_BUDGET && r.error_ratio == 0.23, "parsed rule %s ratio %g",
          kg_correct_rule_name(r.correct_rule), r.error_ratio);
    f = kg_feedback_build(&fc, &r);
    CHECK(strstr(f, "Correct: yes (max abs diff 0.05).\nAccepted by the fp64 error budget: outside atol/rtol of the "
                    "fp32 reference, but as close to an fp64 evaluation as the reference is (error ratio 0.23 of 1).")
              != NULL, "fp64 acceptance line:\n%s", f);
    free(f);
    kg_result_free(&r);
    parse("{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"correct_rule\":\"tolerance\",\"error_ratio\":0.1}",
          &r);
    f = kg_feedback_build(&fc, &r);
    CHECK(r.correct_rule == KG_RULE_TOLERANCE && !strstr(f, "fp64"), "tolerance pass:\n%s", f);
    free(f);
    kg_result_free(&r);
    parse("{\"status\":\"ok\",\"correct_rule\":\"sideways\"}", &r);
    CHECK(r.correct_rule == KG_RULE_NONE && isnan(r.error_ratio), "unknown rule read as none");
    kg_result_free(&r);

    /* Without the new fields nothing is added (the harness of today). */
    parse("{\"status\":\"incorrect\",\"max_abs_diff\":0.5}", &r);
    m = NULL;
    kg_hint_mismatch(&r, &m);
    kg_hint_bottleneck(&r, 5, &m);
    CHECK(m == NULL, "absent fields gave: %s", m);
    kg_result_free(&r);

    /* The bottleneck: sorted by share (ties by name), top 3 of 4, a malformed entry skipped. */
    const char *ok_prof = "{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"speedup\":null,"
                          "\"reference_profile\":[{\"name\":\"aten::relu\",\"share\":0.05},"
                          "{\"name\":\"aten::bmm\",\"share\":0.62},{\"name\":\"aten::softmax\",\"share\":0.21},"
                          "{\"name\":\"aten::add\",\"share\":0.05},{\"share\":0.07}]}";
    parse(ok_prof, &r);
    m = NULL;
    kg_hint_bottleneck(&r, 3, &m);
    const char *want_b = "Reference time by op: aten::bmm 62%, aten::softmax 21%, aten::add 5% (1 more). "
                         "Target the largest first.\n";
    CHECK(m && !strcmp(m, want_b), "bottleneck:\n%s\nexpected:\n%s", m ? m : "(none)", want_b);
    free(m);
    f = kg_feedback_build(&fc, &r);
    CHECK(strstr(f, "Reference time by op: aten::bmm 62%, aten::softmax 21%, aten::add 5%, aten::relu 5%.") != NULL,
          "feedback lacks the bottleneck:\n%s", f);
    free(f);
    kg_result_free(&r);
    /* The same from the raw list, as the first-turn prompt would read it. */
    m = NULL;
    kg_hint_bottleneck_json("[{\"name\":\"conv\",\"share\":0.9},{\"name\":\"gelu\",\"share\":0.1}]", 5, &m);
    CHECK(m && !strcmp(m, "Reference time by op: conv 90%, gelu 10%. Target the largest first.\n"), "json: %s", m);
    free(m);

    /* Token budget: bytes / 4 rounded up. */
    CHECK(kg_feedback_tokens("") == 0 && kg_feedback_tokens("abcd") == 1 && kg_feedback_tokens("abcde") == 2,
          "token estimate");
    char *same = kg_feedback_fit("short", 10);
    CHECK(!strcmp(same, "short"), "short text changed: %s", same);
    free(same);
    /* 40 lines of 50 bytes (2000 bytes, 500 tokens) cut to 100 tokens: at
     * most 400 bytes, whole lines, the head first, the count exact. */
    char big[2001];
    for (int i = 0; i < 40; i++) snprintf(big + 50 * i, 51, "line %02d %041d\n", i, 0);
    char *cut = kg_feedback_fit(big, 100);
    const char *mark = strstr(cut, "[feedback truncated: ");
    CHECK(strlen(cut) <= 400, "cut to %zu bytes > 400", strlen(cut));
    CHECK(!strncmp(cut, "line 00", 7), "head lost");
    CHECK(mark && mark > cut && mark[-1] == '\n', "marker not on its own line:\n%s", cut);
    size_t omitted = mark ? strtoul(mark + 21, NULL, 10) : 0;
    CHECK(mark && (size_t)(mark - cut) + omitted == 2000 && (mark - cut) % 50 == 0,
          "kept %td + omitted %zu != 2000", mark ? mark - cut : -1, omitted);
    printf("fit a 500-token text to 100: %zu bytes kept, %zu omitted\n", strlen(cut), omitted);
    free(cut);
    /* The whole feedback honours max_tokens and keeps the hint first. */
    char json[4000];
    char err[3001];
    memset(err, 'x', 3000);
    err[3000] = '\0';
    snprintf(json, sizeof json, "{\"status\":\"crash\",\"error\":\"illegal memory access %s\"}", err);
    parse(json, &r);
    kg_feedback_config small = fc;
    small.max_tokens = 120;
    f = kg_feedback_build(&small, &r);
    CHECK(kg_feedback_tokens(f) <= 120, "feedback %zu tokens > 120", kg_feedback_tokens(f));
    CHECK(strstr(f, kg_hint_text(KG_HINT_ILLEGAL_ADDRESS)) && strstr(f, "[feedback truncated: "),
          "budgeted feedback lost its hint or marker:\n%s", f);
    free(f);
    kg_result_free(&r);

    printf("feedback hints: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
