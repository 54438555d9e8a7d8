/* test_kg_reward_feedback.c: the feedback text the model sees, compared
 * byte for byte on hand-written results (success with a kernel table, CPU
 * without timing, incorrect, compile error, hack, timeout, no result), plus
 * the middle truncation of long errors (UTF-8 kept whole) and determinism. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env/evaluator.h"
#include "env/feedback.h"
#include "env/result.h"

static int failures = 0, checks = 0;

static char *feedback_of(const kg_feedback_config *c, const char *json) {
    kg_result r;
    kg_result_init(&r);
    if (json && kg_result_parse(json, &r) != DK_OK) {
        fprintf(stderr, "FAIL parse: %s\n", dk_error());
        failures++;
    }
    char *f = kg_feedback_build(c, &r);
    kg_result_free(&r);
    return f;
}

static void expect(const char *what, const kg_feedback_config *c, const char *json, const char *want) {
    char *got = feedback_of(c, json);
    checks++;
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "FAIL %s:\n--- got ---\n%s\n--- expected ---\n%s\n", what, got, want);
        failures++;
    }
    char *again = feedback_of(c, json);
    checks++;
    if (strcmp(got, again) != 0) {
        fprintf(stderr, "FAIL %s: not deterministic\n", what);
        failures++;
    }
    free(again);
    free(got);
}

int main(void) {
    kg_feedback_config fc;
    kg_feedback_config_default(&fc);

    const char *ok = "{\"id\":\"j1\",\"status\":\"ok\",\"compiled\":true,\"correct\":true,"
                     "\"hack\":{\"detected\":false,\"reasons\":[]},\"max_abs_diff\":1.2e-06,"
                     "\"runtime_ms\":{\"mean\":0.812,\"median\":0.81,\"std\":0.01,\"min\":0.8,\"max\":0.9,\"trials\":100},"
                     "\"ref_runtime_ms\":{\"mean\":1.112,\"median\":1.1,\"std\":0.01,\"min\":1.1,\"max\":1.2,\"trials\":100},"
                     "\"speedup\":1.37,\"timing_available\":true,"
                     "\"profile\":{\"kernels\":[{\"name\":\"fused_gemm_relu_kernel\",\"time_us\":812.0,\"calls\":1,\"candidate\":true},"
                     "{\"name\":\"ampere_sgemm_128x64_nn\",\"time_us\":300.5,\"calls\":2,\"candidate\":false},"
                     "{\"name\":\"vectorized_elementwise_kernel\",\"time_us\":4.25,\"calls\":3,\"candidate\":false}],"
                     "\"coverage\":0.73,\"side_streams\":false}}";
    expect("ok", &fc, ok,
           "Compiled: yes. Correct: yes (max abs diff 1.2e-06).\n"
           "Speedup: 1.37x over the PyTorch reference (yours 0.812 ms, reference 1.112 ms, mean of 100 trials).\n"
           "Coverage: 73.0% of the forward's GPU time is in your own kernels.\n"
           "Top kernels by GPU time:\n"
           "  1. [yours] fused_gemm_relu_kernel  812.0 us (1 call)\n"
           "  2. [torch] ampere_sgemm_128x64_nn  300.5 us (2 calls)\n"
           "  3. [torch] vectorized_elementwise_kernel  4.2 us (3 calls)");

    kg_feedback_config small = fc;
    small.top_kernels = 1;
    small.max_name_chars = 12;
    expect("ok, one kernel, short names", &small, ok,
           "Compiled: yes. Correct: yes (max abs diff 1.2e-06).\n"
           "Speedup: 1.37x over the PyTorch reference (yours 0.812 ms, reference 1.112 ms, mean of 100 trials).\n"
           "Coverage: 73.0% of the forward's GPU time is in your own kernels.\n"
           "Top kernels by GPU time:\n"
           "  1. [yours] fused_gem...  812.0 us (1 call)\n"
           "  (2 more kernels not shown)");

    expect("cpu", &fc,
           "{\"status\":\"ok\",\"compiled\":true,\"correct\":true,\"max_abs_diff\":0,\"speedup\":null,"
           "\"runtime_ms\":null,\"profile\":null,\"timing_available\":false}",
           "Compiled: yes. Correct: yes (max abs diff 0).\n"
           "Speedup: not measured (timing is unavailable on this evaluator).");

    expect("incorrect", &fc,
           "{\"status\":\"incorrect\",\"compiled\":true,\"correct\":false,\"max_abs_diff\":0.3125,"
           "\"error\":\"output mismatch in trial 2 (train mode)\\n\"}",
           "Compiled: yes. Correct: no (max abs diff 0.312).\n"
           "Hint: the output is wrong. Compare against the reference step by step: accumulate in fp32, check the "
           "reduction axis, the masked-out values (other=0 for sums, -inf for max) and any broadcasts.\n"
           "output mismatch in trial 2 (train mode)");

    expect("compile error", &fc,
           "{\"status\":\"compile_error\",\"compiled\":false,\"correct\":false,"
           "\"error\":\"SyntaxError: invalid syntax (candidate.py, line 3)\"}",
           "Compile error: ModelNew failed to load, build or compile.\nSyntaxError: invalid syntax (candidate.py, line 3)");

    expect("hack", &fc,
           "{\"status\":\"hack\",\"compiled\":true,\"correct\":true,"
           "\"hack\":{\"detected\":true,\"reasons\":[\"static:try_except_fallback\",\"runtime:side_stream\"]}}",
           "Rejected: the evaluation found reward hacking: static:try_except_fallback, runtime:side_stream.");

    expect("timeout", &fc, "{\"status\":\"timeout\",\"error\":\"killed after 120 s wall clock\"}",
           "Timeout: the evaluation did not finish within its time limit.\n"
           "Hint: the kernel did not finish. Check loop bounds and that the grid is not far larger than needed.\n"
           "killed after 120 s wall clock");
    expect("crash", &fc, "{\"status\":\"crash\",\"error\":\"CUDA error: an illegal memory access was encountered\"}",
           "Crash: the evaluation process died.\n"
           "Hint: a kernel read or wrote outside its tensor. Check that every tl.load and tl.store has a mask "
           "covering the last partial block (offs < n), that offsets use the right strides, and that the grid does "
           "not launch more programs than the data needs.\n"
           "CUDA error: an illegal memory access was encountered");
    expect("error", &fc, "{\"status\":\"error\",\"error\":\"task has no get_inputs()\"}",
           "Evaluation error: the job could not be evaluated.\ntask has no get_inputs()");
    expect("no result", &fc, NULL, "No result: the evaluation did not finish before the deadline.");

    /* A long compile error keeps its head and tail within the budget. */
    size_t n = 5000;
    char *err = malloc(n + 1);
    for (size_t i = 0; i < n; i++) err[i] = (char)('a' + i % 26);
    memcpy(err, "Traceback (most recent call last):", 34);
    memcpy(err + n - 24, "TypeError: final reason", 23);
    err[n - 1] = 'X';
    err[n] = '\0';
    char json[6000];
    snprintf(json, sizeof json, "{\"status\":\"compile_error\",\"error\":\"%s\"}", err);
    kg_feedback_config lim = fc;
    lim.max_error_chars = 600;
    char *f = feedback_of(&lim, json);
    const char *body = strchr(f, '\n') + 1;
    checks += 4;
    if (strlen(body) > 600) failures++, fprintf(stderr, "FAIL truncation: %zu bytes > 600\n", strlen(body));
    if (strncmp(body, "Traceback (most recent call last):", 34) != 0) failures++, fprintf(stderr, "FAIL truncation lost the head\n");
    if (!strstr(body, "TypeError: final reason")) failures++, fprintf(stderr, "FAIL truncation lost the tail\n");
    const char *mark = strstr(body, "[... ");
    size_t omitted = mark ? strtoul(mark + 5, NULL, 10) : 0;
    size_t kept = strlen(body) - (strstr(mark ? mark : body, "]\n") + 2 - (mark ? mark - 1 : body));
    if (!mark || omitted + kept != n) failures++, fprintf(stderr, "FAIL truncation count: %zu omitted + %zu kept != %zu\n", omitted, kept, n);
    printf("truncated a %zu-byte error to %zu bytes (%zu omitted)\n", n, strlen(body), omitted);
    free(f);

    /* UTF-8: two-byte characters are never split. */
    char *u = malloc(2 * 3000 + 1);
    for (int i = 0; i < 3000; i++) memcpy(u + 2 * i, "\xc3\xa9", 2);
    u[6000] = '\0';
    for (size_t lim2 = 100; lim2 < 140; lim2++) {
        char *t = kg_truncate_middle(u, lim2);
        checks++;
        if (kg_utf8_invalid_at(t) != -1 || strlen(t) > lim2) {
            failures++;
            fprintf(stderr, "FAIL utf-8 truncation to %zu: %zu bytes, bad at %ld\n", lim2, strlen(t), kg_utf8_invalid_at(t));
        }
        free(t);
    }
    char *same = kg_truncate_middle("short", 100);
    checks++;
    if (strcmp(same, "short") != 0) failures++, fprintf(stderr, "FAIL short text changed\n");
    free(same);
    free(u);
    free(err);

    printf("feedback: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
